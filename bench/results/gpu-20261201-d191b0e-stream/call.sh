#!/bin/bash
# session 28, call 2: the streaming GEMM (kernels/stream.cu; step configurations 20-21). test_gpu_skinny, then the whole gpu suite; decode tuned (stream configurations in) vs DS_FAST_STREAM=0, alternating, twice (b1/2/4/8 ctx 512, b8 ctx 2048, tuning log); CUPTI traces of b8 ctx 512 with the stream GEMMs forced (PDL on) and with configuration 2 forced.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j /tmp/logs
: > $OUT/suite.txt
for t in bin/test_gpu_skinny bin/test_gpu_*; do [ $t = bin/test_gpu_skinny ] && [ -s $OUT/suite.txt ] && continue; s=$(date +%s); timeout 200 $t > /tmp/logs/$(basename $t).log 2>&1; rc=$?; echo "$(basename $t) rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && { echo "== $t"; grep -E "ERROR|FAIL|LINE|differ" /tmp/logs/$(basename $t).log | head -30; } >> $OUT/suite.txt; done
grep -E "kept configuration" /tmp/logs/test_gpu_skinny.log >> $OUT/suite.txt
cat $OUT/suite.txt
pts="^ +[0-9]+ +(512|2048) "
: > $OUT/ab.txt
for r in 1 2; do
  for sg in unset 0; do
    echo "== tuned, DS_FAST_STREAM=$sg round $r" >> $OUT/ab.txt
    if [ $sg = unset ]; then e=""; else e="DS_FAST_STREAM=0"; fi
    env $e DS_FAST_TUNE_LOG=1 DECODE_POINTS=1:512,2:512,4:512,8:512,8:2048 timeout 150 bin/bench_gpu $OUT/j decode 2> /tmp/logs/tune-$sg-r$r.log | clean | grep -E "$pts" >> $OUT/ab.txt
  done
done
for b in 8 4; do for bk in 2 20 21 0 16; do grep "bucket $b round" /tmp/logs/tune-unset-r1.log | grep " configuration $bk:" | awk -v b=$b -v k=$bk '{print "bucket", b, "cfg", k, $NF, $(NF-1)}' | sort -k5 -n | head -1; done; done >> $OUT/ab.txt
cat $OUT/ab.txt
DS_FAST_GRAPH_TUNE=0 DS_FAST_STREAM=1 DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/s1.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $OUT/j decode > /tmp/logs/trace-s1.log 2>&1
DS_FAST_GRAPH_TUNE=0 DS_CUDA_PDL=0 DS_FAST_STREAM=0 DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/s0.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $OUT/j decode > /tmp/logs/trace-s0.log 2>&1
gzip -c /tmp/s1.trace > $OUT/s1.trace.gz; gzip -c /tmp/s0.trace > $OUT/s0.trace.gz
grep -E "$pts" /tmp/logs/trace-s*.log >> $OUT/ab.txt
tar -czf $OUT/logs.tar.gz -C /tmp logs; rm -rf $OUT/j
ls -la $OUT

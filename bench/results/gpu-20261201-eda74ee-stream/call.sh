#!/bin/bash
# session 28, call 3: streaming GEMM variants (ring 3x2048 / 6x1024 / 11x512) and bench_gpu stream (each decode GEMM alone, back to back over 16 layers, vs the fast path's pick; with PDL; weight stream alone). test_gpu_skinny, test_gpu_backend; decode with the stream GEMMs forced (each variant, b1/b8 ctx 512) and tuned (b8 ctx 512/2048).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j /tmp/logs
: > $OUT/suite.txt
for t in bin/test_gpu_skinny bin/test_gpu_backend; do s=$(date +%s); timeout 200 $t > /tmp/logs/$(basename $t).log 2>&1; rc=$?; echo "$(basename $t) rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && { echo "== $t"; grep -E "ERROR|FAIL|LINE|differ" /tmp/logs/$(basename $t).log | head -30; } >> $OUT/suite.txt; done
cat $OUT/suite.txt
timeout 200 bin/bench_gpu $OUT/j stream 2>&1 | clean > $OUT/stream.txt
cat $OUT/stream.txt
pts="^ +[0-9]+ +(512|2048) "
: > $OUT/ab.txt
for v in 0 1 2; do
  echo "== forced stream variant $v (PDL on, no tuning)" >> $OUT/ab.txt
  DS_FAST_GRAPH_TUNE=0 DS_FAST_STREAM=1 DS_FAST_STREAM_VARIANT=$v DECODE_POINTS=1:512,8:512 timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" >> $OUT/ab.txt
done
echo "== tuned (default)" >> $OUT/ab.txt
DS_FAST_TUNE_LOG=1 DECODE_POINTS=8:512,8:2048 timeout 100 bin/bench_gpu $OUT/j decode 2>/tmp/logs/tune.log | clean | grep -E "$pts" >> $OUT/ab.txt
cat $OUT/ab.txt
tar -czf $OUT/logs.tar.gz -C /tmp logs; tar -czf $OUT/json.tar.gz -C $OUT j; rm -rf $OUT/j

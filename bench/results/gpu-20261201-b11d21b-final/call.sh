#!/bin/bash
# session 28, call 6: the session's final code (the stream GEMM for the layers' decode GEMMs of 1-8 rows, not the LM head; step configurations 20-21). bench/gpu/run.sh (whole gpu suite, decode table, verify pass); decode tuned vs DS_FAST_STREAM=0 alternating twice (b1/b8 ctx 512, b8 ctx 2048, tuning log); stream forced (variants 0, 1) at b8 ctx 512.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_RUNS="decode verify" BENCH_TIMEOUT=200 bash ./run.sh > $OUT/run.log 2>&1
grep -E "=== test" $OUT/tests.log | grep -v "rc=0" ; grep -c "rc=0" $OUT/tests.log
grep -E "^ +[0-9]+ +(512|2048) |ratio" $OUT/bench.log | head -20
mkdir -p $OUT/j /tmp/logs
pts="^ +[0-9]+ +(512|2048) "
: > $OUT/ab.txt
for r in 1 2; do
  for sg in unset 0; do
    echo "== tuned, DS_FAST_STREAM=$sg round $r" >> $OUT/ab.txt
    if [ $sg = unset ]; then e=""; else e="DS_FAST_STREAM=0"; fi
    env $e DS_FAST_TUNE_LOG=1 DECODE_POINTS=1:512,8:512,8:2048 timeout 120 bin/bench_gpu $OUT/j decode 2> /tmp/logs/tune-$sg-r$r.log | clean | grep -E "$pts" >> $OUT/ab.txt
  done
done
for v in 0 1; do
  echo "== forced stream variant $v (PDL on, no tuning)" >> $OUT/ab.txt
  DS_FAST_GRAPH_TUNE=0 DS_FAST_STREAM=1 DS_FAST_STREAM_VARIANT=$v DECODE_POINTS=8:512 timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" >> $OUT/ab.txt
done
for b in 8; do for bk in 2 3 20 21 0; do grep "bucket $b round" /tmp/logs/tune-unset-r1.log | grep " configuration $bk:" | awk -v b=$b -v k=$bk '{print "bucket", b, "cfg", k, $NF, $(NF-1)}' | sort -k5 -n | head -1; done; done >> $OUT/ab.txt
cat $OUT/ab.txt
tar -czf $OUT/logs.tar.gz -C /tmp logs; rm -rf $OUT/j

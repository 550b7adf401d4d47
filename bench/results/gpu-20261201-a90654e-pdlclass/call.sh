#!/bin/bash
# session 26, call 7: the graph tuning also tries PDL on some kernel classes only (4 more step configurations): test_gpu_skinny, test_gpu_engine, test_gpu_backend; decode at batch 1-64 (ctx 512 and 2048) twice with the tuning log.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
: > $OUT/suite.txt
for t in test_gpu_skinny test_gpu_engine test_gpu_backend; do s=$(date +%s); timeout 150 bin/$t > $OUT/t.log 2>&1; rc=$?; echo "$t rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && tail -40 $OUT/t.log >> $OUT/suite-fail.log; grep "kept configuration" $OUT/t.log >> $OUT/kept.log; done
rm -f $OUT/t.log; cat $OUT/suite.txt
mkdir -p $OUT/j $OUT/logs
pts="^ +[0-9]+ +(512|2048) "
for r in 1 2; do
  DS_FAST_TUNE_LOG=1 DECODE_POINTS=1:512,8:512,32:512,64:512,8:2048,32:2048 timeout 120 bin/bench_gpu $OUT/j decode 2> $OUT/logs/tune$r.log | clean | grep -E "$pts" > $OUT/decode$r.log
  echo "== $r"; cat $OUT/decode$r.log
done
tar -czf $OUT/logs.tar.gz -C $OUT logs; rm -rf $OUT/j $OUT/logs

#!/bin/bash
# session 26, call 1: 1c90642 (interleaved graph tuning). gpu suite; decode b1/8/32 at ctx 512/2048 twice with the tuning log; forced attention splits 2/4/8/16 at b8/b32; b128/b256 ctx 512 with the tuning log.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
: > $OUT/suite.txt
for t in bin/test_gpu_*; do s=$(date +%s); timeout 200 $t > $OUT/t.log 2>&1; rc=$?; echo "$(basename $t) rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && tail -30 $OUT/t.log >> $OUT/suite-fail.log; done
cat $OUT/suite.txt
mkdir -p $OUT/j
pts="^ +[0-9]+ +(512|2048) "
for r in 1 2; do
  DS_FAST_TUNE_LOG=1 DECODE_POINTS=1:512,8:512,32:512,8:2048,32:2048 timeout 120 bin/bench_gpu $OUT/j decode 2> $OUT/tune-default$r.log | clean | grep -E "$pts" > $OUT/decode-default$r.log
  echo "== default $r"; cat $OUT/decode-default$r.log
done
for s in 2 4 8 16; do
  DS_FAST_ATTN_SPLIT=$s DECODE_POINTS=8:512,32:512,8:2048,32:2048 timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" > $OUT/decode-split$s.log
  echo "== split $s"; cat $OUT/decode-split$s.log
done
DS_FAST_TUNE_LOG=1 DECODE_POINTS=128:512,256:512 timeout 120 bin/bench_gpu $OUT/j decode 2> $OUT/tune-big.log | clean | grep -E "$pts" > $OUT/decode-big.log
echo "== big"; cat $OUT/decode-big.log
rm -rf $OUT/j

#!/bin/bash
# session 24, call 6: cuBLASLt runner-ups tried in the decode graph tuning (99a257c): the gpu suite; decode at 1:512, 8:512, 32:512, 8:2048, 32:2048 with the runner-ups (default) and without (DS_FAST_LT_ALT=0), two processes each, alternating.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 200 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
export DECODE_POINTS=1:512,8:512,32:512,8:2048,32:2048
for r in 1 2; do
  mkdir -p $OUT/alt$r $OUT/base$r
  timeout 100 bin/bench_gpu $OUT/alt$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-alt$r.log
  DS_FAST_LT_ALT=0 timeout 100 bin/bench_gpu $OUT/base$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-base$r.log
done
for f in alt1 base1 alt2 base2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/alt1 $OUT/alt2 $OUT/base1 $OUT/base2

#!/bin/bash
# session 25, call 1: the mma decode attention's bulk-copy form (DS_FAST_ATTN=mma_bulk): test_gpu_dattn (every variant, incl. mma_bulk, on the hardware), bench attn with the bulk sweeps, decode default vs mma_bulk alternating twice.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
s=$(date +%s); timeout 150 bin/test_gpu_dattn > $OUT/tests.log 2>&1; echo "test_gpu_dattn rc=$? ($(( $(date +%s) - s )) s)" | tee $OUT/suite.txt
tail -5 $OUT/tests.log
mkdir -p $OUT/j
ATTN_POINTS=8:512,32:512,8:2048,1:8192,64:2048,256:640 timeout 200 bin/bench_gpu $OUT/j attn 2>&1 | clean > $OUT/attn.log
grep -vE "pipe us" $OUT/attn.log | tail -40
export DECODE_POINTS=1:512,8:512,32:512,8:2048,32:2048,64:512
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-mma$r.log
  DS_FAST_ATTN=mma_bulk timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-bulk$r.log
done
for f in mma1 bulk1 mma2 bulk2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2

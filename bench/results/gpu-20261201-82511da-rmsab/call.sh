#!/bin/bash
# session 25, call 8: RMSNorm's register form against its loop form (DS_RMSNORM_LOOP=1) at batch 128 and 256 (the final table read 64.3% / 56.9% there, against 70.0% / 60.6% in gpu-20261201-8c81601-final), and at batch 8: decode alternating twice; test_gpu_kernels (the loop form's bits at the register form's sizes).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
timeout 60 bin/test_gpu_kernels > $OUT/tests.log 2>&1; echo "test_gpu_kernels rc=$?" | tee $OUT/suite.txt
export DECODE_POINTS=8:512,128:512,256:512,128:2048,256:2048
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-regs$r.log
  DS_RMSNORM_LOOP=1 timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-loop$r.log
done
for f in regs1 loop1 regs2 loop2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2

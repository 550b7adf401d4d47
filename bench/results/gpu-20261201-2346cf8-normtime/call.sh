#!/bin/bash
# session 25, call 9: split-K partials timed with the RMSNorm that adds them (default) vs the GEMMs alone (DS_FAST_LT_PARTS=gemm, ab90e53's way), and a 21st step configuration (skinny GEMMs, PDL off, fused epilogue, the attention's own split merge): gpu suite; decode alternating twice; the decode profile (each configuration's replay time per bucket).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 200 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
grep -E "FAILED|rror" $OUT/tests.log | head -10
export DECODE_POINTS=1:512,8:512,32:512,64:512,8:2048,32:2048
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-norm$r.log
  DS_FAST_LT_PARTS=gemm timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-gemm$r.log
done
for f in norm1 gemm1 norm2 gemm2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2
mkdir -p $OUT/j
timeout 200 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log; rm -rf $OUT/j
grep "graph tuned" $OUT/profile.log | cut -c1-60

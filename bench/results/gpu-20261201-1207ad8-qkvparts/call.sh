#!/bin/bash
# session 25, call 10: split-K partials for the q/k/v GEMM too, added by the fused decode attention's epilogue (default) vs the RMSNorm's delta only (DS_FAST_LT_PARTS=norm): gpu suite; decode alternating twice; the fast decode profile under the CUPTI timeline.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 200 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
grep -E "FAILED|rror" $OUT/tests.log | head -10
export DECODE_POINTS=8:512,32:512,64:512,8:2048,32:2048
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-qkv$r.log
  DS_FAST_LT_PARTS=norm timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-norm$r.log
done
for f in qkv1 norm1 qkv2 norm2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2
mkdir -p $OUT/j
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 150 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz; rm -rf $OUT/j

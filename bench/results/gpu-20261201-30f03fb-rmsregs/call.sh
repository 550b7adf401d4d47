#!/bin/bash
# session 25, call 3: rmsnorm register form with unconditional loads (call 2 had them under branches: 2x slower) + mma_bulk: gpu suite; decode mma vs mma_bulk alternating twice; the fast decode profile under the CUPTI timeline.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 200 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
export DECODE_POINTS=1:512,8:512,32:512,64:512,8:2048,32:2048
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-mma$r.log
  DS_FAST_ATTN=mma_bulk timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-bulk$r.log
done
for f in mma1 bulk1 mma2 bulk2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2
mkdir -p $OUT/j
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 240 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz; ls -la $OUT/prof.trace.gz; rm -rf $OUT/j

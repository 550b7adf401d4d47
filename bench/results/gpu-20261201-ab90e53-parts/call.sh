#!/bin/bash
# session 25, call 5: split-K partials summed by the RMSNorm, its partials kernel at 1024 threads with every part loaded at once (call 4: 256 threads, part after part) (GEMMs into the RMSNorm's delta may be cuBLASLt over 2/4/8 K slices as a strided batch, no reduce kernel; DS_FAST_LT_PARTS=0: off): gpu suite; decode with partials vs DS_FAST_LT_PARTS=0 alternating twice; the fast decode profile (partials on) under the CUPTI timeline.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 200 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
grep -E "FAILED|rror" $OUT/tests.log | head -10
export DECODE_POINTS=1:512,8:512,32:512,64:512,8:2048,32:2048
for r in 1 2; do
  mkdir -p $OUT/a$r $OUT/b$r
  timeout 100 bin/bench_gpu $OUT/a$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-parts$r.log
  DS_FAST_LT_PARTS=0 timeout 100 bin/bench_gpu $OUT/b$r decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode-noparts$r.log
done
for f in parts1 noparts1 parts2 noparts2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/a1 $OUT/a2 $OUT/b1 $OUT/b2
mkdir -p $OUT/j
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 240 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz; rm -rf $OUT/j

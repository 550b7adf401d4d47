#!/bin/bash
# session 24, call 2: det-first admission (34d18b5): the gpu suite (test_gpu_engine's harness scenarios now draw the admission policy too); e2e fast, dvr-10%, dvr-10%-det-first, dvr-50%-det-first, two rounds.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in bin/test_gpu_*; do s=$(date +%s); echo "=== $t" >> $OUT/tests.log; timeout 300 $t >> $OUT/tests.log 2>&1; echo "$(basename $t) rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-10%-det-first,dvr-50%-det-first E2E_REPEAT=2 timeout 420 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)|REF steps by|rows a step on ref" $OUT/e2e.log

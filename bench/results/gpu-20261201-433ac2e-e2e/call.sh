#!/bin/bash
# session 24, call 3: det-first with the running list deterministic-first (3b23dcd): test_gpu_engine; e2e fast, dvr-10%, dvr-10%-det-first, dvr-50%, dvr-50%-det-first, two rounds.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
timeout 120 bin/test_gpu_engine > $OUT/test_gpu_engine.log 2>&1; echo "test_gpu_engine rc=$?"; grep -E "PASSED|FAILED" $OUT/test_gpu_engine.log
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-10%-det-first,dvr-50%,dvr-50%-det-first E2E_REPEAT=2 timeout 540 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)|REF steps by|rows a step on ref|round" $OUT/e2e.log

#!/bin/bash
# session 22, call 2: gpu suite, fast-step profile and ablation, passprof (incl. the 2048-row point), e2e fast + dvr-10% twice.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_RUNS="profile ablate passprof" BENCH_TIMEOUT=300 bash ./run.sh > $OUT/run.log 2>&1
tail -5 $OUT/run.log
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% E2E_REPEAT=2 timeout 200 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)" $OUT/e2e.log

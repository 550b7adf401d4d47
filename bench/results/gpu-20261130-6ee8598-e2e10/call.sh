#!/bin/bash
# session 22, call 1 (the script of session 21 call 6, rerun at 6ee8598): e2e fast and dvr-10% with the rows each step ran on each path.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 130 bin/bench_gpu $OUT/e e2e 2>&1 | sed 's/cuda: generating weights[^l]*//' > $OUT/e2e.log
grep -E "^(fast|dvr)|rows a step" $OUT/e2e.log

#!/bin/bash
# session 24, call 5: the final code (7a1226b): e2e fast, dvr-10% (FCFS), dvr-10%-det-first, three rounds interleaved, with each run's reference GEMM picks logged (DS_REF_GEMM_LOG=1) to see whether the picks explain run-to-run spread.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/e
DS_REF_GEMM_LOG=1 E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-10%-det-first E2E_REPEAT=3 timeout 480 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)|REF steps by|round" $OUT/e2e.log

#!/bin/bash
# session 23, call 5: the session's final code (the kernels of 792f664 in libdskernels.so): the gpu suite, the decode table, e2e fast + dvr-10% twice each.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_RUNS="decode" BENCH_TIMEOUT=300 bash ./run.sh > $OUT/run.log 2>&1
grep -E "=== test|FAILED" $OUT/tests.log | grep -v "rc=0" ; grep -c "rc=0" $OUT/tests.log
grep -E "^ +[0-9]+ +(512|2048) " $OUT/bench.log
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% E2E_REPEAT=2 timeout 240 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)|run [0-9]" $OUT/e2e.log

#!/bin/bash
# session 26, call 6: the session's final code (interleaved graph tuning, early epilogue copies in the fused decode attention): bench/gpu/run.sh (gpu suite, decode table, verify pass); e2e fast / dvr-10% / dvr-10%-det-first / dvr-50% / dvr-50%-det-first, one round.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_RUNS="decode verify" BENCH_TIMEOUT=200 bash ./run.sh > $OUT/run.log 2>&1
grep -E "=== test" $OUT/tests.log | grep -v "rc=0" ; grep -c "rc=0" $OUT/tests.log
grep -E "^ +[0-9]+ +(512|2048) " $OUT/bench.log
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-10%-det-first,dvr-50%,dvr-50%-det-first timeout 330 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr|invariant)" $OUT/e2e.log
tar -czf $OUT/json.tar.gz -C $OUT e && rm -rf $OUT/e

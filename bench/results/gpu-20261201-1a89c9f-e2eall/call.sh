#!/bin/bash
# session 27, call 1: the twenty-sixth session's final fast path (5ed688b + progressive e2e lines): e2e in the modes whose README rows were the twenty-first session's (dvr-0%, dvr-100%, invariant), with fast and dvr-10%, one round.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-100%,invariant,dvr-10% timeout 450 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "round|^(fast|dvr|invariant)" $OUT/e2e.log
tar -czf $OUT/json.tar.gz -C $OUT e && rm -rf $OUT/e

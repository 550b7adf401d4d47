#!/bin/bash
# session 20, call 4: why dvr-10% trails invariant (0.970 vs 0.977 in call 3): e2e with per-step traces,
# dvr-10% then invariant, and again in the other order.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/e $o/e2
clean() { sed 's/cuda: generating weights[^l]*//'; }
export E2E_TRACE=1 E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256
E2E_CONFIGS=dvr-10%,invariant timeout 200 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
E2E_CONFIGS=invariant,dvr-10% timeout 200 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e2.log
grep -E "^(fast|dvr|invariant)" $o/e2e2.log
tar -czf $o/json.tar.gz -C $o e e2 && rm -rf $o/e $o/e2

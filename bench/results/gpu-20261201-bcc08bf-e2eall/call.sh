#!/bin/bash
# session 26, call 9: bcc08bf (the final fast path, as ad3e51e): e2e in every mode the issue names (fast, dvr-0%, dvr-10%, dvr-50%, dvr-100%, invariant), one round.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant timeout 250 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr|invariant)" $OUT/e2e.log
tar -czf $OUT/json.tar.gz -C $OUT e && rm -rf $OUT/e

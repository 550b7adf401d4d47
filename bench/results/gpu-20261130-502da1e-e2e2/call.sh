#!/bin/bash
# eighteenth session, call 12 (same code as the final call, 502da1e): a second e2e sample of fast, dvr-10% and dvr-50%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/e
clean() { sed 's/cuda: generating weights[^l]*//'; }
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%
timeout 250 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
tar -czf $o/json.tar.gz -C $o e && rm -rf $o/e

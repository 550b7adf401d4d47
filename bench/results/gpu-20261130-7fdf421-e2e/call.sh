#!/bin/bash
# (kernels as in 1dda46a) e2e of the issue's six configurations; verify pass cost; decode profile.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e
clean() { sed 's/cuda: generating weights[^l]*//'; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $o/tests.log 2>&1; echo "commit $(cat COMMIT)" >> $o/tests.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
timeout 330 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
timeout 100 bin/bench_gpu $o/j verify profile 2>&1 | clean > $o/bench.log
tar -czf $o/json.tar.gz -C $o j e && rm -rf $o/j $o/e
grep -E "^verify pass|graph step" $o/bench.log

#!/bin/bash
# session 19, call 5 (same code as call 4): the DVR policies at 10% deterministic: auto (all REF), split with
# G = 16 and 64, full windows; then auto with the per-step cost rule (ref_step_bias 1).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/e $o/e2
clean() { sed 's/cuda: generating weights[^l]*//'; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $o/e2e.log; echo "commit $(cat COMMIT)" >> $o/e2e.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256
E2E_CONFIGS=dvr-10%,dvr-10%-split,dvr-10%-split-G64,dvr-10%-full-windows timeout 330 bin/bench_gpu $o/e e2e 2>&1 | clean >> $o/e2e.log
grep -E "^(fast|dvr|invariant)|REF steps" $o/e2e.log
E2E_REF_BIAS=1 E2E_CONFIGS=dvr-10% timeout 150 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e-bias1.log
grep -E "^(fast|dvr|invariant)|REF steps" $o/e2e-bias1.log
tar -czf $o/json.tar.gz -C $o e e2 && rm -rf $o/e $o/e2

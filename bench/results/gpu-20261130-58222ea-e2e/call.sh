#!/bin/bash
# run from the repository root on the still-warm machine of gpu-20261130-58222ea-final (the same staged .gpucarry):
cd .gpucarry && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD) && mkdir -p $OUT/e && E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%,invariant timeout 235 stdbuf -oL bin/bench_gpu $OUT/e e2e 2>&1 | sed 's/cuda: generating weights[^l]*//' > $OUT/e2e.log; tar -czf $OUT/json.tar.gz -C $OUT e; rm -rf $OUT/e; cat $OUT/e2e.log | tail -12

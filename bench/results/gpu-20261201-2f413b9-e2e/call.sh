#!/bin/bash
# session 28, call 7: e2e on the session's final code (the stream GEMM off by default): fast, dvr-10%, dvr-10%-det-first, dvr-50%, dvr-50%-det-first, one round (1024 requests, 512 in / 256 out).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-10%-det-first,dvr-50%,dvr-50%-det-first timeout 420 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr|invariant)|tok/s" $OUT/e2e.log | tail -20
tar -czf $OUT/json.tar.gz -C $OUT e && rm -rf $OUT/e

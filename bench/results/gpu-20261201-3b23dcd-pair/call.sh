#!/bin/bash
# session 24, call 4: where det-first's extra time goes (3b23dcd): e2e fast and dvr-10%-det-first with per-step traces (E2E_TRACE=1), one round; bench/gpu/e2e_pair.py pairs them.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/e
E2E_TRACE=1 E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%-det-first timeout 300 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)|REF steps by|rows a step on ref|round" $OUT/e2e.log; ls $OUT/e

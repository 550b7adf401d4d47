#!/bin/bash
# session 23, call 3: fused-norm layers, 1 / rms summed by the residual GEMM's last tile (see COMMIT): the gpu suite (new: test_skinny_fused, test_fused_norm_decode), the decode table (with the kept step configuration), the fast-step profile (every configuration's replay), e2e fast + dvr-10%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_RUNS="decode profile" BENCH_TIMEOUT=300 bash ./run.sh > $OUT/run.log 2>&1
grep -E "=== test|FAILED" $OUT/tests.log | grep -v "rc=0" ; grep -c "rc=0" $OUT/tests.log
grep -E "fused-norm|kept configuration" $OUT/tests.log | head -30
grep -E "^ +[0-9]+ +(512|2048) " $OUT/bench.log
grep -E "graph tuned|graph step" $OUT/bench.log | cut -c1-2000
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 150 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)" $OUT/e2e.log

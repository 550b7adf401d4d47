#!/bin/bash
# session 22, call 9: reference GEMM variants 21-22 (64 x 32 tiles): the gpu suite, the GEMM bench at M <= 64 and 256 on the model's shapes, the decode table (the ref column), the e2e fast / dvr-10%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
BENCH_GEMM_POINTS=down_proj:1,down_proj:16,down_proj:64,o_proj:1,o_proj:16,o_proj:64,qkv_proj:1,qkv_proj:16,qkv_proj:64,down_proj:256,o_proj:256 BENCH_RUNS="gemm decode" BENCH_TIMEOUT=300 bash ./run.sh > $OUT/run.log 2>&1
grep -E "=== test|FAILED" $OUT/tests.log | grep -v "rc=0" ; grep -c "rc=0" $OUT/tests.log
grep -E "W GB/s|^(qkv|o_|down)" $OUT/bench.log | cut -c1-60
grep -E "^ +[0-9]+ +(512|2048) " $OUT/bench.log
mkdir -p $OUT/e
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 150 bin/bench_gpu $OUT/e e2e 2>&1 | clean > $OUT/e2e.log
grep -E "^(fast|dvr)" $OUT/e2e.log

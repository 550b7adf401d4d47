#!/bin/bash
# session 21, call 4: the gemm bench's family bit check, down_proj at M = 256 and 2048 with S = 1 and S = 2 variants.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
mkdir -p $OUT/g
BENCH_GEMM_POINTS=down_proj:256,down_proj:2048 BENCH_GEMM_VARIANTS=3,7,9,16,20 timeout 100 bin/bench_gpu $OUT/g gemm 2>&1 | sed 's/cuda: generating weights[^l]*//' > $OUT/gemm.log
grep -E "^shape|^down|GB/s" $OUT/gemm.log

#!/bin/bash
# session 21, call 5: the S = 2 split-K combine by half exchange: test_gpu_refgemm, test_gpu_engine under the S = 2 table,
# gemm down at M = 256, 2048 and 8192 with variants 3, 7, 9, 20.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
mkdir -p $OUT/g
{ timeout 60 bin/test_gpu_refgemm; echo "=== test_gpu_refgemm rc=$?"; DS_REF_GEMM_TABLE=4096x14336:7 timeout 60 bin/test_gpu_engine; echo "=== test_gpu_engine (S = 2 table) rc=$?"; } > $OUT/tests.log 2>&1
grep -E "===|FAIL|rror" $OUT/tests.log | head
BENCH_GEMM_POINTS=down_proj:256,down_proj:2048,down_proj:8192 BENCH_GEMM_VARIANTS=3,7,9,20 timeout 60 bin/bench_gpu $OUT/g gemm 2>&1 | sed 's/cuda: generating weights[^l]*//' > $OUT/gemm.log
grep -E "^shape|^down|GB/s" $OUT/gemm.log

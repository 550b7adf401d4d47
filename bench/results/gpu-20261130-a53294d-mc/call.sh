#!/bin/bash
# session 22, call 7: the multicast variants with CTA-scope arrivals: test_gpu_refgemm, the GEMM bench on the e2e's shapes.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/j
timeout 120 bin/test_gpu_refgemm > $o/refgemm.log 2>&1; rc=$?; echo "test_gpu_refgemm rc=$rc"; grep -E "FAILED|PASSED|rror|differ" $o/refgemm.log | head
[ $rc -ne 0 ] && exit 1
BENCH_GEMM_VARIANTS=3,5,16,18,19,21,22,23,24 BENCH_GEMM_POINTS=down_proj:128,down_proj:256,o_proj:256,qkv_proj:256,gate_up_proj:256,down_proj:2048,qkv_proj:2048,down_proj:512 timeout 200 bin/bench_gpu $o/j gemm 2>&1 | clean > $o/gemm.log
grep "W GB/s" $o/gemm.log

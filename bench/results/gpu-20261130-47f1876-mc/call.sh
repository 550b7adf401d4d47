#!/bin/bash
# session 22, call 6: reference GEMM variants 21..24 (W tiles multicast over clusters of row tiles): test_gpu_refgemm, then the GEMM bench on the e2e's shapes, passprof, and the e2e fast / dvr-10%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/j
timeout 120 bin/test_gpu_refgemm > $o/refgemm.log 2>&1; rc=$?; echo "test_gpu_refgemm rc=$rc"; grep -E "FAILED|PASSED|rror|differ" $o/refgemm.log | head
[ $rc -ne 0 ] && exit 1
BENCH_GEMM_POINTS=down_proj:128,down_proj:256,o_proj:256,qkv_proj:256,gate_up_proj:256,down_proj:2048,o_proj:2048,qkv_proj:2048,down_proj:512 timeout 200 bin/bench_gpu $o/j gemm 2>&1 | clean > $o/gemm.log
tail -40 $o/gemm.log
timeout 100 bin/bench_gpu $o/j passprof 2>&1 | clean > $o/passprof.log
grep -E "rows\)|Mb" $o/passprof.log
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 150 bin/bench_gpu $o/j e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr)" $o/e2e.log

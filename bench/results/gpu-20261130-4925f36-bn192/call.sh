#!/bin/bash
# session 19, call 7: reference GEMM variant 19 (64x192): test_gpu_refgemm, test_gpu_backend; gemm bench at the
# decode/verify sizes with variants 11, 16, 19; passprof; e2e fast + dvr-10%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/g $o/j $o/e
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_refgemm bin/test_gpu_backend; do timeout 100 $t; echo "=== $t rc=$?"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED" $o/tests.log
BENCH_GEMM_POINTS=qkv_proj:128,qkv_proj:256,qkv_proj:512,o_proj:256,down_proj:256,gate_up_proj:256 BENCH_GEMM_VARIANTS=11,16,19 timeout 100 bin/bench_gpu $o/g gemm 2>&1 | clean > $o/gemm.log
grep -E "^(qkv|o_|down|gate)" $o/gemm.log | grep -v "W GB/s" | cut -c1-160
timeout 100 bin/bench_gpu $o/j passprof 2>&1 | clean > $o/bench.log
grep -A14 "^256 decode" $o/bench.log | grep -E "decode|gemm|silu"; grep -E "Mb +256" $o/bench.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%
timeout 150 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
tar -czf $o/json.tar.gz -C $o g j e && rm -rf $o/g $o/j $o/e

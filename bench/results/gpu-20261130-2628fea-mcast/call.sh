#!/bin/bash
# variants 19, 20 (W multicast over clusters of 2 / 4 row tiles): refgemm test; bench gemm (16, 19, 20); backend test; passprof; e2e fast/dvr-10%.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ echo "commit $(cat COMMIT)"; for t in bin/test_gpu_refgemm bin/test_gpu_backend; do s=$(date +%s); timeout 60 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1 &
tp=$!
wait $tp; grep -E "=== |FAILED|rror" $o/tests.log | tail -8
BENCH_GEMM_VARIANTS=16,19,20 timeout 60 bin/bench_gpu $o/j gemm 2>&1 | clean > $o/gemm.log
grep -E "^(qkv_proj|o_proj|down_proj) +(64|128|256|512) " $o/gemm.log | cut -c1-120
timeout 45 bin/bench_gpu $o/j passprof 2>&1 | clean > $o/bench.log
grep -A14 "^256 decode" $o/bench.log | grep -E "decode|gemm|attention|silu"; grep -E "Mb +256 " $o/bench.log
E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 90 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
tar -czf $o/json.tar.gz -C $o j e && rm -rf $o/j $o/e

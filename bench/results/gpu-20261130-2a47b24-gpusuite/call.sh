#!/bin/bash
# session 21, call 1: the bracket fix (269f1db), reference GEMM variant 20 (d825cd6), block_reduce (0f120de): gpu suite;
# gemm points with variants 16/19/20; sample; verify + passprof; e2e of the issue's configurations, dvr-10% twice more.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/g $o/s $o/j $o/e $o/e2
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|sample vocab" $o/tests.log | tail -24
BENCH_GEMM_POINTS=down_proj:256,o_proj:256,down_proj:128,down_proj:512,qkv_proj:256,gate_up_proj:256,down_proj:2048 BENCH_GEMM_VARIANTS=16,19,20 \
  timeout 150 bin/bench_gpu $o/g gemm 2>&1 | clean > $o/gemm.log
tail -30 $o/gemm.log
timeout 100 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -E "^(greedy|temp)" $o/sample.log
timeout 150 bin/bench_gpu $o/j verify passprof 2>&1 | clean > $o/bench.log
grep -E "^verify pass" $o/bench.log; grep -A14 "^256 decode" $o/bench.log | grep -E "decode|sampl|down|gate|o_proj"
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
timeout 300 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)|variant" $o/e2e.log | head -30
E2E_REPEAT=2 E2E_CONFIGS=dvr-10% timeout 200 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e2.log
grep -E "^(fast|dvr|invariant)" $o/e2e2.log
tar -czf $o/json.tar.gz -C $o g s j e e2 && rm -rf $o/g $o/s $o/j $o/e $o/e2

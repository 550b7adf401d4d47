#!/bin/bash
# gpu suite; e2e table; passprof, verify; decode (graph steps vs the roofline).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e $o/d
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
bin/bench_gpu $o/j passprof verify 2>&1 | clean > $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
tar -czf $o/json.tar.gz -C $o j e d && rm -rf $o/j $o/e $o/d
grep -E "=== |PASSED|FAILED|rror" $o/tests.log | tail -20; grep -E "^(fast|dvr|invariant)" $o/e2e.log; grep -A14 "^256 decode\|^4 prompts" $o/bench.log | grep -E "decode|prompts|gate_up|silu|down"; grep -E "verify pass" $o/bench.log; grep -iE "roofline|batch" $o/decode.log | head -20

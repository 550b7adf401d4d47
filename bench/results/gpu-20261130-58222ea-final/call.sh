#!/bin/bash
# final: gpu suite; decode; passprof, verify; e2e dvr-0/10/50/100%, invariant; e2e repeat fast/dvr-10/50/invariant.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e $o/d $o/r
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 100 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
timeout 60 bin/bench_gpu $o/j passprof verify 2>&1 | clean > $o/bench.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
timeout 230 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
E2E_CONFIGS=dvr-10%,dvr-50%,invariant timeout 150 bin/bench_gpu $o/r e2e 2>&1 | clean > $o/e2e-repeat.log
tar -czf $o/json.tar.gz -C $o j e d r && rm -rf $o/j $o/e $o/d $o/r
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log; grep -A14 "^256 decode\|^4 prompts" $o/bench.log | grep -E "decode|prompts"; grep "verify pass" $o/bench.log; grep -E "^(fast|dvr|invariant)" $o/e2e.log $o/e2e-repeat.log

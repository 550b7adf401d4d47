#!/bin/bash
# session 20, call 3: the reference sampler on one block a row, two passes, fp32 exp terms, integer-bit bracket (a761605): gpu
# suite; sample bench; verify + passprof; decode; e2e of the issue's configurations, then dvr-10% again.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/s $o/j $o/d $o/e $o/e2
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|sample vocab" $o/tests.log | tail -24
timeout 100 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -E "^(greedy|temp)" $o/sample.log
timeout 150 bin/bench_gpu $o/j verify passprof 2>&1 | clean > $o/bench.log
grep -E "^verify pass" $o/bench.log; grep -A14 "^256 decode" $o/bench.log | grep -E "decode|sampl"
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
timeout 300 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
E2E_CONFIGS=dvr-10% timeout 120 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e2.log
grep -E "^(fast|dvr|invariant)" $o/e2e2.log
tar -czf $o/json.tar.gz -C $o s j d e e2 && rm -rf $o/s $o/j $o/d $o/e $o/e2

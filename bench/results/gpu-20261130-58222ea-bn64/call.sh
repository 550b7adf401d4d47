#!/bin/bash
# gpu suite; gemm (every variant incl. 128x64); passprof (REF picks); e2e fast/dvr-10/50/invariant.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 200 bin/bench_gpu $o/j gemm passprof 2>&1 | clean > $o/bench.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%,invariant
timeout 240 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
tar -czf $o/json.tar.gz -C $o j e && rm -rf $o/j $o/e
grep -E "^down_proj|^o_proj|^qkv_proj|^gate_up" $o/bench.log | awk '{print $1,$2,"ref",$5,"fast",$7,"ref/fst",$8,"v16..v19",$25,$26,$27,$28}'; grep -A14 "^256 decode\|^4 prompts" $o/bench.log | grep -E "decode|prompts|gemm|attention|silu"; grep -A45 "reference-path GEMM" $o/bench.log | grep -E "Mb +(256|512|2048) "; grep -E "^(fast|dvr|invariant)" $o/e2e.log

#!/bin/bash
# gpu suite; ncu of the reference attention at 256 rows ctx 640 (the pow2 shift, one group per CTA); attn; attnref; passprof; decode; e2e fast/dvr-10/50/invariant.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e $o/d $o/n
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active|dram__throughput.avg.pct_of_peak_sustained_elapsed|gpu__time_duration.sum|smsp__inst_executed.sum|launch__grid_size'
ATTNREF_POINTS=decode_b256_ctx640 timeout 100 ncu --clock-control none --kernel-name regex:attn_mma_kernel --launch-skip 2 --launch-count 1 --metrics "$M" bin/bench_gpu $o/n attnref 2>&1 | grep -v 'generating' > $o/ncu.log
grep -E "attn_mma_kernel|duration.sum  |dram__|inst_executed.sum  |grid_size" $o/ncu.log | cut -c1-150
timeout 200 bin/bench_gpu $o/j attn attnref passprof 2>&1 | clean > $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%,invariant
timeout 200 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
tar -czf $o/json.tar.gz -C $o j e d n && rm -rf $o/j $o/e $o/d $o/n
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/bench.log; grep -E "^(verify|prefill|decode)_" $o/bench.log; grep -A14 "^256 decode" $o/bench.log | grep -E "decode|gemm|attention|silu"; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log; grep -E "^(fast|dvr|invariant)" $o/e2e.log

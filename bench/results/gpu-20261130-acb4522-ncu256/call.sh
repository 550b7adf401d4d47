#!/bin/bash
# (kernels as in 884d967; bench adds the 256 x 640 points) ncu stall reasons of the reference and fast decode attention at 256 rows ctx 640; attn; attnref; passprof; e2e.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e $o/n
clean() { sed 's/cuda: generating weights[^l]*//'; }
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active|dram__throughput.avg.pct_of_peak_sustained_elapsed|gpu__time_duration.sum|smsp__inst_executed.sum|sm__warps_active.avg.pct_of_peak_sustained_active|launch__grid_size|launch__occupancy_limit_.*'
echo "=== ncu fast 256:640" >> $o/ncu.log
ATTN_POINTS=256:640 timeout 100 ncu --clock-control none --kernel-name regex:dattn_mma_kernel --launch-skip 4 --launch-count 1 --metrics "$M" bin/bench_gpu $o/n attn 2>&1 | grep -v 'generating' >> $o/ncu.log
echo "=== ncu ref decode_b256_ctx640" >> $o/ncu.log
ATTNREF_POINTS=decode_b256_ctx640 timeout 100 ncu --clock-control none --kernel-name regex:attn_mma_kernel --launch-skip 2 --launch-count 1 --metrics "$M" bin/bench_gpu $o/n attnref 2>&1 | grep -v 'generating' >> $o/ncu.log
grep -E "===|attn_mma_kernel|duration.sum  |dram__|inst_executed.sum  |grid_size|stalled_.*ratio" $o/ncu.log | awk '$NF+0 > 0.05 || /===|duration|dram|kernel|grid/' | cut -c1-150 | head -70
timeout 200 bin/bench_gpu $o/j attn attnref passprof 2>&1 | clean > $o/bench.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,invariant
timeout 200 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
tar -czf $o/json.tar.gz -C $o j e n && rm -rf $o/j $o/e $o/n
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/bench.log; grep -E "^decode_b256" $o/bench.log; grep -A14 "^256 decode" $o/bench.log | grep -E "decode|gemm|attention|silu|rmsnorm|rope"; grep -E "^(fast|dvr|invariant)" $o/e2e.log

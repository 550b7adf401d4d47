#!/bin/bash
# seventeenth session, call 1 (e8acb99): test_gpu_mega with the new settings; bench mega over the
# settings (tc_seg 1024/512/256, att_pipe, norm_passes 2); then the rest of the gpu suite.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
s=$(date +%s); timeout 200 bin/test_gpu_mega > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== bin/test_gpu_mega rc=$rc ($(( $(date +%s) - s )) s)"; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|segment" $o/tests.log | tail -30
timeout 200 bin/bench_gpu $o/j mega 2>&1 | clean > $o/bench.log
grep -E "^batch|settings" $o/bench.log
{ for t in bin/test_gpu_*; do [ $t = bin/test_gpu_mega ] && continue; s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } >> $o/tests.log 2>&1
grep -E "=== |FAILED" $o/tests.log | tail -20
tar -czf $o/json.tar.gz -C $o j && rm -rf $o/j

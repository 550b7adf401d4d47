#!/bin/bash
# seventeenth session, call 10 (9c63f8e: the fast path's sampler passes with 16-byte loads): gpu suite; sample bench.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/s
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|sample searches" $o/tests.log | tail -24
timeout 100 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -A22 "device sampling" $o/sample.log
tar -czf $o/json.tar.gz -C $o s && rm -rf $o/s

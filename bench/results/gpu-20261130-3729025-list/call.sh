#!/bin/bash
# eighteenth session, call 7 (sampler: filtered rows' searches over a candidate list): kernels test (test_sample, test_sample_search); sample bench; backend and engine tests.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/s
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_kernels bin/test_gpu_backend bin/test_gpu_engine; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|search" $o/tests.log | tail -30
timeout 120 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -A30 "device sampling" $o/sample.log
tar -czf $o/json.tar.gz -C $o s && rm -rf $o/s

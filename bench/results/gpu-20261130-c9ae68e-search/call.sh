#!/bin/bash
# seventeenth session, call 5 (c9ae68e: top-k / top-p searches 3 key bits a pass):
# gpu suite; sample bench; decode.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/d $o/s
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|sample searches|\[  FAILED|fail" $o/tests.log | tail -24
timeout 120 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -A30 "device sampling" $o/sample.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
tar -czf $o/json.tar.gz -C $o d s && rm -rf $o/d $o/s

#!/bin/bash
# seventeenth session, call 9 (798cbb4: a split merge of up to 16 splits in one round of loads):
# gpu suite; profile; kernel timeline at (8, 512).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/t
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED" $o/tests.log | tail -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step" $o/bench.log
n=b8c512; DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $o/t decode > /dev/null 2>&1
gzip -c /tmp/$n.trace > $o/trace-$n.gz
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; grep -E "wall median|layer:|combine|attention " $o/summary.txt | head -12
tar -czf $o/json.tar.gz -C $o j t && rm -rf $o/j $o/t

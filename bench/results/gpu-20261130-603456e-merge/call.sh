#!/bin/bash
# seventeenth session, call 4 (603456e: sampler passes with 8 loads in flight; decode attention's split merge with 16 splits' loads in flight):
# gpu suite; profile; decode; sample bench; kernel timelines at (8, 512) and (32, 512).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/t $o/s
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step" $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
timeout 120 bin/bench_gpu $o/s sample 2>&1 | clean > $o/sample.log
grep -A30 "device sampling" $o/sample.log
for p in 8:512 32:512; do n=b${p%%:*}c${p##*:}
DECODE_POINTS=$p CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $o/t decode > /dev/null 2>&1
gzip -c /tmp/$n.trace > $o/trace-$n.gz; done
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; grep -E "wall median|layer:|combine|sample  " $o/summary.txt
tar -czf $o/json.tar.gz -C $o j d t s && rm -rf $o/j $o/d $o/t $o/s

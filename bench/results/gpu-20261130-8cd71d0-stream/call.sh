#!/bin/bash
# eighteenth session, call 1 (streaming skinny variants 14/15): skinny test first; gpu suite; profile; decode; traces at (8, 512), (32, 512).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/t
clean() { sed 's/cuda: generating weights[^l]*//'; }
timeout 120 bin/test_gpu_skinny > $o/skinny.log 2>&1; echo "skinny rc=$?"; grep -E "FAILED|rror|fail" $o/skinny.log | head -20
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do [ $t = bin/test_gpu_skinny ] && continue; s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step|stream|^ +[01] +[0-9]+ +[0-9]+ +[0-9]+" $o/bench.log | head -60
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
for p in 8:512 32:512; do n=b${p%%:*}c${p##*:}
DECODE_POINTS=$p CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $o/t decode > /dev/null 2>&1
gzip -c /tmp/$n.trace > $o/trace-$n.gz; done
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; grep -E "wall median|layer:" $o/summary.txt
tar -czf $o/json.tar.gz -C $o j d t && rm -rf $o/j $o/d $o/t

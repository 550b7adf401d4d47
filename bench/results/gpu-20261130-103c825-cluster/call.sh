#!/bin/bash
# (the first call of this code, 9a53668, is in ../gpu-20261130-9a53668-cluster: its cluster kernel read through a NULL base in blocks without positions, an illegal address; test_gpu_dattn failed and the profile stopped after batch 1)
# gpu suite (cluster merge bits); profile (graph tuning incl. attn_merge 2); decode; timeline at b8 ctx 512.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/t
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph tuned|graph step" $o/bench.log | sed 's/(skinny.*merge)://' | grep -oE "batch [0-9]+: graph (tuned to configuration [0-9]+|step.*%)|\([01],[01],[01],[0-3],[01],[12]\) [0-9.inf]+"
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
n=b8c512; DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $o/t decode > /dev/null 2>&1
gzip -c /tmp/$n.trace > $o/trace-$n.gz
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; grep -E "wall median|layer:" $o/summary.txt
tar -czf $o/json.tar.gz -C $o j d t && rm -rf $o/j $o/d $o/t

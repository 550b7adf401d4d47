#!/bin/bash
# gpu suite; attn (split sweeps incl. mma-deep and the copy-only diagnostics); decode default vs mma-deep.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/d2
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
timeout 200 bin/bench_gpu $o/j attn 2>&1 | clean > $o/attn.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
DS_FAST_ATTN=mma-deep timeout 150 bin/bench_gpu $o/d2 decode 2>&1 | clean > $o/decode-deep.log
tar -czf $o/json.tar.gz -C $o j d d2 && rm -rf $o/j $o/d $o/d2
grep -E "=== |FAILED|rror" $o/tests.log | tail -20; cat $o/attn.log | tail -45; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log $o/decode-deep.log

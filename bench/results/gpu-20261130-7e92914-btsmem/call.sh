#!/bin/bash
# eighteenth session, call 9 (decode attention mma variant: block-table entries in shared memory): dattn/backend/skinny tests; attn bench; profile; decode.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_dattn bin/test_gpu_backend bin/test_gpu_skinny; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -10
timeout 150 bin/bench_gpu $o/j attn 2>&1 | clean > $o/attn.log
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |forced split" $o/attn.log
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step" $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
tar -czf $o/json.tar.gz -C $o j d && rm -rf $o/j $o/d

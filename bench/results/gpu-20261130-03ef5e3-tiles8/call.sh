#!/bin/bash
# eighteenth session, call 6 (mega: 8-row tensor-core tiles; attention K/V prefetched into L2): mega/skinny/backend tests; bench mega; profile; decode.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/m
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_mega bin/test_gpu_skinny bin/test_gpu_backend; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -30
timeout 200 bin/bench_gpu $o/m mega 2>&1 | clean > $o/mega.log
grep -E "^batch|norm|GEMV|attention: dot|barrier  " $o/mega.log | head -80
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step|graph tuned" $o/bench.log | head -60
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
tar -czf $o/json.tar.gz -C $o j d m && rm -rf $o/j $o/d $o/m

#!/bin/bash
# seventeenth session, call 11 (3ff217b: review refactors: the split merge as one path; bench_gpu's
# event_median): gpu suite; attn (one point), attnref (one point), sample, gemm (first lines), profile.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 120 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED" $o/tests.log | tail -12
ATTN_POINTS=8:2048 ATTNREF_POINTS=decode_b8_ctx512 timeout 60 bin/bench_gpu $o/j attn attnref sample 2>&1 | clean > $o/bench.log; echo "attn/attnref/sample rc=$?"
grep -E "^copy|^ +8 +2048|decode_b8_ctx512|^greedy +(1|32) " $o/bench.log
timeout 25 bin/bench_gpu $o/j gemm 2>&1 | clean > $o/gemm.log; echo "gemm rc=$? (timeout 124 expected)"; sed -n 3,8p $o/gemm.log
timeout 70 bin/bench_gpu $o/j profile 2>&1 | clean > $o/profile.log; echo "profile rc=$?"; grep -E "graph step" $o/profile.log
tar -czf $o/json.tar.gz -C $o j && rm -rf $o/j

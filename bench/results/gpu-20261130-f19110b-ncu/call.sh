#!/bin/bash
# gpu suite; profiler probe; ncu of the fast decode attention (b32 ctx512, b8 ctx2048); attn; decode; e2e fast/dvr-10/50/invariant.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/e $o/d $o/n
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
{ ls /usr/local/cuda/bin; which ncu nsys; ls -d /opt/nvidia* /usr/local/cuda/nsight* 2>/dev/null; } > $o/probe.log 2>&1
NCU=$(which ncu 2>/dev/null || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
cat $o/probe.log | tr '\n' ' ' | head -c 1500; echo
if [ -n "$NCU" ]; then
  ATTN_POINTS=32:512,8:2048 timeout 150 $NCU --kernel-name regex:dattn_mma_kernel --launch-skip 4 --launch-count 2 --set full bin/bench_gpu $o/n attn > $o/ncu-attn.log 2>&1
  echo "ncu rc=$?"; tail -5 $o/ncu-attn.log
fi
timeout 200 bin/bench_gpu $o/j attn 2>&1 | clean > $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%,invariant
timeout 200 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
tar -czf $o/json.tar.gz -C $o j e d n && rm -rf $o/j $o/e $o/d $o/n
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |fast us|copyonly us" $o/bench.log; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log; grep -E "^(fast|dvr|invariant)" $o/e2e.log

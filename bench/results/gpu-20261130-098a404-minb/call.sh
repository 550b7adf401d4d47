#!/bin/bash
# A/B of attn_mma's minimum-blocks setting: gpu suite with MINB=3, attnref+passprof both, e2e both.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j1 $o/j3 $o/e1 $o/e3
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do DS_ATTN_MMA_MINB=3 timeout 300 $t > /tmp/t.log 2>&1; rc=$?; echo "=== MINB=3 $t rc=$rc"; grep -E "PASSED|FAILED" /tmp/t.log; done; } > $o/tests.log 2>&1
{ echo "=== MINB default"; bin/bench_gpu $o/j1 attnref passprof 2>&1 | clean
  echo "=== MINB=3"; DS_ATTN_MMA_MINB=3 bin/bench_gpu $o/j3 attnref passprof 2>&1 | clean; } > $o/bench.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,invariant
{ echo "=== e2e MINB=3"; DS_ATTN_MMA_MINB=3 bin/bench_gpu $o/e3 e2e 2>&1 | clean
  echo "=== e2e MINB default"; bin/bench_gpu $o/e1 e2e 2>&1 | clean; } > $o/e2e.log
tar -czf $o/json.tar.gz -C $o j1 j3 e1 e3 && rm -rf $o/j1 $o/j3 $o/e1 $o/e3

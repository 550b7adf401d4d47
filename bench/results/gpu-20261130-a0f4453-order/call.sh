#!/bin/bash
# session 19, call 6: the fused kernel's 8-row stream without math, copies as now (diag 1) or 8 whole rows a
# tile step (diag 5), alternating twice; test_gpu_mega.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/m
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
timeout 100 bin/test_gpu_mega; echo "=== test_gpu_mega rc=$?"; } > $o/tests.log 2>&1
grep -E "=== |FAILED" $o/tests.log
for r in a b; do for dg in 1 5; do DS_FAST_MEGA_DIAG=$dg timeout 60 bin/bench_gpu $o/m mega 2>&1 | clean > $o/mega-diag$dg$r.log; done; done
for f in $o/mega-diag1a.log $o/mega-diag5a.log $o/mega-diag1b.log $o/mega-diag5b.log; do echo "== $(basename $f)"; for c in 512 2048; do grep -A14 -E "^batch 8, ctx $c" $f | grep -E "^batch|GEMV" | cut -c1-150; done; grep -E "^batch 1, ctx 512" $f | cut -c1-120; done
rm -rf $o/m

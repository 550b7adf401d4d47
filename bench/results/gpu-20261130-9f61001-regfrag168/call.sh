#!/bin/bash
# session 19, call 3: the 8-row GEMV inputs in registers at 168 registers (spills): test_gpu_mega + suite; mega
# bench with the new layout (diag 0), the old one (diag 2), the new one without math (diag 1); decode + profile.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/d $o/m0 $o/m1 $o/m2
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_mega bin/test_gpu_backend bin/test_gpu_skinny; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|batch 8" $o/tests.log | tail -20
for dg in 0 2 1; do DS_FAST_MEGA_DIAG=$dg timeout 120 bin/bench_gpu $o/m$dg mega 2>&1 | clean > $o/mega-diag$dg.log; done
for dg in 0 2 1; do echo "== diag $dg"; grep -A14 -E "^batch 8, ctx 512" $o/mega-diag$dg.log | grep -E "^batch|GEMV|norm \(|dot products" | cut -c1-150; grep -E "^batch 8, ctx 2048|^batch 1, ctx 512" $o/mega-diag$dg.log | cut -c1-150; done
timeout 150 bin/bench_gpu $o/d decode profile 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ |graph step" $o/decode.log
tar -czf $o/json.tar.gz -C $o d m0 m1 m2 && rm -rf $o/d $o/m0 $o/m1 $o/m2

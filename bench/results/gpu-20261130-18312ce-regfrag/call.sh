#!/bin/bash
# session 19, call 2: the 8-row GEMV inputs in registers (18312ce): test_gpu_mega + suite; mega bench with the
# new layout (diag 0), the old one (diag 2), the new one without math (diag 1); decode + profile.
# (The kernel was built with __maxnreg__(224) at 8 rows: the cooperative launch failed, "too many blocks", so the
# tests failed and the bench's 8-row points did not run; its mega logs hold the 1, 2 and 4-row points.)
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/d $o/m0 $o/m1 $o/m2
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_mega bin/test_gpu_backend bin/test_gpu_skinny bin/test_gpu_engine; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror|batch 8" $o/tests.log | tail -20
for dg in 0 2 1; do DS_FAST_MEGA_DIAG=$dg timeout 120 bin/bench_gpu $o/m$dg mega 2>&1 | clean > $o/mega-diag$dg.log; done
DS_FAST_MEGA_DIAG=0 timeout 120 bin/bench_gpu $o/m0 mega 2>&1 | clean > $o/mega-diag0b.log
grep -E "^batch|gate/up|down GEMV|q/k/v GEMV|o GEMV|norm \(|dot products|barrier" $o/mega-diag0.log $o/mega-diag2.log $o/mega-diag1.log | grep -v "^.*batch [124], " | cut -c1-160
grep -E "^batch" $o/mega-diag0b.log
timeout 150 bin/bench_gpu $o/d decode profile 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ |graph step" $o/decode.log
tar -czf $o/json.tar.gz -C $o d m0 m1 m2 && rm -rf $o/d $o/m0 $o/m1 $o/m2

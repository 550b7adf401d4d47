#!/bin/bash
# session 19, call 1: gpu suite on the review refactors; ncu of the reference GEMM at 256 rows vs cuBLASLt;
# the fused kernel at 8 rows with and without its GEMV math (DS_FAST_MEGA_DIAG=1); decode + profile.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/m $o/m1 $o/n
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
s=$(date +%s)
export BENCH_GEMM_POINTS=down_proj:256 BENCH_GEMM_VARIANTS=16
NS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section WarpStateStats"
timeout 100 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'tma_cfg<64, 128, 9' --launch-skip 8 --launch-count 1 $NS bin/bench_gpu $o/n gemm > $o/ncu-ref.log 2>&1
timeout 100 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'nvjet|xmma|cutlass|splitK|gemm_kernel|Kernel' --launch-skip 40 --launch-count 3 $NS bin/bench_gpu $o/n gemm > $o/ncu-lt.log 2>&1
unset BENCH_GEMM_POINTS BENCH_GEMM_VARIANTS
echo "ncu $(( $(date +%s) - s )) s"; for f in $o/ncu-ref.log $o/ncu-lt.log; do grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Shared|Busy|Grid Size|Registers|Issue Slots" $f | cut -c1-140 | head -40; done
s=$(date +%s); timeout 120 bin/bench_gpu $o/m mega 2>&1 | clean > $o/mega.log; echo "mega $(( $(date +%s) - s )) s"
DS_FAST_MEGA_DIAG=1 timeout 120 bin/bench_gpu $o/m1 mega 2>&1 | clean > $o/mega-diag1.log
grep -E "^batch|gate/up|down GEMV|q/k/v GEMV|o GEMV" $o/mega.log $o/mega-diag1.log
s=$(date +%s); timeout 150 bin/bench_gpu $o/d decode profile 2>&1 | clean > $o/decode.log; echo "decode $(( $(date +%s) - s )) s"
grep -E "^ +[0-9]+ +[0-9]+ |graph step" $o/decode.log
tar -czf $o/json.tar.gz -C $o j d m m1 n && rm -rf $o/j $o/d $o/m $o/m1 $o/n

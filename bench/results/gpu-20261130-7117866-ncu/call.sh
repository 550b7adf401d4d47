#!/bin/bash
# session 20, call 5: ncu of the reference GEMM variant 16 (64x128, 9 stages) at down_proj, M = 256 (the REF step's
# largest premium): is it bound by L2 -> SM traffic (each W tile read by 4 M-tiles, each A slice by 32 N-tiles)?
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/n
export BENCH_GEMM_POINTS=down_proj:256 BENCH_GEMM_VARIANTS=16
NS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
timeout 110 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'64, .int.128, .int.9' --launch-skip 4 --launch-count 1 $NS bin/bench_gpu $o/n gemm > $o/ncu-ref.log 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Hit Rate|Busy|Grid Size" $o/ncu-ref.log | cut -c1-140 | head -30
rm -rf $o/n

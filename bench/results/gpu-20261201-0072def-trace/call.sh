#!/bin/bash
# session 23, call 6: the final code's fast decode profile (batch 1 / 8 / 32, ctx 512) under the CUPTI kernel timeline, to see which kernels (names, grids, device times) the tuned graph step runs, cuBLASLt's included.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 240 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
tail -3 $OUT/profile.log; wc -l /tmp/prof.trace
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz; ls -la $OUT/prof.trace.gz
# kept here (session 23): steps.trace.gz, the kernels of the three step graphs replayed most after the fused batch-1 ones (graphs 80, 203, 326: batch 1 kernel per op, 8, 32), cut from prof.trace.gz (4 MB); trace_summary.txt = bench/gpu/trace_summary.py --top 6 on the whole trace

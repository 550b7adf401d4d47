#!/bin/bash
# session 26, call 8: bcc08bf (the review's l2pf refactor; fast path as in ad3e51e): bench_gpu l2pf.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
timeout 120 bin/bench_gpu $OUT/j l2pf 2>&1 | clean > $OUT/l2pf.log; echo "rc=$?"; cat $OUT/l2pf.log
cp $OUT/j/gpu-l2pf.json $OUT/; rm -rf $OUT/j

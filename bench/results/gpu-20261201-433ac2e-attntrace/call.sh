#!/bin/bash
# session 26, call 4: 433ac2e, attntrace (the fused decode attention's phases inside a decode step) at the default split, forced split 4 and the bulk form.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
timeout 120 bin/bench_gpu $OUT/j attntrace 2>&1 | clean > $OUT/attntrace-default.log; cat $OUT/attntrace-default.log
ATTN_POINTS=8:512,32:512 DS_FAST_ATTN_SPLIT=4 timeout 80 bin/bench_gpu $OUT/j attntrace 2>&1 | clean > $OUT/attntrace-split4.log; cat $OUT/attntrace-split4.log
ATTN_POINTS=8:512,32:512 DS_FAST_ATTN=mma_bulk timeout 80 bin/bench_gpu $OUT/j attntrace 2>&1 | clean > $OUT/attntrace-bulk.log; cat $OUT/attntrace-bulk.log
rm -rf $OUT/j

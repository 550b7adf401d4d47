#!/bin/bash
# session 23, call 8: bench_gpu attn with the new L2-flushed timing of the fast and reference decode attention (one layer), against the repeated (L2-warm) runs it has always reported.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
timeout 240 bin/bench_gpu $OUT/j attn 2>&1 | clean > $OUT/attn.log
grep -vE "at forced split" $OUT/attn.log | head -40

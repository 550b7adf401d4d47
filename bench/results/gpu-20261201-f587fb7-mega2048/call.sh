#!/bin/bash
# session 27, call 3: f587fb7: bench_gpu mega at 1 and 8 rows, ctx 2048 (every setting, the per-layer phases), where the batch-1 step is at 83.7% of the roofline.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/m
MEGA_POINTS=1:2048,8:2048 timeout 200 bin/bench_gpu $OUT/m mega 2>&1 | clean > $OUT/mega-2048.log
cat $OUT/mega-2048.log
tar -czf $OUT/json.tar.gz -C $OUT m && rm -rf $OUT/m

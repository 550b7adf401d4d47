#!/bin/bash
# session 23, call 7: the final code's decode step at batch 8 / 32, ctx 512 / 2048 with the fast decode attention's split forced (DS_FAST_ATTN_SPLIT = default, 1, 2, 4, 8): the kernel timeline of call 6 had attention at 12.3 / 27.0 us a layer (batch 8 / 32, ctx 512), about a third of the copy bandwidth.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for S in 0 1 2 4 8; do
  mkdir -p $OUT/s$S
  echo "=== DS_FAST_ATTN_SPLIT=$S"
  DS_FAST_ATTN_SPLIT=$S DECODE_POINTS=8:512,32:512,8:2048,32:2048 timeout 100 bin/bench_gpu $OUT/s$S decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) "
done 2>&1 | tee $OUT/splits.log

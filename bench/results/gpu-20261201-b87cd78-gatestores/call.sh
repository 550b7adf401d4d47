#!/bin/bash
# session 27, call 4: the fused kernel's attention gate opening once the partials' stores are issued (DS_FAST_MEGA_GATE_AT=stores): test_gpu_mega; bench_gpu mega at 1 row, ctx 512 and 2048; the decode step at batch 1, ctx 512 and 2048, default and stores alternating, twice.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/m $OUT/d
timeout 150 bin/test_gpu_mega > $OUT/test_mega.log 2>&1; echo "test_gpu_mega rc=$?"
MEGA_POINTS=1:512,1:2048 timeout 150 bin/bench_gpu $OUT/m mega 2>&1 | clean > $OUT/mega.log
grep -E "^batch|settings|partials|dot products" $OUT/mega.log
for r in 1 2; do
  for at in dots stores; do
    DS_FAST_MEGA_GATE_AT=$at DECODE_POINTS=1:512,1:2048 timeout 120 bin/bench_gpu $OUT/d decode 2>&1 | clean > $OUT/decode-$at$r.log
    echo "$at $r"; grep -E "^ +1 +(512|2048) " $OUT/decode-$at$r.log
  done
done
tar -czf $OUT/json.tar.gz -C $OUT m d && rm -rf $OUT/m $OUT/d

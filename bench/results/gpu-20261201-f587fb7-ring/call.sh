#!/bin/bash
# session 27, call 2: the fused decode kernel's weight stream against its ring depth: bench_gpu mega at 1 and 8 rows (ctx 512) with the default ring, then 1 row with the ring capped at 32, 24 and 16 slots (DS_FAST_MEGA_SLOTS); test_gpu_mega first (the launch plan's refactor).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/m0 $OUT/m32 $OUT/m24 $OUT/m16
timeout 120 bin/test_gpu_mega > $OUT/test_mega.log 2>&1; echo "test_gpu_mega rc=$?"
MEGA_POINTS=1:512,8:512 timeout 150 bin/bench_gpu $OUT/m0 mega 2>&1 | clean > $OUT/mega-default.log
grep -E "^batch|gate/up|down GEMV|q/k/v GEMV|o GEMV" $OUT/mega-default.log
for s in 32 24 16; do
  DS_FAST_MEGA_SLOTS=$s MEGA_POINTS=1:512 timeout 100 bin/bench_gpu $OUT/m$s mega 2>&1 | clean > $OUT/mega-slots$s.log
  grep -E "^batch|gate/up|down GEMV|q/k/v GEMV|o GEMV" $OUT/mega-slots$s.log
done
tar -czf $OUT/json.tar.gz -C $OUT m0 m32 m24 m16 && rm -rf $OUT/m0 $OUT/m32 $OUT/m24 $OUT/m16

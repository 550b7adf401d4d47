#!/bin/bash
# session 22, call 3: passprof with the forward's wall time and the chunked point (where the e2e's REF prompt step loses ~2 ms).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
timeout 300 bin/bench_gpu $OUT/j passprof 2>&1 | clean > $OUT/passprof.log
grep -E "rows\)|silu_down|attention|gemm_o" $OUT/passprof.log

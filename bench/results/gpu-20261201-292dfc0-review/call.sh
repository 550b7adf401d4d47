#!/bin/bash
# session 25, call 11 (review): RMSNorm's padding-row / source-row lookup shared by its two forms (rms_src_row), and the fast path's three cuBLASLt calls through one helper (lt_matmul): the gpu suite's kernel, backend, skinny and engine tests; decode at batch 8 and 32, ctx 512.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
for t in kernels backend skinny engine; do s=$(date +%s); echo "=== test_gpu_$t" >> $OUT/tests.log; timeout 100 bin/test_gpu_$t >> $OUT/tests.log 2>&1; echo "test_gpu_$t rc=$? ($(( $(date +%s) - s )) s)"; done | tee $OUT/suite.txt
mkdir -p $OUT/a
DECODE_POINTS=8:512,32:512 timeout 60 bin/bench_gpu $OUT/a decode 2>&1 | clean | grep -E "^ +[0-9]+ +(512|2048) " | tee $OUT/decode.log
rm -rf $OUT/a

#!/bin/bash
# session 28, call 10: test_gpu_skinny after stream_takes (one predicate for where the streaming GEMM runs).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
timeout 120 bin/test_gpu_skinny > $OUT/skinny.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|ERROR|LINE" $OUT/skinny.log | head -20

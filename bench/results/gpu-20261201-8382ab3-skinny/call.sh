#!/bin/bash
# session 28, call 9: test_gpu_skinny after its rejects tests share one tail (expect_untouched_free).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
timeout 120 bin/test_gpu_skinny > $OUT/skinny.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|ERROR|LINE" $OUT/skinny.log | head -20

#!/bin/bash
# eighteenth session, call 13: test_gpu_dattn with the block-size-4 case (both block-table paths of the mma attention).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT
{ echo "commit $(cat COMMIT)"; timeout 60 bin/test_gpu_dattn; echo "=== bin/test_gpu_dattn rc=$?"; } > $o/tests.log 2>&1
grep -E "=== |FAILED|OK|rror" $o/tests.log | tail -20

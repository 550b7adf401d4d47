#!/bin/bash
# session 23, call 9: the gpu suite after the review's refactors (the decode attention's own-position writers share one helper; the decode bucket helper).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
cat COMMIT
for t in bin/test_gpu_*; do
  timeout 200 $t > $OUT/$(basename $t).log 2>&1; echo "$(basename $t) rc=$?"
done | tee $OUT/suite.txt

#!/bin/bash
# session 22, call 5 (call 4's script, run again by mistake at 47f1876): passprof under the kernel timeline (bench/gpu/cupti_trace.c): the gaps between kernels of the eager FAST and REF prompt-carrying passes.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j; rm -f /tmp/pp.trace
CUPTI_TRACE=/tmp/pp.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 300 bin/bench_gpu $OUT/j passprof 2>&1 | clean > $OUT/passprof.log
wc -l /tmp/pp.trace; gzip -c /tmp/pp.trace > $OUT/trace-passprof.gz; ls -la $OUT
grep -E "rows\)" $OUT/passprof.log

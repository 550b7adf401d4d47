#!/bin/bash
# session 24, call 1: cuBLASLt candidates with in-place split-K / unsplit (DS_FAST_LT_INPLACE) A/B on the decode step; candidate log; profile under the CUPTI timeline.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
export DECODE_POINTS=1:512,8:512,32:512,8:2048,32:2048
mkdir -p $OUT/a $OUT/b $OUT/j
DS_FAST_LT_LOG=1 timeout 200 bin/bench_gpu $OUT/a decode 2>&1 | clean > $OUT/decode-inplace.log
DS_FAST_LT_INPLACE=0 timeout 200 bin/bench_gpu $OUT/b decode 2>&1 | clean > $OUT/decode-base.log
echo "== inplace"; grep -E "^ +[0-9]+ +(512|2048) " $OUT/decode-inplace.log
echo "== base"; grep -E "^ +[0-9]+ +(512|2048) " $OUT/decode-base.log
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 150 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz; ls -la $OUT/prof.trace.gz
# kept: trace_summary.txt = bench/gpu/trace_summary.py --top 6 on the call's prof.trace.gz (4.2 MB, not kept)

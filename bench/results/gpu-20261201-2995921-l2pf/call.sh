#!/bin/bash
# session 26, call 2: 2nd commit of the session (bench l2pf). bench l2pf; decode b8/b32 with the tuning log (tarred); CUPTI profile with the interleaved tuner.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j $OUT/logs
timeout 150 bin/bench_gpu $OUT/j l2pf 2>&1 | clean > $OUT/l2pf.log; cat $OUT/l2pf.log
DS_FAST_TUNE_LOG=1 DECODE_POINTS=1:512,8:512,32:512,64:512 timeout 120 bin/bench_gpu $OUT/j decode 2> $OUT/logs/tune.log | clean | grep -E "^ +[0-9]+ +(512|2048) " > $OUT/decode.log; cat $OUT/decode.log
CUPTI_TRACE=/tmp/prof.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 240 bin/bench_gpu $OUT/j profile 2>&1 | clean > $OUT/profile.log
gzip -c /tmp/prof.trace > $OUT/prof.trace.gz
cp $OUT/j/gpu-l2pf.json $OUT/ 2>/dev/null; tar -czf $OUT/logs.tar.gz -C $OUT logs; rm -rf $OUT/j $OUT/logs
grep "graph step" $OUT/profile.log

#!/bin/bash
# session 28, call 5: CUPTI traces of the decode step at b8 ctx 512 with the stream GEMMs forced (variants 0 and 1, PDL on) and with configuration 2 (PDL off, cuBLASLt/skinny picks) forced.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
mkdir -p $OUT/j
for v in 0 1; do
DS_FAST_GRAPH_TUNE=0 DS_FAST_STREAM=1 DS_FAST_STREAM_VARIANT=$v DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/s$v.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $OUT/j decode > $OUT/trace$v.log 2>&1
gzip -c /tmp/s$v.trace > $OUT/sv$v.trace.gz
done
DS_FAST_GRAPH_TUNE=0 DS_CUDA_PDL=0 DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/c2.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $OUT/j decode > $OUT/trace2.log 2>&1
gzip -c /tmp/c2.trace > $OUT/cfg2.trace.gz
rm -rf $OUT/j
grep -hE "^ +[0-9]+ +(512|2048) " $OUT/trace*.log

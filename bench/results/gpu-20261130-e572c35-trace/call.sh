#!/bin/bash
# (code: this commit plus bench/gpu/cupti_trace.c, trace_summary.py and the stage.sh lines for them, committed next)
# kernel timeline (bench/gpu/cupti_trace.c) of the graph-replayed decode steps at batch 8 / 32, ctx 512 and batch 8, ctx 2048.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/d
for p in 8:512 32:512 8:2048; do
  n=b${p%%:*}c${p##*:}; rm -f /tmp/$n.trace
  DECODE_POINTS=$p CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 200 bin/bench_gpu $o/d decode 2>&1 | grep -v generating | tail -2
  wc -l /tmp/$n.trace; gzip -c /tmp/$n.trace > $o/trace-$n.gz
done
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; cat $o/summary.txt
# summary.txt here was regenerated afterwards with the per-position split (trace_summary.py of the next commit)

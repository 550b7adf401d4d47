#!/bin/bash
# gpu suite; profile (graph tuning incl. the attention merge configurations); decode; timeline at b8/b32 ctx 512; e2e fast/dvr-10/dvr-50.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/e $o/t
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "graph tuned|graph step" $o/bench.log | sed 's/(skinny.*merge)://' | cut -c1-300; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
for p in 8:512 32:512; do
  n=b${p%%:*}c${p##*:}; rm -f /tmp/$n.trace
  DECODE_POINTS=$p CUPTI_TRACE=/tmp/$n.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $o/t decode > /dev/null 2>&1
  gzip -c /tmp/$n.trace > $o/trace-$n.gz
done
python3 trace_summary.py $o/trace-*.gz > $o/summary.txt 2>&1; grep -E "wall median|layer:" $o/summary.txt
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10%,dvr-50%
timeout 200 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
tar -czf $o/json.tar.gz -C $o j d e t && rm -rf $o/j $o/d $o/e $o/t

#!/bin/bash
# session 22, call 10: passprof with FAST and REF alternating (default), then with FAST always first (PASSPROF_ALTERNATE=0), then alternating again; SM clock and power sampled every 50 ms throughout.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/j1 $o/j2 $o/j3
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > $o/smi.csv 2>&1 &
smi=$!
for i in 1 2 3; do
  alt=1; [ $i = 2 ] && alt=0
  echo "=== passprof $i start $(date +%H:%M:%S.%N | cut -c1-12) PASSPROF_ALTERNATE=$alt" >> $o/marks.txt
  PASSPROF_ALTERNATE=$alt timeout 150 bin/bench_gpu $o/j$i passprof 2>&1 | clean > $o/passprof$i.log
  echo "=== passprof $i end $(date +%H:%M:%S.%N | cut -c1-12)" >> $o/marks.txt
done
kill $smi
cat $o/marks.txt
for i in 1 2 3; do echo "--- $i"; grep -E "rows\)|alternate|first in every" $o/passprof$i.log; done

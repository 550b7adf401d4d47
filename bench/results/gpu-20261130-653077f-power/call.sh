#!/bin/bash
# session 22, call 8: SM clock and power sampled (nvidia-smi, every 100 ms) through the e2e's fast and dvr-10% runs, two rounds: does the all-REF run hold lower clocks?
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/j
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > $o/smi.csv 2>&1 &
smi=$!
E2E_TRACE=1 E2E_REPEAT=2 E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-10% timeout 300 bin/bench_gpu $o/j e2e 2>&1 | clean | while IFS= read -r l; do echo "$(date +%H:%M:%S.%N | cut -c1-12) $l"; done > $o/e2e.log
kill $smi
grep -E "round|^[0-9:.]+ (fast|dvr)" $o/e2e.log
wc -l $o/smi.csv; head -3 $o/smi.csv
tar -czf $o/json.tar.gz -C $o j && rm -rf $o/j

#!/bin/bash
# session 22, call 11: passprof of the last commit (its JSON now records the rounds and the order); the JSON parsed.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j
timeout 150 bin/bench_gpu $OUT/j passprof 2>&1 | clean > $OUT/passprof.log
grep -E "rows\)|alternate" $OUT/passprof.log
python3 -c "import json,sys; d=json.load(open('$OUT/j/gpu-passprof.json')); print('json ok:', d['rounds'], d['alternate'], len(d['points']), 'points')"

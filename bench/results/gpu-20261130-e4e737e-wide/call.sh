#!/bin/bash
# eighteenth session, call 4 (streaming skinny: 1024- and 512-column boxes): skinny test; profile; decode.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d
clean() { sed 's/cuda: generating weights[^l]*//'; }
timeout 120 bin/test_gpu_skinny > $o/skinny.log 2>&1; echo "skinny rc=$?"; grep -E "FAILED|rror|fail" $o/skinny.log | head -20
timeout 150 bin/bench_gpu $o/j profile 2>&1 | clean > $o/bench.log
grep -E "graph step|^ +[01] +[0-9]+ +[0-9]+ +[0-9]+" $o/bench.log | head -60
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
tar -czf $o/json.tar.gz -C $o j d && rm -rf $o/j $o/d

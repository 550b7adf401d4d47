#!/bin/bash
# session 22, call 13: the decode attention with warp-private K/V stages (each warp copies its own 16 positions' rows; warp barriers instead of block barriers): test_gpu_dattn, test_gpu_skinny (the fused q/k/v epilogue), the attention bench and the decode step at batch 8 / 32 (same points as call 12).
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/a $o/d
for t in test_gpu_dattn test_gpu_skinny; do timeout 100 bin/$t > $o/$t.log 2>&1; rc=$?; echo "$t rc=$rc"; grep -E "FAILED|PASSED" $o/$t.log | head -3; [ $rc -ne 0 ] && exit 1; done
ATTN_POINTS=32:512,8:2048,64:512,256:2048 timeout 60 bin/bench_gpu $o/a attn 2>&1 | clean > $o/attn.log
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/attn.log
DECODE_POINTS=8:512,32:512,8:2048,32:2048 timeout 100 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^ +[0-9]+ +(512|2048) " $o/decode.log
tar -czf $o/json.tar.gz -C $o a d && rm -rf $o/a $o/d

#!/bin/bash
# session 22, call 14: same-call A/B of the decode attention: warp-private stages (mma, the default) against the block-barrier kernel (mma_block): test_gpu_dattn, the attention bench, the decode step at batch 8 / 32, alternating twice.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/j
timeout 100 bin/test_gpu_dattn > $o/test_gpu_dattn.log 2>&1; rc=$?; echo "test_gpu_dattn rc=$rc"; grep -E "FAILED|PASSED" $o/test_gpu_dattn.log | head -3; [ $rc -ne 0 ] && exit 1
for v in mma mma_block mma mma_block; do
  ATTN_POINTS=32:512,8:2048,64:512 DS_FAST_ATTN=$v timeout 40 bin/bench_gpu $o/j attn 2>&1 | clean >> $o/attn-$v.log
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/attn-$v.log | tail -3 | sed "s/^/$v /"
done
for v in mma mma_block mma mma_block; do
  DECODE_POINTS=8:512,32:512,8:2048 DS_FAST_ATTN=$v timeout 60 bin/bench_gpu $o/j decode 2>&1 | clean >> $o/decode-$v.log
  grep -E "^ +[0-9]+ +(512|2048) " $o/decode-$v.log | tail -3 | sed "s/^/$v /"
done
rm -rf $o/j

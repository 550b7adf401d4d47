#!/bin/bash
# session 22, call 12: the two-stage decode attention (DS_FAST_ATTN=mma2): test_gpu_dattn, the attention bench and the decode step at batch 8 / 32 with mma and mma2.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
o=$OUT; mkdir -p $o/a1 $o/a2 $o/d1 $o/d2
timeout 100 bin/test_gpu_dattn > $o/dattn.log 2>&1; rc=$?; echo "test_gpu_dattn rc=$rc"; grep -E "FAILED|PASSED|blocks of 128|rror" $o/dattn.log | head
[ $rc -ne 0 ] && exit 1
for v in mma mma2; do
  k=1; [ $v = mma2 ] && k=2
  ATTN_POINTS=32:512,8:2048,64:512,256:2048 DS_FAST_ATTN=$v timeout 60 bin/bench_gpu $o/a$k attn 2>&1 | clean > $o/attn-$v.log
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/attn-$v.log | sed "s/^/$v /"
done
for v in mma mma2; do
  k=1; [ $v = mma2 ] && k=2
  DECODE_POINTS=8:512,32:512,8:2048,32:2048 DS_FAST_ATTN=$v timeout 100 bin/bench_gpu $o/d$k decode 2>&1 | clean > $o/decode-$v.log
  grep -E "^ +[0-9]+ +(512|2048) " $o/decode-$v.log | sed "s/^/$v /"
done
tar -czf $o/json.tar.gz -C $o a1 a2 d1 d2 && rm -rf $o/a1 $o/a2 $o/d1 $o/d2

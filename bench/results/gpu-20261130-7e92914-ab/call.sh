#!/bin/bash
# eighteenth session, call 10: A/B on one machine of the decode attention's block table in shared memory:
# bench_gpu (7e92914) against bench_gpu_old (its parent, the seventeenth session's kernels): attn, then decode, alternating.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j
clean() { sed 's/cuda: generating weights[^l]*//'; }
for r in 1 2; do for b in bench_gpu_old bench_gpu; do
timeout 100 bin/$b $o/j attn 2>&1 | clean > $o/attn-$b-$r.log
echo "== $b attn run $r"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $o/attn-$b-$r.log
done; done
for r in 1 2; do for b in bench_gpu_old bench_gpu; do
timeout 100 bin/$b $o/j decode 2>&1 | clean > $o/decode-$b-$r.log
echo "== $b decode run $r"; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode-$b-$r.log | head -12
done; done
rm -rf $o/j

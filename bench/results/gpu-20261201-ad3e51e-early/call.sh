#!/bin/bash
# session 26, call 5: the fused decode attention copying its q/k/v inputs first without PDL (ds_k_qkv_epi.early): gpu tests (skinny, engine, dattn, backend, kernels); attntrace; decode default vs DS_FAST_ATTN_EARLY=0, two rounds alternating.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
: > $OUT/suite.txt
for t in test_gpu_skinny test_gpu_engine test_gpu_dattn test_gpu_backend test_gpu_kernels; do s=$(date +%s); timeout 150 bin/$t > $OUT/t.log 2>&1; rc=$?; echo "$t rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && tail -40 $OUT/t.log >> $OUT/suite-fail.log; done
rm -f $OUT/t.log; cat $OUT/suite.txt
mkdir -p $OUT/j
ATTN_POINTS=8:512,32:512,8:2048 timeout 100 bin/bench_gpu $OUT/j attntrace 2>&1 | clean > $OUT/attntrace.log; grep -A9 "pdl 0" $OUT/attntrace.log
pts="^ +[0-9]+ +(512|2048) "
export DECODE_POINTS=1:512,8:512,32:512,8:2048,32:2048
for r in 1 2; do
  timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" > $OUT/decode-early$r.log
  DS_FAST_ATTN_EARLY=0 timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" > $OUT/decode-late$r.log
done
for f in early1 late1 early2 late2; do echo "== $f"; cat $OUT/decode-$f.log; done
rm -rf $OUT/j

#!/bin/bash
# session 28, call 1: DS_FAST_LT_PDL (programmatic edges into cuBLASLt's kernels). gpu suite (test_lt_pdl_edge new); decode default vs LT_PDL=1 alternating twice (b8/32/64 ctx 512, b8/32 ctx 2048, tuning log); forced cuBLASLt+PDL graph (no tuning) LT_PDL 0/1 at b8/b32; CUPTI traces of b8 ctx 512 forced, LT_PDL 1 and 0.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
clean() { sed 's/cuda: generating weights[^l]*//'; }
mkdir -p $OUT/j /tmp/logs
: > $OUT/suite.txt
for t in bin/test_gpu_skinny bin/test_gpu_*; do s=$(date +%s); timeout 200 $t > /tmp/logs/$(basename $t).log 2>&1; rc=$?; echo "$(basename $t) rc=$rc ($(( $(date +%s) - s )) s)" >> $OUT/suite.txt; [ $rc -ne 0 ] && { echo "== $t"; tail -40 /tmp/logs/$(basename $t).log; } >> $OUT/suite.txt; done
cat $OUT/suite.txt
pts="^ +[0-9]+ +(512|2048) "
: > $OUT/ab.txt
for r in 1 2; do
  for lt in 0 1; do
    echo "== tuned, lt_pdl $lt round $r" >> $OUT/ab.txt
    DS_FAST_LT_PDL=$lt DS_FAST_TUNE_LOG=1 DECODE_POINTS=8:512,32:512,64:512,8:2048,32:2048 timeout 150 bin/bench_gpu $OUT/j decode 2> /tmp/logs/tune-lt$lt-r$r.log | clean | grep -E "$pts" >> $OUT/ab.txt
  done
done
for r in 1 2; do
  for lt in 0 1; do
    echo "== forced cublaslt+pdl (no tuning, skinny off), lt_pdl $lt round $r" >> $OUT/ab.txt
    DS_FAST_GRAPH_TUNE=0 DS_CUDA_SKINNY=0 DS_FAST_LT_PDL=$lt DECODE_POINTS=8:512,32:512 timeout 100 bin/bench_gpu $OUT/j decode 2>/dev/null | clean | grep -E "$pts" >> $OUT/ab.txt
  done
done
cat $OUT/ab.txt
for lt in 1 0; do
  DS_FAST_GRAPH_TUNE=0 DS_CUDA_SKINNY=0 DS_FAST_LT_PDL=$lt DECODE_POINTS=8:512 CUPTI_TRACE=/tmp/lt$lt.trace LD_PRELOAD=$PWD/devlib/libdscupti.so timeout 100 bin/bench_gpu $OUT/j decode > /tmp/logs/trace-lt$lt.log 2>&1
  gzip -c /tmp/lt$lt.trace > $OUT/lt$lt.trace.gz
done
tar -czf $OUT/logs.tar.gz -C /tmp logs; rm -rf $OUT/j
ls -la $OUT

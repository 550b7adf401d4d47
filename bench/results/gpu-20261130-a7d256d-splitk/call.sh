#!/bin/bash
# session 21, call 2: split-K variant 20 (128x256, S = 2): gpu suite; gemm down_proj with the table's down entry on the S = 2
# family; test_gpu_engine under that table; passprof with and without it; e2e dvr-10% / invariant with it, dvr-10% without.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/g $o/j $o/j2 $o/e $o/e2
clean() { sed 's/cuda: generating weights[^l]*//'; }
T=4096x14336:7
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done
s=$(date +%s); DS_REF_GEMM_TABLE=$T timeout 200 bin/test_gpu_engine > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== test_gpu_engine DS_REF_GEMM_TABLE=$T rc=$rc ($(( $(date +%s) - s )) s)"; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -24
DS_REF_GEMM_TABLE=$T BENCH_GEMM_POINTS=down_proj:1,down_proj:16,down_proj:64,down_proj:128,down_proj:256,down_proj:512,down_proj:2048,down_proj:8192 BENCH_GEMM_VARIANTS=3,7,9,16,20 \
  timeout 150 bin/bench_gpu $o/g gemm 2>&1 | clean > $o/gemm.log
grep -E "^down|GB/s|CTAs|table" $o/gemm.log | head -40
DS_REF_GEMM_TABLE=$T timeout 150 bin/bench_gpu $o/j verify passprof 2>&1 | clean > $o/bench-sk.log
timeout 150 bin/bench_gpu $o/j2 passprof 2>&1 | clean > $o/bench.log
for f in bench-sk bench; do echo "== $f"; grep -E "^verify pass" $o/$f.log; grep -A14 "^256 decode" $o/$f.log | grep -E "decode|sampl|down|o_proj"; grep -A2 "4096, 14336\|4096 14336" $o/$f.log | head -12; done
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256
DS_REF_GEMM_TABLE=$T E2E_REPEAT=2 E2E_CONFIGS=dvr-10%,invariant timeout 280 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e-sk.log
grep -E "^(fast|dvr|invariant)|round" $o/e2e-sk.log
E2E_CONFIGS=dvr-10% timeout 120 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
tar -czf $o/json.tar.gz -C $o g j j2 e e2 && rm -rf $o/g $o/j $o/j2 $o/e $o/e2

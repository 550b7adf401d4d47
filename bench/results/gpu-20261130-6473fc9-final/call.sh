#!/bin/bash
# session 19, call 4 (final code): gpu suite; mega at diag 0 / 1 / 3 (3: no math, each slot freed as it lands);
# verify + profile; decode; e2e of the issue's configurations, then fast + dvr-10% again.
cd "$(dirname "$0")" && . ./libpath.sh && stage_unpack $PWD && export LD_LIBRARY_PATH=$(stage_libpath $PWD)
o=$OUT; mkdir -p $o/j $o/d $o/e $o/e2 $o/m0 $o/m1 $o/m3
clean() { sed 's/cuda: generating weights[^l]*//'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo "commit $(cat COMMIT)"
for t in bin/test_gpu_*; do s=$(date +%s); timeout 300 $t > /tmp/t.log 2>&1; rc=$?; cat /tmp/t.log; echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)"; done; } > $o/tests.log 2>&1
grep -E "=== |FAILED|rror" $o/tests.log | tail -20
for dg in 0 1 3; do DS_FAST_MEGA_DIAG=$dg timeout 100 bin/bench_gpu $o/m$dg mega 2>&1 | clean > $o/mega-diag$dg.log; done
for dg in 0 1 3; do echo "== diag $dg"; grep -A14 -E "^batch 8, ctx 512" $o/mega-diag$dg.log | grep -E "^batch|GEMV|norm \(|dot products" | cut -c1-150; done
timeout 150 bin/bench_gpu $o/j verify profile 2>&1 | clean > $o/bench.log
timeout 150 bin/bench_gpu $o/d decode 2>&1 | clean > $o/decode.log
grep -E "^verify pass|graph step" $o/bench.log; grep -E "^ +[0-9]+ +[0-9]+ " $o/decode.log
export E2E_REQUESTS=1024 E2E_PROMPT_MIN=512 E2E_PROMPT=512 E2E_OUT=256 E2E_CONFIGS=dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant
timeout 300 bin/bench_gpu $o/e e2e 2>&1 | clean > $o/e2e.log
grep -E "^(fast|dvr|invariant)" $o/e2e.log
E2E_CONFIGS=dvr-10% timeout 120 bin/bench_gpu $o/e2 e2e 2>&1 | clean > $o/e2e2.log
grep -E "^(fast|dvr|invariant)" $o/e2e2.log
tar -czf $o/json.tar.gz -C $o j d e e2 m0 m1 m3 && rm -rf $o/j $o/d $o/e $o/e2 $o/m0 $o/m1 $o/m3

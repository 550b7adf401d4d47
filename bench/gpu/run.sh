#!/bin/bash
# run.sh - the one script a GPU run executes: the gpu test suite, then every GPU benchmark.
# Runs from a staged folder (bench/gpu/stage.sh) holding bin/ (test and bench executables),
# devlib/ (runtime libraries the GPU machine lacks) and this script. Writes logs and JSON to
# $OUT (at most 8 files come back): tests.log, bench.log, bench-json.tar.gz (every section's
# JSON). BENCH_RUNS picks the bench sections, ';' between processes. The e2e section runs the
# issue's workload and configurations unless E2E_* say otherwise (about 5 minutes).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
. "$here/libpath.sh"
stage_unpack "$here"
libs=$(stage_libpath "$here")
run() { LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  echo "commit: $(cat "$here/COMMIT" 2>/dev/null)"
} > "$out/tests.log" 2>&1

export E2E_REQUESTS=${E2E_REQUESTS:-1024} E2E_PROMPT=${E2E_PROMPT:-512}
export E2E_PROMPT_MIN=${E2E_PROMPT_MIN:-512} E2E_OUT=${E2E_OUT:-256}
export E2E_CONFIGS=${E2E_CONFIGS:-dvr-0%,dvr-10%,dvr-50%,dvr-100%,invariant}

status=0
for path in "$here"/bin/test_gpu_*; do
  t=$(basename "$path")
  echo "=== $t" >> "$out/tests.log"
  s=$(date +%s)
  run timeout 300 "$here/bin/$t" >> "$out/tests.log" 2>&1
  rc=$?
  echo "=== $t rc=$rc ($(( $(date +%s) - s )) s)" >> "$out/tests.log"
  [ $rc -ne 0 ] && status=1
done
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|=== test|ERROR|FAIL" "$out/tests.log"

# Benches: each ';'-separated group of sections is its own process (a kernel that traps takes
# only its own group down). JSON goes to one archive: a call brings back 8 files at most.
json=$(mktemp -d)
IFS=';' read -r -a groups <<< "${BENCH_RUNS:-gemm attn attnref decode verify profile ablate;e2e}"
: > "$out/bench.log"
for g in "${groups[@]}"; do
  echo "=== bench_gpu $g" | tee -a "$out/bench.log"
  # shellcheck disable=SC2086
  run timeout ${BENCH_TIMEOUT:-360} "$here/bin/bench_gpu" "$json" $g 2>&1 | tee -a "$out/bench.log"
  rc=${PIPESTATUS[0]}
  echo "=== bench_gpu $g rc=$rc" | tee -a "$out/bench.log"
  [ $rc -ne 0 ] && status=1
done
tar -czf "$out/bench-json.tar.gz" -C "$json" .
echo "run.sh: tests and benches done, status $status"
exit $status

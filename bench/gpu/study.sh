#!/bin/bash
# study.sh STAGE GGUF - the DVR studies on the GPU machine, run from the checkout root after the
# SmolLM2 GGUF was joined from its parts (bench/gpu/gguf-parts.sh). STAGE is a folder made by
# `stage.sh BUILD DEST --study` (server, load generator, CLI, libraries). Each study's JSON and
# bench summaries go to <model>/ inside $OUT/study.tar.gz (a call brings back 8 files at most);
# the log to $OUT/study.log:
#   1. rollback rate on SmolLM2 (real weights, real near-ties): W x G x early verification,
#      all requests deterministic, greedy, random-token prompts;
#   2. the same grid on the synthetic presets small and llama3-8b (weights generated on the GPU),
#      for the comparison the issue asks for;
#   3. determinism on SmolLM2: identical greedy probes under background load, fast vs dvr.
# STUDY_PARTS (default "rollback-smollm2 rollback-small rollback-llama3 determinism-smollm2")
# picks what runs, STUDY_BACKEND (default cuda) the backend; each step has its own time limit so one slow step cannot eat the call.
set -u
stage=$(cd "${1:?usage: study.sh STAGE GGUF}" && pwd)
gguf=${2:?usage: study.sh STAGE GGUF}
dest=${OUT:?OUT must be set}
out=/tmp/ds-study
rm -rf "$out"
mkdir -p "$out"
. "$(dirname "$0")/libpath.sh"
stage_unpack "$stage"
libs=$(stage_libpath "$stage")
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
common=(--backend "${STUDY_BACKEND:-cuda}" --server "$stage/bin/detserve" --bench "$stage/bin/detserve-bench"
        --cli "$stage/bin/detserve-cli" --no-plot)
# STUDY_GRID overrides the rollback grid (e.g. a quick local check on the CPU)
read -r -a grid <<< "${STUDY_GRID:---windows 8,16,32,64,128 --groups 1,16 --users 32 --requests 96 --output-len 128 --temperature 0}"

parts=${STUDY_PARTS:-rollback-smollm2 rollback-small rollback-llama3 determinism-smollm2}
log=$dest/study.log
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "commit: $(cat "$stage/COMMIT" 2>/dev/null)"; echo "parts: $parts"; } > "$log"
status=0
step() { # name limit args...
	local name=$1 limit=$2
	shift 2
	case " $parts " in *" $name "*) ;; *) return 0 ;; esac
	local s=$(date +%s)
	echo "=== $name" | tee -a "$log"
	timeout "$limit" python3 "$@" >> "$log" 2>&1
	local rc=$?
	echo "=== $name rc=$rc ($(( $(date +%s) - s )) s)" | tee -a "$log"
	[ $rc -ne 0 ] && status=1
	return 0
}
step rollback-smollm2 200 bench/studies/rollback.py "${common[@]}" --model "$gguf" \
	--out "$out/smollm2" "${grid[@]}"
step rollback-small 120 bench/studies/rollback.py "${common[@]}" --preset small \
	--out "$out/small" "${grid[@]}"
step rollback-llama3 200 bench/studies/rollback.py "${common[@]}" --preset llama3-8b \
	--out "$out/llama3-8b" --windows 8,32 --groups 16 --users 32 --requests 64 --output-len 128 \
	--temperature 0
step determinism-smollm2 150 bench/studies/determinism.py "${common[@]}" --model "$gguf" \
	--out "$out/smollm2" --n 500 --background 500 --rate 300 --max-tokens 128 --temperature 0
tar -czf "$dest/study.tar.gz" -C "$out" .
grep -E "W=|unique|rollbacks/1k|rc=" "$log" | tail -60
exit $status

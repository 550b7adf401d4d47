#!/bin/sh
# run-demo.sh [BUILD_DIR] - README command 1 (`make run`): starts detserve on the CPU with the
# default model and runs a short detserve-cli demo against it: one deterministic request (twice,
# to show the fingerprint repeats) and one normal sampled request, then stops the server with
# SIGTERM (graceful drain, exit 0).
#
# The default model is SmolLM2-135M-Instruct (GGUF, fetched into the cache by
# tools/fetch-smollm2.sh, text prompts through its tokenizer). Offline, it falls back to a
# synthetic `small` model written by detserve-mkmodel into models/default (token-id prompts).
# DETSERVE_MODEL=PATH overrides both.
set -eu
build=${1:-build}
server=$build/server/detserve
cli=$build/client/detserve-cli
mkmodel=$build/tools/detserve-mkmodel
for b in "$server" "$cli" "$mkmodel"; do
	[ -x "$b" ] || { echo "run-demo: $b is missing; run 'make build' first" >&2; exit 1; }
done

model=${DETSERVE_MODEL:-}
synthetic=
if [ -z "$model" ]; then
	if model=$(./tools/fetch-smollm2.sh 2>/dev/null); then
		:
	else
		synthetic=1
		echo "run-demo: SmolLM2 unavailable (offline?); using a synthetic model" >&2
		model=models/default
		if [ ! -f "$model/config.json" ]; then
			mkdir -p models
			"$mkmodel" --preset small --seed 1 --out "$model" >&2
		fi
	fi
fi

log=$(mktemp)
"$server" --model "$model" --backend cpu --port 0 --metrics-port 0 ${synthetic:+--tokenizer none} 2>"$log" &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	rm -f "$log"
}
trap cleanup EXIT INT TERM

port=
i=0
while [ $i -lt 600 ]; do
	port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$log" | head -n 1)
	[ -n "$port" ] && grep -q " ready in " "$log" && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		echo "run-demo: the server exited during start-up" >&2
		exit 1
	fi
	sleep 0.2
	i=$((i + 1))
done
[ -n "$port" ] || { cat "$log" >&2; echo "run-demo: the server did not start" >&2; exit 1; }
sed -n '/ready in/p' "$log"
addr=127.0.0.1:$port

echo "== server info"
"$cli" --addr "$addr" info

chat=
# random synthetic weights print noise as text, so the fallback model shows token ids
if [ -z "$synthetic" ] && "$cli" --addr "$addr" info 2>/dev/null | grep -qi "tokenizer[^a-z]*\(yes\|true\)"; then
	prompt="--prompt"
	text="Deterministic inference means"
	# a chat question through the model's chat template (SmolLM2: ChatML)
	question="What is the capital of France? Answer in one sentence."
	"$cli" --addr "$addr" generate --chat "$question" --max-tokens 1 --quiet >/dev/null 2>&1 &&
		chat=1
else
	prompt="--prompt-ids"
	text="1,2,3,4,5,6,7,8"
fi

if [ -n "$chat" ]; then
	echo
	echo "== chat: \"$question\""
	echo "-- normal request (greedy, fast path)"
	"$cli" --addr "$addr" generate --chat "$question" --max-tokens 48
	echo "-- the same question with deterministic (verified against the reference path)"
	"$cli" --addr "$addr" generate --chat "$question" --max-tokens 48 --deterministic
fi

echo
echo "== deterministic request (seed 7), twice: same tokens, same fingerprint"
"$cli" --addr "$addr" generate $prompt "$text" --deterministic --max-tokens 32 \
	--temperature 0.7 --seed 7
"$cli" --addr "$addr" generate $prompt "$text" --deterministic --max-tokens 32 \
	--temperature 0.7 --seed 7 --unary
echo
echo "== normal request (sampled, server-drawn seed)"
"$cli" --addr "$addr" generate $prompt "$text" --max-tokens 32 --temperature 0.8

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
trap - EXIT INT TERM
tail -n 3 "$log"
rm -f "$log"
echo "run-demo: server stopped (exit $rc)"
exit "$rc"

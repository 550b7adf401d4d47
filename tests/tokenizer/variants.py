#!/usr/bin/env python3
"""Derives pre-tokenizer variants of a real byte-level BPE tokenizer.json, so that the
configurations no shipped vocabulary in the test uses are still checked against HF
`tokenizers`: the Llama-3 regex with ignore_merges, GPT-2's ByteLevel regex with
add_prefix_space, and every Split behavior (with invert) chained in one Sequence.
The vocabulary and merges stay the real ones.

usage: variants.py TOKENIZER_JSON OUTDIR  (writes OUTDIR/<variant>/tokenizer.json)"""
import copy
import json
import os
import sys

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def bytelevel(prefix, regex):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}


def split(pattern, behavior, invert=False):
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


VARIANTS = {
    "llama3-style": (None, True, {"type": "Sequence", "pretokenizers": [
        split({"Regex": LLAMA3}, "Isolated"), bytelevel(False, False)]}),
    "gpt2-prefix-space": (None, False, bytelevel(True, True)),
    "split-behaviors": ({"type": "NFC"}, False, {"type": "Sequence", "pretokenizers": [
        split({"String": " "}, "MergedWithNext"),
        split({"Regex": r"\p{P}+"}, "Contiguous", invert=True),
        split({"Regex": "[aeiou]"}, "MergedWithPrevious"),
        split({"Regex": r"\s"}, "Isolated", invert=True),
        {"type": "Digits", "individual_digits": False},
        bytelevel(False, False)]}),
}


def main():
    base = json.load(open(sys.argv[1], encoding='utf-8'))
    for name, (norm, ignore_merges, pretok) in VARIANTS.items():
        t = copy.deepcopy(base)
        t["normalizer"] = norm
        t["pre_tokenizer"] = pretok
        t["model"]["ignore_merges"] = ignore_merges
        out = os.path.join(sys.argv[2], name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, 'tokenizer.json'), 'w', encoding='utf-8') as f:
            json.dump(t, f, ensure_ascii=False)
    print(f"variants: {', '.join(VARIANTS)} of {sys.argv[1]}")


if __name__ == '__main__':
    main()

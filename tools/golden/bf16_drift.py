#!/usr/bin/env python3
"""How far does bf16 storage alone move transformers' logits? (the bf16 bound in
tests/test_gguf_golden.c)

Compares two fixtures made by make_golden.py: the fp32 one (tests/fixtures/smollm2_golden.json)
and one made with --weights-bf16 --kv-bf16 (transformers given exactly the values our engine
stores: bf16 weights, bf16 KV). For each prompt, over the steps up to and including the first
step where their greedy tokens differ (after it the contexts differ), prints the max |logit
difference| over the tokens in both top-20 lists, and the worst fraction of the test's bf16
tolerance 0.25 + |logit|/32 that it uses. Needs only the standard library.

Usage: bf16_drift.py BF16_FIXTURE [FP32_FIXTURE]"""
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bf = json.load(open(sys.argv[1]))
    fp = json.load(open(sys.argv[2] if len(sys.argv) > 2 else
                        os.path.join(ROOT, "tests", "fixtures", "smollm2_golden.json")))
    worst, worst_frac = 0.0, 0.0
    for i, (pa, pb) in enumerate(zip(fp["prompts"], bf["prompts"])):
        pmax, n = 0.0, 0
        for sa, sb in zip(pa["steps"], pb["steps"]):
            la = dict(zip(sa["top_ids"], sa["top_logits"]))
            lb = dict(zip(sb["top_ids"], sb["top_logits"]))
            for t in la.keys() & lb.keys():
                d = abs(la[t] - lb[t])
                pmax = max(pmax, d)
                worst_frac = max(worst_frac, d / (0.25 + abs(la[t]) / 32))
            n += 1
            if sa["token"] != sb["token"]:
                break
        worst = max(worst, pmax)
        print(f"prompt {i}: {n} steps, max |logit diff| {pmax:.4f}")
    print(f"all: max |logit diff| {worst:.4f}, worst at {100 * worst_frac:.0f}% of "
          f"0.25 + |logit|/32")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden logits for SmolLM2-135M-Instruct (Q4_1 GGUF) from Hugging Face transformers.

An implementation independent of ours: transformers loads the same GGUF (`gguf_file=`,
dequantized to fp32, its own Q/K un-permutation and its own RoPE), and for 5 fixed prompts runs
a 64-token greedy continuation (argmax; ties to the lowest id), recording at every step the
top-20 (token id, logit) and the top-1 minus top-2 gap. Token ids come from the GGUF tokenizer
(transformers builds it from the file's metadata); chat prompts are rendered with the file's own
tokenizer.chat_template through jinja2.

Usage: make_golden.py [GGUF] [OUT_JSON]  (defaults: tools/fetch-smollm2.sh's file,
tests/fixtures/smollm2_golden.json). Needs torch, transformers, accelerate, gguf, jinja2 (CPU is fine)."""
import datetime
import importlib.metadata as md
import json
import os
import subprocess
import sys

import jinja2
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STEPS = 64
TOPK = 20

# (kind, text): "chat" prompts are one user message rendered with the GGUF chat template plus
# the generation prompt; "raw" prompts are tokenized as they are.
PROMPTS = [
    ("chat", "What is the capital of France?"),
    ("raw", "The quick brown fox jumps over the lazy dog. The dog"),
    ("chat", "Write a haiku about the sea."),
    ("raw", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("chat", "Explain in two sentences why the sky is blue."),
]


def gguf_path():
    if len(sys.argv) > 1:
        return sys.argv[1]
    out = subprocess.run([os.path.join(ROOT, "tools", "fetch-smollm2.sh")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def main():
    path = gguf_path()
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        ROOT, "tests", "fixtures", "smollm2_golden.json")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()

    import gguf
    reader = gguf.GGUFReader(path)
    template = reader.fields["tokenizer.chat_template"].contents()
    env = jinja2.Environment()
    tmpl = env.from_string(template)

    results = []
    for kind, text in PROMPTS:
        if kind == "chat":
            rendered = tmpl.render(messages=[{"role": "user", "content": text}],
                                   add_generation_prompt=True)
        else:
            rendered = text
        ids = tok(rendered, add_special_tokens=False)["input_ids"]
        steps = []
        with torch.no_grad():
            x = torch.tensor([ids], dtype=torch.long)
            out = model(x, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1]
            gen = []
            for _ in range(STEPS):
                top = torch.topk(logits, TOPK)
                vals, idx = top.values.tolist(), top.indices.tolist()
                # argmax with ties to the lowest id (topk's order among equals is unspecified)
                best = min(i for i, v in zip(idx, vals) if v == vals[0])
                steps.append({"top_ids": idx, "top_logits": [round(v, 6) for v in vals],
                              "gap": round(vals[0] - vals[1], 6), "token": best})
                gen.append(best)
                out = model(torch.tensor([[best]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1]
        results.append({"kind": kind, "text": text, "rendered": rendered, "prompt_ids": ids,
                        "tokens": gen, "completion": tok.decode(gen), "steps": steps})
        print(f"[{kind}] {text!r} -> {tok.decode(gen)!r}", file=sys.stderr)

    doc = {
        "generator": "tools/golden/make_golden.py",
        "created": datetime.date.today().isoformat(),
        "gguf": os.path.basename(path),
        "gguf_bytes": os.path.getsize(path),
        "versions": {p: md.version(p) for p in ("torch", "transformers", "gguf", "jinja2", "accelerate")},
        "device": "cpu, float32",
        "steps": STEPS,
        "topk": TOPK,
        "prompts": results,
    }
    with open(out_path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()

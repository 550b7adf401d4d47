#!/usr/bin/env python3
"""Golden logits for SmolLM2-135M-Instruct (Q4_1 GGUF) from Hugging Face transformers.

An implementation independent of ours: transformers loads the same GGUF (`gguf_file=`,
dequantized to fp32, its own Q/K un-permutation and its own RoPE), and for 5 fixed prompts runs
a 64-token greedy continuation (argmax; ties to the lowest id), recording at every step the
top-20 (token id, logit) and the top-1 minus top-2 gap. Token ids come from the GGUF tokenizer
(transformers builds it from the file's metadata); chat prompts are rendered with the file's own
tokenizer.chat_template through jinja2.

Usage: make_golden.py [--weights-bf16] [--kv-bf16] [GGUF] [OUT_JSON]  (defaults:
tools/fetch-smollm2.sh's file, tests/fixtures/smollm2_golden.json; with flags the name gains
_bf16w / _bf16kv). --weights-bf16 rounds every dequantized weight to bf16 (round to nearest
even) before running; --kv-bf16 rounds K (after RoPE) and V to bf16 as they enter the KV cache.
Both still compute in fp32. Together they store exactly what our engine stores (bf16 weights,
bf16 KV), so what differs then is only arithmetic order, not precision. Needs torch, transformers, accelerate, gguf, jinja2 (CPU is fine)."""
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


BF16W = "--weights-bf16" in sys.argv
BF16KV = "--kv-bf16" in sys.argv
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


def round_kv_to_bf16(model):
    """K after RoPE and V, rounded as they would be stored in a bf16 KV cache."""
    import transformers.models.llama.modeling_llama as ml
    rope = ml.apply_rotary_pos_emb

    def rope_bf16_k(q, k, cos, sin, *a, **kw):
        q, k = rope(q, k, cos, sin, *a, **kw)
        return q, bf16(k)
    ml.apply_rotary_pos_emb = rope_bf16_k
    for layer in model.model.layers:
        layer.self_attn.v_proj.register_forward_hook(lambda mod, inp, out: bf16(out))


def gguf_path():
    if ARGS:
        return ARGS[0]
    out = subprocess.run([os.path.join(ROOT, "tools", "fetch-smollm2.sh")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def main():
    path = gguf_path()
    suffix = ("_bf16w" if BF16W else "") + ("_bf16kv" if BF16KV else "")
    out_path = ARGS[1] if len(ARGS) > 1 else os.path.join(
        ROOT, "tests", "fixtures", f"smollm2_golden{suffix}.json")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    if BF16W:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    if BF16KV:
        round_kv_to_bf16(model)

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
        "weights": "bf16-rounded" if BF16W else "float32 (dequantized)",
        "kv": "bf16-rounded" if BF16KV else "float32",
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

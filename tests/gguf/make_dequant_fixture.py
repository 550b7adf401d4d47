#!/usr/bin/env python3
"""Writes tests/fixtures/gguf_dequant.json: raw ggml blocks and what the `gguf` PyPI package's
numpy dequantizer (gguf.quants.dequantize) makes of them, as f32 bit patterns.

Blocks are random bytes (seeded) with their fp16 scale fields replaced by finite values, so every
nibble / 6-bit / 2-bit pattern shows up. test_gguf_dequant.c checks model/dequant.c against this
bit for bit. Run: python3 tests/gguf/make_dequant_fixture.py (needs numpy and gguf)."""
import importlib.metadata
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20261129)


def f16_bytes(vals):
    return np.asarray(vals, dtype=np.float16).view(np.uint8)


def blocks(qtype, n_blocks, scale_fields):
    """Random blocks; scale_fields: (byte offset, fp16 magnitude) pairs to overwrite."""
    blck, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off, mag in scale_fields:
        raw[:, off:off + 2] = f16_bytes(rng.uniform(-mag, mag, n_blocks)).reshape(n_blocks, 2)
    return raw.reshape(-1), n_blocks * blck


def case(name, qtype, raw, n):
    vals = dequantize(raw, qtype).astype(np.float32).reshape(-1)
    assert vals.size == n, (name, vals.size, n)
    assert np.all(np.isfinite(vals)), name
    return {
        "name": name,
        "ggml_type": int(qtype),
        "n": int(n),
        "raw_hex": raw.tobytes().hex(),
        "f32_bits": [f"{int(u):08x}" for u in vals.view(np.uint32)],
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "gguf_dequant.json")
    cases = []
    f32 = np.concatenate([rng.normal(0, 2, 60).astype(np.float32),
                          np.array([0.0, -0.0, 1e-40, -3e-39], dtype=np.float32)])
    cases.append(case("F32", T.F32, f32.view(np.uint8), f32.size))
    f16 = np.concatenate([rng.normal(0, 2, 60), [0.0, -0.0, 3e-6, -65504.0]]).astype(np.float16)
    cases.append(case("F16", T.F16, f16.view(np.uint8), f16.size))
    bf = (rng.normal(0, 2, 64).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    cases.append(case("BF16", T.BF16, bf.view(np.uint8), bf.size))
    cases.append(case("Q8_0", T.Q8_0, *blocks(T.Q8_0, 4, [(0, 0.05)])))
    cases.append(case("Q4_0", T.Q4_0, *blocks(T.Q4_0, 4, [(0, 0.05)])))
    cases.append(case("Q4_1", T.Q4_1, *blocks(T.Q4_1, 4, [(0, 0.05), (2, 1.0)])))
    cases.append(case("Q5_0", T.Q5_0, *blocks(T.Q5_0, 4, [(0, 0.05)])))
    cases.append(case("Q5_1", T.Q5_1, *blocks(T.Q5_1, 4, [(0, 0.05), (2, 1.0)])))
    cases.append(case("Q4_K", T.Q4_K, *blocks(T.Q4_K, 2, [(0, 0.01), (2, 0.01)])))
    cases.append(case("Q5_K", T.Q5_K, *blocks(T.Q5_K, 2, [(0, 0.01), (2, 0.01)])))
    cases.append(case("Q2_K", T.Q2_K, *blocks(T.Q2_K, 2, [(80, 0.01), (82, 0.01)])))
    cases.append(case("Q3_K", T.Q3_K, *blocks(T.Q3_K, 2, [(108, 0.01)])))
    cases.append(case("Q6_K", T.Q6_K, *blocks(T.Q6_K, 2, [(208, 0.01)])))
    with open(out, "w") as f:
        json.dump({"generator": "tests/gguf/make_dequant_fixture.py",
                   "gguf_version": importlib.metadata.version("gguf"),
                   "cases": cases}, f, indent=0)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} cases")


if __name__ == "__main__":
    main()

"""test_smollm2_wire.py - determinism over the wire on the real SmolLM2-135M-Instruct (issue 8).

The server runs the GGUF on the CPU. The same deterministic request (a chat `messages` prompt
and a text prompt, each greedy and with a seeded temperature 0.8) is sent N times while 0 and
then 8 other random requests run concurrently: every answer must be one token sequence, one
set of logprobs and one fingerprint, equal to the answer of a `--mode ref-only` server. Also
prints the DVR statistics of every deterministic answer: how often the CPU fast path disagreed
with the reference on this model without any injected mismatch (natural rollbacks).

Uses the helpers of dsharness.py (stubs generated at test time, server on a free port). The
GGUF comes from $DS_SMOLLM2_GGUF or tools/fetch-smollm2.sh; exits 77 (skip) only when the
download is impossible.
"""
import concurrent.futures as cf
import os
import random
import subprocess
import sys
import threading
import time
import unittest

from dsharness import ASAN, Server, grpc, pb

N = 10 if not ASAN else 3           # repetitions of each target per load
LOADS = (0, 8)                      # concurrent random requests
MAX_TOKENS = 16
ENGINE = ["--threads", "2", "--kv-blocks", "256", "--kv-block-size", "16"]
NOISE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "In 1969, astronauts landed on the Moon for the first time.",
    "def add(a, b):\n    return a + b\n",
    "Rain is expected tomorrow afternoon in most of the region.",
    "<|im_start|>user\nTell me a joke about cats.<|im_end|>\n<|im_start|>assistant\n",
]


def gguf_path():
    """(path, None), or (None, why) when the GGUF can't be had."""
    env = os.environ.get("DS_SMOLLM2_GGUF")
    if env:
        return env, None
    script = os.environ.get("DS_FETCH_SMOLLM2") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fetch-smollm2.sh")
    r = subprocess.run([script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return None, r.stderr.strip() or "exit %d" % r.returncode
    return r.stdout.strip(), None


def target(kind, temperature):
    r = pb.GenerateRequest(max_tokens=MAX_TOKENS, deterministic=True, return_logprobs=True)
    if kind == "chat":
        r.messages.messages.extend([
            pb.ChatMessage(role="system", content="You are a helpful assistant."),
            pb.ChatMessage(role="user", content="What is the capital of France? Answer briefly.")])
    else:
        r.prompt_text = "The three primary colors are"
    r.sampling.temperature = temperature
    if temperature:
        r.sampling.seed = 2024
    return r


TARGETS = [(k, t) for k in ("chat", "text") for t in (0.0, 0.8)]


def collect(stream):
    toks, lps, last = [], [], None
    for msg in stream:
        toks.extend(msg.token_ids)
        lps.extend(msg.logprobs)
        if msg.final:
            last = msg
    return toks, lps, last


class DvrTally:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.tokens = self.windows = self.rollbacks = 0
        self.rolled_back = self.recomputed = 0

    def add(self, last, n_tokens):
        with self.lock:
            self.requests += 1
            self.tokens += n_tokens
            self.windows += last.dvr.windows
            self.rollbacks += last.dvr.rollbacks
            self.rolled_back += last.dvr.rolled_back_tokens
            self.recomputed += last.dvr.recomputed_tokens


class TestSmolLM2Wire(unittest.TestCase):
    path = None

    def test_determinism_under_load(self):
        t0 = time.time()
        targets = [target(k, t) for k, t in TARGETS]
        with Server("--model", self.path, "--mode", "ref-only", *ENGINE) as oracle:
            stub = oracle.stub()
            refs = [stub.GenerateUnary(t, timeout=300) for t in targets]
        for (kind, temp), ref in zip(TARGETS, refs):
            self.assertGreater(len(ref.token_ids), 0)
            self.assertTrue(ref.fingerprint)
            print("oracle %s T=%.1f: %d tokens %r, fingerprint %s" % (
                kind, temp, len(ref.token_ids), ref.text, ref.fingerprint), flush=True)
        t_oracle = time.time() - t0
        tally = DvrTally()
        with Server("--model", self.path, "-W", "8", "-G", "4", *ENGINE) as srv:
            stub = srv.stub()
            for load in LOADS:
                stop = threading.Event()
                noise_n = [0]

                def noise(k):
                    rnd = random.Random(k)
                    while not stop.is_set():
                        r = pb.GenerateRequest(max_tokens=rnd.randint(1, MAX_TOKENS),
                                               deterministic=rnd.random() < 0.3,
                                               ignore_eos=rnd.random() < 0.5)
                        if rnd.random() < 0.5:
                            r.prompt_text = rnd.choice(NOISE_TEXTS)[:rnd.randint(5, 80)]
                        else:
                            r.prompt_ids.ids.extend(
                                rnd.randrange(49152) for _ in range(rnd.randint(1, 40)))
                        r.sampling.temperature = rnd.choice([0.0, 0.7, 1.2])
                        r.sampling.seed = rnd.randrange(1 << 63)
                        try:
                            toks, _, last = collect(stub.Generate(r, timeout=300))
                        except grpc.RpcError as e:
                            raise AssertionError("noise request failed: %s" % e.details())
                        if r.deterministic:
                            tally.add(last, len(toks))
                        with tally.lock:
                            noise_n[0] += 1

                tl = time.time()
                with cf.ThreadPoolExecutor(load + 4) as ex:
                    bg = [ex.submit(noise, k) for k in range(load)]

                    def det_one(i):
                        ti = i % len(targets)
                        toks, lps, last = collect(stub.Generate(targets[ti], timeout=300))
                        tally.add(last, len(toks))
                        return ti, (tuple(toks), tuple(lps), last.fingerprint)

                    outs = list(ex.map(det_one, range(N * len(targets))))
                    stop.set()
                    for f in bg:
                        f.result()
                for ti, ((kind, temp), ref) in enumerate(zip(TARGETS, refs)):
                    seen = {o for i, o in outs if i == ti}
                    what = "load %d, %s T=%.1f" % (load, kind, temp)
                    self.assertEqual(len(seen), 1, "%s: %d distinct answers" % (what, len(seen)))
                    toks, lps, fp = seen.pop()
                    self.assertEqual(list(toks), list(ref.token_ids), what + ": tokens differ from ref-only")
                    self.assertEqual(list(lps), list(ref.logprobs), what + ": logprobs differ from ref-only")
                    self.assertEqual(fp, ref.fingerprint, what + ": fingerprint differs from ref-only")
                print("load %d: %d x %d deterministic answers identical to ref-only, %d noise "
                      "requests, %.1f s" % (load, N, len(targets), noise_n[0], time.time() - tl),
                      flush=True)
        per_k = 1000.0 * tally.rollbacks / max(tally.tokens, 1)
        print("DVR on SmolLM2 (CPU, W=8 G=4, no injection): %d deterministic requests, %d tokens, "
              "%d windows, %d natural rollbacks (%.2f per 1000 tokens), %d rolled-back tokens, "
              "%d recomputed tokens" % (tally.requests, tally.tokens, tally.windows,
                                        tally.rollbacks, per_k, tally.rolled_back,
                                        tally.recomputed))
        print("oracle %.1f s, total %.1f s" % (t_oracle, time.time() - t0))


if __name__ == "__main__":
    path, why = gguf_path()
    if path is None:
        print("SKIP: SmolLM2 GGUF unavailable (tools/fetch-smollm2.sh failed): %s" % why)
        sys.exit(77)
    TestSmolLM2Wire.path = path
    unittest.main(verbosity=2)

"""test_server.py - integration tests for the detserve gRPC server through real clients
(Python grpcio from Debian; a raw python3-h2 client only for rows no gRPC client can
produce). Every test class starts its own server(s) on free loopback ports and stops them
with SIGTERM, asserting exit code 0 (and, in the ASan build, no sanitizer report).

Run: DETSERVE_BIN=... DETSERVE_PROTO_DIR=... DETSERVE_GEN_DIR=... python3 test_server.py
"""
import concurrent.futures as cf
import math
import os
import random
import socket
import threading
import time
import unittest

from dsharness import (ASAN, BIN as BIN_PATH, RawH2, Server, frame, grpc, health_pb2, health_pb2_grpc,
                       pb, unframe)

VOCAB = 259   # the tiny preset
CONTEXT = 1024
PRESET = ["--preset", "tiny", "--seed", "7", "--threads", "1", "--kv-blocks", "512"]
SCALE = 1 if not ASAN else 0.25   # the ASan server is slower: smaller loads


def req(prompt=(1, 2, 3, 4), max_tokens=8, det=False, seed=None, temperature=0.0, **kw):
    r = pb.GenerateRequest(prompt_ids=pb.TokenIds(ids=list(prompt)), max_tokens=max_tokens,
                           deterministic=det, ignore_eos=kw.pop("ignore_eos", True), **kw)
    r.sampling.temperature = temperature
    if seed is not None:
        r.sampling.seed = seed
    return r


def collect(stream):
    toks, lps, last, n = [], [], None, 0
    for msg in stream:
        toks.extend(msg.token_ids)
        lps.extend(msg.logprobs)
        n += 1
        if msg.final:
            last = msg
    return toks, lps, last, n


class ServerCase(unittest.TestCase):
    server_args = []

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(*(PRESET + cls.server_args))
        cls.stub = cls.srv.stub()

    @classmethod
    def tearDownClass(cls):
        rc, log = cls.srv.stop()
        assert rc == 0, "server exited %d:\n%s" % (rc, log[-5000:])

    def assertCode(self, fn, code, contains=None):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        if contains:
            self.assertIn(contains, cm.exception.details())
        return cm.exception


# ---------------------------------------------------------------------------------------------
class TestRpcs(ServerCase):
    server_args = ["-W", "8", "-G", "4", "--tokenizer", "bytelevel"]

    def test_server_info(self):
        info = self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10)
        self.assertEqual(info.model.vocab_size, VOCAB)
        self.assertEqual(info.model.context_length, CONTEXT)
        self.assertEqual(info.model.num_layers, 2)
        self.assertEqual(len(info.model.identity), 32)
        self.assertEqual(info.mode, "dvr")
        self.assertEqual((info.window, info.group), (8, 4))
        self.assertTrue(info.version)
        self.assertTrue(info.backend)
        self.assertEqual(info.kv_blocks, 512)
        self.assertEqual((info.step_policy, info.admit_policy), ("auto", "fcfs"))

    def test_health(self):
        h = health_pb2_grpc.HealthStub(self.srv.channel())
        r = h.Check(health_pb2.HealthCheckRequest(), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        r = h.Check(health_pb2.HealthCheckRequest(service="detserve.v1.Detserve"), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        self.assertCode(lambda: h.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10),
                        grpc.StatusCode.NOT_FOUND)

    def test_generate_stream(self):
        toks, lps, last, n = collect(self.stub.Generate(
            req(max_tokens=12, request_id="abc", return_logprobs=True), timeout=30))
        self.assertEqual(len(toks), 12)
        self.assertTrue(all(0 <= t < VOCAB for t in toks))
        self.assertEqual(len(lps), 12)
        self.assertTrue(all(x <= 0.0 and math.isfinite(x) for x in lps))
        self.assertIsNotNone(last)
        self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(last.usage.prompt_tokens, 4)
        self.assertEqual(last.usage.completion_tokens, 12)
        self.assertEqual(last.request_id, "abc")
        self.assertFalse(last.deterministic)
        self.assertEqual(last.fingerprint, "")
        self.assertGreaterEqual(n, 2)

    def test_no_logprobs_unless_asked(self):
        toks, lps, last, _ = collect(self.stub.Generate(req(max_tokens=5), timeout=30))
        self.assertEqual(len(toks), 5)
        self.assertEqual(lps, [])

    def test_unary_equals_stream(self):
        r = req(max_tokens=10, seed=1234, temperature=0.8)
        toks, _, last, _ = collect(self.stub.Generate(r, timeout=30))
        u = self.stub.GenerateUnary(r, timeout=30)
        self.assertTrue(u.final)
        self.assertEqual(list(u.token_ids), toks)
        self.assertEqual(u.seed, 1234)
        self.assertEqual(last.seed, 1234)
        self.assertEqual(u.usage.completion_tokens, 10)

    def test_deterministic_fingerprint(self):
        r = req(prompt=(5, 6, 7, 8, 9), max_tokens=16, det=True, seed=42, temperature=0.7,
                return_logprobs=True)
        a = self.stub.GenerateUnary(r, timeout=60)
        toks, lps, last, _ = collect(self.stub.Generate(r, timeout=60))
        self.assertTrue(a.deterministic)
        self.assertRegex(a.fingerprint, r"^[0-9a-f]{32}$")
        self.assertEqual(a.fingerprint, last.fingerprint)
        self.assertEqual(list(a.token_ids), toks)
        self.assertEqual(list(a.logprobs), lps)
        self.assertGreaterEqual(last.dvr.verify_passes, 1)
        self.assertEqual(a.seed, 42)

    def test_server_draws_seed(self):
        u = self.stub.GenerateUnary(req(max_tokens=3, temperature=1.0), timeout=30)
        v = self.stub.GenerateUnary(req(max_tokens=3, temperature=1.0, seed=u.seed), timeout=30)
        self.assertEqual(list(u.token_ids), list(v.token_ids))
        self.assertEqual(u.seed, v.seed)

    def test_text_prompt(self):
        # the tiny preset serves the byte-level tokenizer: bytes are ids 0..255, BOS is 256
        info = self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10)
        self.assertTrue(info.model.has_tokenizer)
        r = pb.GenerateRequest(prompt_text="héllo", max_tokens=12, ignore_eos=True)
        u = self.stub.GenerateUnary(r, timeout=30)
        self.assertEqual(u.usage.prompt_tokens, len("héllo".encode()) + 1)
        ids = req(prompt=[256] + list("héllo".encode()), max_tokens=12)
        self.assertEqual(list(self.stub.GenerateUnary(ids, timeout=30).token_ids),
                         list(u.token_ids))
        streamed = "".join(m.text for m in self.stub.Generate(r, timeout=30))
        self.assertEqual(streamed, u.text)
        want = bytes(t for t in u.token_ids if t < 256).decode("utf-8", "replace")
        self.assertEqual(u.text, want)

    def test_stop_string(self):
        base = req(prompt=(72, 105, 33), max_tokens=40)
        toks = list(self.stub.GenerateUnary(base, timeout=30).token_ids)
        # the first printable ASCII byte that did not occur before it
        k = next((i for i, t in enumerate(toks) if 0x21 <= t < 0x7f and t not in toks[:i]), None)
        if k is None:
            self.skipTest("no printable byte in the greedy output")
        r = req(prompt=(72, 105, 33), max_tokens=40, stop=[chr(toks[k])])
        u = self.stub.GenerateUnary(r, timeout=30)
        self.assertEqual(list(u.token_ids), toks[:k + 1])
        self.assertEqual(u.finish_reason, pb.FINISH_REASON_STOP_SEQUENCE)

    def test_64_concurrent_streams(self):
        n = 64

        def one(i):
            toks, _, last, _ = collect(self.stub.Generate(
                req(prompt=(i % 200 + 1, 2, 3), max_tokens=8, request_id="r%d" % i), timeout=120))
            return i, toks, last

        with cf.ThreadPoolExecutor(n) as ex:
            results = list(ex.map(one, range(n)))
        for i, toks, last in results:
            self.assertEqual(len(toks), 8)
            self.assertEqual(last.request_id, "r%d" % i)

    def test_metrics(self):
        self.stub.GenerateUnary(req(max_tokens=4, det=True, seed=1), timeout=30)
        self.stub.GenerateUnary(req(max_tokens=4), timeout=30)
        text = self.srv.metrics_text()
        for name in ("detserve_requests_total", "detserve_generated_tokens_total",
                     "detserve_verify_passes_total", "detserve_rollbacks_total",
                     "detserve_recomputed_tokens_total", "detserve_queue_depth",
                     "detserve_kv_blocks_used", "detserve_kv_usage_ratio",
                     "detserve_ttft_seconds_bucket", "detserve_tpot_seconds_bucket",
                     "detserve_e2e_seconds_bucket", "detserve_ref_steps_total",
                     "detserve_ref_decoded_tokens_total", "detserve_verify_window",
                     "detserve_ref_steps_by_reason_total"):
            self.assertIn(name, text)
        # the deterministic prefill is reference work: under the default step policy that step
        # runs on the reference path; the window starts at its cap (--window, 32 by default)
        self.assertGreaterEqual(self.srv.metric("detserve_ref_steps_total"), 1)
        # every REF step has one reason; the deterministic prefill's is catching up
        # (read twice: the counters only grow between the reads, and nothing runs now)
        self.assertEqual(self.srv.metric("detserve_ref_steps_by_reason_total"),
                         self.srv.metric("detserve_ref_steps_total"))
        self.assertGreaterEqual(self.srv.metric("detserve_ref_steps_by_reason_total",
                                                reason="catchup"), 1)
        self.assertTrue(4 <= self.srv.metric("detserve_verify_window") <= 32)
        self.assertGreaterEqual(self.srv.metric("detserve_requests_total", deterministic="true"), 1)
        self.assertGreaterEqual(self.srv.metric("detserve_requests_total", deterministic="false"), 1)
        self.assertGreaterEqual(self.srv.metric("detserve_generated_tokens_total",
                                                deterministic="true"), 4)
        self.assertGreaterEqual(self.srv.metric("detserve_e2e_seconds_count",
                                                deterministic="false"), 1)
        self.assertGreaterEqual(self.srv.metric("detserve_grpc_requests_total",
                                                method="GenerateUnary", code="OK"), 2)

    def test_unknown_path_404_on_metrics_port(self):
        import urllib.error
        import urllib.request
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen("http://127.0.0.1:%d/nope" % self.srv.metrics_port, timeout=10)
        self.assertEqual(cm.exception.code, 404)


# ---------------------------------------------------------------------------------------------
class TestBadInput(ServerCase):
    server_args = ["--max-message-bytes", "4096"]  # presets have no tokenizer by default

    def unary(self, r, **kw):
        return lambda: self.stub.GenerateUnary(r, timeout=30, **kw)

    def test_invalid_requests(self):
        INV = grpc.StatusCode.INVALID_ARGUMENT
        empty = pb.GenerateRequest(max_tokens=4)
        self.assertCode(self.unary(empty), INV, "prompt")
        self.assertCode(self.unary(req(prompt=())), INV, "prompt")
        self.assertCode(self.unary(req(prompt=(1, VOCAB))), INV, "prompt_ids[1]")
        self.assertCode(self.unary(req(prompt=(1, -1))), INV, "prompt_ids[1]")
        self.assertCode(self.unary(req(max_tokens=0)), INV, "max_tokens")
        self.assertCode(self.unary(req(max_tokens=-3)), INV, "max_tokens")
        self.assertCode(self.unary(req(temperature=-0.5)), INV, "temperature")
        self.assertCode(self.unary(req(temperature=float("nan"))), INV, "temperature")
        r = req()
        r.sampling.top_p = 0.0
        self.assertCode(self.unary(r), INV, "top_p")
        r.sampling.top_p = 1.5
        self.assertCode(self.unary(r), INV, "top_p")
        r.sampling.top_p = float("nan")
        self.assertCode(self.unary(r), INV, "top_p")
        self.assertCode(self.unary(req(stop_token_ids=[VOCAB + 5])), INV, "stop_token_ids")

    def test_prompt_longer_than_context(self):
        # 1025 one-byte varints fit the 4096-byte message limit
        self.assertCode(self.unary(req(prompt=[1] * (CONTEXT + 1))),
                        grpc.StatusCode.INVALID_ARGUMENT, "context")

    def test_text_without_tokenizer(self):
        r = pb.GenerateRequest(prompt_text="hello", max_tokens=4)
        self.assertCode(self.unary(r), grpc.StatusCode.FAILED_PRECONDITION, "tokenizer")
        self.assertCode(self.unary(req(stop=["x"])), grpc.StatusCode.FAILED_PRECONDITION,
                        "tokenizer")

    def test_malformed_protobuf(self):
        ch = self.srv.channel()
        for method in ("/detserve.v1.Detserve/GenerateUnary", "/detserve.v1.Detserve/ServerInfo",
                       "/grpc.health.v1.Health/Check"):
            call = ch.unary_unary(method, request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            # field 1, wire type 2, length 100 but only 2 bytes follow
            self.assertCode(lambda: call(b"\x0a\x64\x01\x02", timeout=10),
                            grpc.StatusCode.INVALID_ARGUMENT, "malformed")
        gen = ch.unary_stream("/detserve.v1.Detserve/Generate", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        self.assertCode(lambda: list(gen(b"\xff\xff\xff", timeout=10)),
                        grpc.StatusCode.INVALID_ARGUMENT, "malformed")

    def test_unknown_method(self):
        ch = self.srv.channel()
        call = ch.unary_unary("/detserve.v1.Detserve/Nope", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        self.assertCode(lambda: call(b"", timeout=10), grpc.StatusCode.UNIMPLEMENTED)
        call = ch.unary_unary("/other.Service/Generate", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        self.assertCode(lambda: call(b"", timeout=10), grpc.StatusCode.UNIMPLEMENTED)

    def test_compressed_flag(self):
        # gRPC skips compression when it does not pay: send a compressible message
        big = req(prompt=[1] * 900, max_tokens=1)
        self.assertCode(lambda: self.stub.GenerateUnary(big, timeout=10,
                                                        compression=grpc.Compression.Gzip),
                        grpc.StatusCode.UNIMPLEMENTED, "compress")

    def test_oversized_message(self):
        big = req(prompt=[200] * 3000)  # 2-byte varints: ~6 KB > 4096
        self.assertCode(self.unary(big), grpc.StatusCode.RESOURCE_EXHAUSTED, "4096")
        # the connection and the server still serve
        self.assertEqual(len(self.stub.GenerateUnary(req(max_tokens=2), timeout=30).token_ids), 2)

    def test_non_post(self):
        raw = RawH2(self.srv.port)
        sid = raw.request("/detserve.v1.Detserve/ServerInfo", method="GET")
        st = raw.wait_end(sid)
        raw.close()
        self.assertEqual(st["headers"][":status"], "405")

    def test_not_grpc_content_type(self):
        raw = RawH2(self.srv.port)
        sid = raw.conn.get_next_available_stream_id()
        raw.streams[sid] = {"headers": None, "data": b"", "trailers": None, "ended": False,
                            "reset": None, "frames": 0}
        raw.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                    (":path", "/detserve.v1.Detserve/ServerInfo"),
                                    (":authority", "x"), ("content-type", "text/plain")],
                              end_stream=True)
        raw.flush()
        st = raw.wait_end(sid)
        raw.close()
        self.assertEqual(st["headers"][":status"], "415")

    def test_trailers_only_for_early_errors(self):
        raw = RawH2(self.srv.port)
        sid = raw.request("/detserve.v1.Detserve/GenerateUnary",
                          body=frame(req(max_tokens=0).SerializeToString()))
        st = raw.wait_end(sid)
        raw.close()
        # one HEADERS frame with END_STREAM carries the status: no DATA, no separate trailers
        self.assertTrue(st["headers_ended_stream"])
        self.assertEqual(st["headers"]["grpc-status"], "3")
        self.assertIn("max_tokens", st["headers"]["grpc-message"])
        self.assertIsNone(st["trailers"])
        self.assertEqual(st["data"], b"")

    def test_grpc_message_percent_encoded(self):
        raw = RawH2(self.srv.port)
        body = frame(pb.GenerateRequest(prompt_ids=pb.TokenIds(ids=[1]), max_tokens=1,
                                        request_id="x" * 200).SerializeToString())
        sid = raw.request("/detserve.v1.Detserve/GenerateUnary", body=body)
        st = raw.wait_end(sid)
        raw.close()
        self.assertEqual(st["headers"]["grpc-status"], "3")
        msg = st["headers"]["grpc-message"]
        self.assertTrue(all(0x20 <= ord(c) <= 0x7e for c in msg))

    def test_reassembly_across_frames(self):
        raw = RawH2(self.srv.port)
        body = frame(req(max_tokens=3).SerializeToString())
        # one byte per DATA frame, prefix split too
        sid = raw.request("/detserve.v1.Detserve/GenerateUnary",
                          chunks=[body[i:i + 1] for i in range(len(body))])
        st = raw.wait_end(sid)
        self.assertEqual(st["trailers"]["grpc-status"], "0")
        (msg,) = unframe(st["data"])
        self.assertEqual(len(pb.GenerateResponse.FromString(msg).token_ids), 3)
        # two messages in one frame: unary methods take exactly one
        sid = raw.request("/detserve.v1.Detserve/GenerateUnary", body=body + body)
        st = raw.wait_end(sid)
        raw.close()
        self.assertEqual(st["headers"]["grpc-status"], "3")
        # a message cut short by END_STREAM
        raw = RawH2(self.srv.port)
        sid = raw.request("/detserve.v1.Detserve/GenerateUnary", body=body[:-2])
        st = raw.wait_end(sid)
        raw.close()
        self.assertEqual(st["headers"]["grpc-status"], "3")

    def test_garbage_bytes(self):
        ok = self.srv.stub()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(512))
        s.settimeout(10)
        got = b""
        try:
            while True:
                d = s.recv(4096)
                if not d:
                    break
                got += d
        except ConnectionResetError:
            pass
        s.close()  # the server closed it (recv returned)
        s2 = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s2.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x99\x00" + os.urandom(64))
        s2.settimeout(10)
        try:
            while s2.recv(4096):
                pass
        except ConnectionResetError:
            pass
        s2.close()
        self.assertEqual(len(ok.GenerateUnary(req(max_tokens=2), timeout=30).token_ids), 2)
        self.assertTrue(self.srv.wait_log(r"bad HTTP/2 input"))


class TestChatMessages(unittest.TestCase):
    """messages requests render the model's chat template (here ChatML, from the model
    directory's tokenizer_config.json) and tokenize it; the byte-level tokenizer makes the
    rendered text's bytes the prompt."""

    TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

    def test_messages(self):
        import json
        import subprocess
        import tempfile
        mkmodel = os.path.join(os.path.dirname(os.path.dirname(BIN_PATH)), "tools",
                               "detserve-mkmodel")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([mkmodel, "--preset", "tiny", "--seed", "5", "--out", d], check=True,
                           capture_output=True)
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"chat_template": self.TEMPLATE}, f)
            with Server("--model", d, "--tokenizer", "bytelevel", "--threads", "1") as srv:
                stub = srv.stub()
                msgs = pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="hi")])
                r = pb.GenerateRequest(messages=msgs, max_tokens=6, ignore_eos=True)
                u = stub.GenerateUnary(r, timeout=60)
                rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n".encode()
                self.assertEqual(u.usage.prompt_tokens, len(rendered))
                same = stub.GenerateUnary(req(prompt=list(rendered), max_tokens=6), timeout=60)
                self.assertEqual(list(u.token_ids), list(same.token_ids))
                with self.assertRaises(grpc.RpcError) as cm:
                    stub.GenerateUnary(pb.GenerateRequest(messages=pb.ChatMessages(),
                                                          max_tokens=2), timeout=30)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # without a template: FAILED_PRECONDITION
        with Server(*(PRESET + ["--tokenizer", "bytelevel"])) as srv:
            with self.assertRaises(grpc.RpcError) as cm:
                srv.stub().GenerateUnary(pb.GenerateRequest(messages=msgs, max_tokens=2),
                                         timeout=30)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)


class TestFastMode(ServerCase):
    server_args = ["--mode", "fast"]

    def test_deterministic_rejected(self):
        self.assertCode(lambda: self.stub.GenerateUnary(req(det=True), timeout=10),
                        grpc.StatusCode.FAILED_PRECONDITION, "fast")
        self.assertEqual(len(self.stub.GenerateUnary(req(max_tokens=2), timeout=30).token_ids), 2)
        self.assertEqual(self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10).mode, "fast")


class TestDetFirst(ServerCase):
    """--admit det-first: deterministic requests overtake the waiting others; what they
    commit is unchanged (each equals its own run alone)."""
    server_args = ["--admit", "det-first", "--max-running", "2", "-W", "8"]

    def test_server_info_policies(self):
        info = self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10)
        self.assertEqual((info.step_policy, info.admit_policy), ("auto", "det-first"))

    def test_det_first_same_outputs(self):
        reqs = [req(prompt=(3 + i, 9, 4, 1 + i), max_tokens=int(12 * SCALE) + 4, det=i % 2 == 1,
                    seed=100 + i, temperature=0.7) for i in range(6)]
        streams = [self.stub.Generate(r, timeout=120) for r in reqs]
        mixed = [collect(s) for s in streams]
        for r, (toks, _, last, _) in zip(reqs, mixed):
            self.assertEqual(len(toks), r.max_tokens)
            if r.deterministic:
                alone = self.stub.GenerateUnary(r, timeout=60)
                self.assertEqual(list(alone.token_ids), toks)
                self.assertEqual(alone.fingerprint, last.fingerprint)

    def test_bad_admit_policy(self):
        bad = Server(*(PRESET + ["--admit", "sjf"]), expect_fail=True)
        self.assertEqual(bad.proc.wait(30), 2)
        bad.reader.join(10)
        bad.proc.stderr.close()
        self.assertIn("--admit", bad.log())


class TestQueueFull(ServerCase):
    server_args = ["--max-running", "1", "--max-queue", "1"]

    def test_queue_full(self):
        # Every stream runs to its end (no client cancels): a cancelled stream whose request
        # the server had not read yet could be admitted after the gauges below read 0, and
        # fill the queue ahead of the last request (seen once under ASan on a loaded machine).
        long_req = req(max_tokens=CONTEXT - 8, prompt=(1, 2, 3))
        streams = [self.stub.Generate(long_req, timeout=120) for _ in range(4)]
        codes = []
        for s in streams:
            try:
                collect(s)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        self.assertIn(grpc.StatusCode.RESOURCE_EXHAUSTED, codes)
        self.assertIn(grpc.StatusCode.OK, codes)
        self.assertEqual(set(codes) - {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED},
                         set())
        for gauge in ("detserve_running_requests", "detserve_queue_depth"):
            self.assertEqual(self.srv.wait_metric(lambda v: v == 0, gauge, timeout=60), 0)
        self.assertEqual(len(self.stub.GenerateUnary(req(max_tokens=2), timeout=60).token_ids), 2)


class TestAuth(ServerCase):
    server_args = ["--api-key", "s3cret"]

    def test_api_key(self):
        U = grpc.StatusCode.UNAUTHENTICATED
        self.assertCode(lambda: self.stub.GenerateUnary(req(), timeout=10), U)
        self.assertCode(lambda: self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10), U)
        self.assertCode(lambda: self.stub.GenerateUnary(
            req(), timeout=10, metadata=[("authorization", "Bearer wrong")]), U)
        self.assertCode(lambda: self.stub.GenerateUnary(
            req(), timeout=10, metadata=[("authorization", "s3cret")]), U)
        r = self.stub.GenerateUnary(req(max_tokens=2), timeout=30,
                                    metadata=[("authorization", "Bearer s3cret")])
        self.assertEqual(len(r.token_ids), 2)
        # probes need no key
        h = health_pb2_grpc.HealthStub(self.srv.channel())
        self.assertEqual(h.Check(health_pb2.HealthCheckRequest(), timeout=10).status,
                         health_pb2.HealthCheckResponse.SERVING)


# ---------------------------------------------------------------------------------------------
class TestCancelDeadline(ServerCase):
    # the small preset decodes slowly enough on one thread that long requests are still
    # running when the client cancels or the deadline passes (tiny finishes 1000 tokens in
    # ~0.1 s)
    server_args = ["--stream-high-water", "256", "--preset", "small"]
    LONG = 2000

    def wait_idle(self):
        self.assertEqual(self.srv.wait_metric(lambda v: v == 0, "detserve_running_requests",
                                              timeout=30), 0)
        self.assertEqual(self.srv.wait_metric(lambda v: v == 0, "detserve_kv_blocks_used",
                                              timeout=30), 0)

    def test_client_cancel(self):
        before = self.srv.metric("detserve_request_finish_total", reason="cancelled")
        it = self.stub.Generate(req(max_tokens=self.LONG), timeout=60)
        got = 0
        for msg in it:
            got += len(msg.token_ids)
            if got >= 3:
                break
        it.cancel()
        after = self.srv.wait_metric(lambda v: v > before, "detserve_request_finish_total",
                                     reason="cancelled")
        self.assertEqual(after, before + 1)
        self.assertTrue(self.srv.wait_log(r"closed by the client"))
        self.wait_idle()

    def test_deadline_grpcio(self):
        before = self.srv.metric("detserve_request_finish_total", reason="cancelled")
        with self.assertRaises(grpc.RpcError) as cm:
            collect(self.stub.Generate(req(max_tokens=self.LONG), timeout=0.2))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.srv.wait_metric(lambda v: v > before, "detserve_request_finish_total",
                             reason="cancelled")
        self.wait_idle()

    def test_deadline_server_side(self):
        # grpc-timeout enforced by the server alone (this client has no deadline of its own)
        raw = RawH2(self.srv.port)
        body = frame(req(max_tokens=self.LONG).SerializeToString())
        t0 = time.time()
        sid = raw.request("/detserve.v1.Detserve/Generate", body=body,
                          extra=[("grpc-timeout", "150m")])
        st = raw.wait_end(sid, timeout=30)
        raw.close()
        status = (st["trailers"] or st["headers"])["grpc-status"]
        self.assertEqual(status, "4", {k: v for k, v in st.items() if k != "data"})
        self.assertLess(time.time() - t0, 10)
        self.assertGreaterEqual(self.srv.wait_metric(
            lambda v: v >= 1, "detserve_grpc_requests_total", method="Generate",
            code="DEADLINE_EXCEEDED"), 1)
        self.wait_idle()

    def test_disconnect_mid_stream(self):
        raw = RawH2(self.srv.port)
        body = frame(req(max_tokens=self.LONG).SerializeToString())
        sid = raw.request("/detserve.v1.Detserve/Generate", body=body)
        while not raw.streams[sid]["data"]:
            raw.pump(1.0)
        raw.close()  # no RST, just a dead socket
        self.wait_idle()

    def test_backpressure(self):
        # A reader that never opens its window: the stream's buffer passes the high-water mark,
        # the request is paused in the engine, and then finishes once the reader catches up.
        paused0 = self.srv.metric("detserve_backpressure_pauses_total")
        done0 = self.srv.metric("detserve_requests_total")
        raw = RawH2(self.srv.port, window=64, auto_ack=False)
        n = 300 if not ASAN else 80
        sid = raw.request("/detserve.v1.Detserve/Generate",
                          body=frame(req(max_tokens=n).SerializeToString()))
        self.assertGreaterEqual(self.srv.wait_metric(
            lambda v: v > paused0, "detserve_backpressure_pauses_total", timeout=30), paused0 + 1)
        time.sleep(1.0)
        self.assertEqual(self.srv.metric("detserve_requests_total"), done0,
                         "a paused request must not run to completion")
        raw.conn.update_settings({__import__("h2.settings").settings.SettingCodes
                                  .INITIAL_WINDOW_SIZE: 1 << 20})
        raw.conn.increment_flow_control_window(1 << 20)
        raw.flush()
        raw.auto_ack = True
        raw.ack(sid)
        st = raw.wait_end(sid, timeout=120)
        raw.close()
        self.assertEqual(st["trailers"]["grpc-status"], "0")
        toks = sum(len(pb.GenerateResponse.FromString(m).token_ids) for m in unframe(st["data"]))
        self.assertEqual(toks, n)


# ---------------------------------------------------------------------------------------------
class TestConnections(unittest.TestCase):
    def test_max_connections_and_keepalive(self):
        with Server(*(PRESET + ["--max-connections", "2", "--keepalive", "1",
                                "--keepalive-timeout", "1"])) as srv:
            a, b = RawH2(srv.port), RawH2(srv.port)
            a.pump(0.5)
            b.pump(0.5)
            c = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            self.assertEqual(c.recv(100), b"")  # refused: closed at once
            c.close()
            self.assertTrue(srv.wait_log("connection limit reached"))
            # a peer that never answers PING is dropped after interval + timeout
            mute = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            a.close()
            mute.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            mute.settimeout(8)
            t0 = time.time()
            try:
                while mute.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            self.assertLess(time.time() - t0, 7.5)
            mute.close()
            self.assertTrue(srv.wait_log("keepalive PING not acknowledged"))
            # a peer that answers PINGs keeps its idle connection across several intervals
            b.close()
            live = RawH2(srv.port)
            t0 = time.time()
            while time.time() - t0 < 3.5:
                self.assertTrue(live.pump(0.2), "connection dropped despite PING ACKs")
            sid = live.request("/detserve.v1.Detserve/GenerateUnary",
                               body=frame(req(max_tokens=2).SerializeToString()))
            st = live.wait_end(sid)
            live.close()
            self.assertEqual(st["trailers"]["grpc-status"], "0")

    def test_max_streams_advertised(self):
        with Server(*(PRESET + ["--max-streams", "3"])) as srv:
            raw = RawH2(srv.port)
            while raw.conn.remote_settings.max_concurrent_streams != 3:
                self.assertTrue(raw.pump(1.0))
            raw.close()

    def test_graceful_shutdown(self):
        srv = Server(*PRESET)
        stub = srv.stub()
        n = 200
        it = stub.Generate(req(max_tokens=n), timeout=60)
        first = next(it)
        srv.proc.send_signal(15)
        self.assertTrue(srv.wait_log("SIGTERM: draining"))
        rest, _, last, _ = collect(it)
        self.assertEqual(len(first.token_ids) + len(rest), n)
        self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH)
        srv.proc.wait(30)  # exits on its own once drained
        rc, log = srv.stop()
        self.assertEqual(rc, 0, log[-3000:])
        self.assertIn("drained", log)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).recv(1)

    def test_drain_timeout(self):
        # a request longer than the drain timeout is cut with UNAVAILABLE; the exit is still 0
        srv = Server(*(PRESET + ["--preset", "small", "--drain-timeout", "1"]))
        it = srv.stub().Generate(req(max_tokens=3000), timeout=120)
        next(it)
        srv.proc.send_signal(15)
        with self.assertRaises(grpc.RpcError) as cm:
            collect(it)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(srv.proc.wait(60), 0)
        rc, log = srv.stop()
        self.assertEqual(rc, 0)
        self.assertIn("drain timeout", log)

    def test_config_file(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write("# detserve config\npreset = tiny\nseed = 3\nwindow = 12 # W\n"
                    "group=3\nmode = dvr\nkv-blocks = 256\n")
        try:
            with Server("--config", f.name, "-G", "5") as srv:
                info = srv.stub().ServerInfo(pb.ServerInfoRequest(), timeout=10)
                self.assertEqual((info.window, info.group, info.kv_blocks), (12, 5, 256))
            bad = Server("--config", f.name, "--window", "zero", expect_fail=True)
            self.assertEqual(bad.proc.wait(30), 2)
            bad.reader.join(10)
            bad.proc.stderr.close()
            self.assertIn("window", bad.log())
        finally:
            os.unlink(f.name)


# ---------------------------------------------------------------------------------------------
class TestDeterminismOverTheWire(unittest.TestCase):
    """The same deterministic request, 50 times, under 0, 8 and 32 concurrent random requests:
    one token sequence, one fingerprint, equal to the ref-only oracle's."""

    def test_determinism_under_load(self):
        target = req(prompt=(17, 42, 99, 3, 250, 8), max_tokens=24, det=True, seed=2024,
                     temperature=0.9, return_logprobs=True)
        with Server(*(PRESET + ["--mode", "ref-only"])) as oracle:
            ref = oracle.stub().GenerateUnary(target, timeout=300)
        self.assertEqual(len(ref.token_ids), 24)
        with Server(*(PRESET + ["-W", "8", "-G", "4"])) as srv:
            stub = srv.stub()
            self.assertEqual(list(stub.GenerateUnary(target, timeout=300).token_ids),
                             list(ref.token_ids))
            for load in (0, 8, 32):
                load = int(load * SCALE) if load else 0
                seen = set()
                stop = threading.Event()

                def noise(k):
                    rnd = random.Random(k)
                    while not stop.is_set():
                        r = req(prompt=[rnd.randrange(VOCAB) for _ in range(rnd.randint(1, 40))],
                                max_tokens=rnd.randint(1, 40), det=rnd.random() < 0.3,
                                seed=rnd.randrange(1 << 63), temperature=rnd.choice([0, 0.7, 1.2]),
                                ignore_eos=rnd.random() < 0.5)
                        try:
                            collect(stub.Generate(r, timeout=300))
                        except grpc.RpcError as e:
                            raise AssertionError("noise request failed: %s" % e.details())

                with cf.ThreadPoolExecutor(load + 4) as ex:
                    bg = [ex.submit(noise, k) for k in range(load)]

                    def det_one(_):
                        toks, lps, last, _ = collect(stub.Generate(target, timeout=300))
                        return tuple(toks), tuple(lps), last.fingerprint

                    outs = list(ex.map(det_one, range(50)))
                    stop.set()
                    for f in bg:
                        f.result()
                for o in outs:
                    seen.add(o)
                self.assertEqual(len(seen), 1, "load %d: %d distinct outputs" % (load, len(seen)))
                toks, lps, fp = seen.pop()
                self.assertEqual(list(toks), list(ref.token_ids), "load %d differs from ref-only" % load)
                self.assertEqual(fp, ref.fingerprint)
                self.assertEqual(list(lps), list(ref.logprobs))


    def test_rollbacks_keep_the_oracle_answer(self):
        # --inject-mismatch forces half the verify windows to roll back: the committed output
        # must still be the oracle's, and the final message must report the rollbacks
        target = req(prompt=(9, 8, 7, 6, 5), max_tokens=40, det=True, seed=99, temperature=0.8)
        with Server(*(PRESET + ["--mode", "ref-only"])) as oracle:
            ref = oracle.stub().GenerateUnary(target, timeout=300)
        with Server(*(PRESET + ["-W", "4", "--inject-mismatch", "0.5"])) as srv:
            toks, _, last, _ = collect(srv.stub().Generate(target, timeout=300))
        self.assertEqual(toks, list(ref.token_ids))
        self.assertEqual(last.fingerprint, ref.fingerprint)
        self.assertGreater(last.dvr.rollbacks, 0)
        self.assertGreater(last.dvr.recomputed_tokens, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)

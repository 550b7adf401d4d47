#!/usr/bin/python3
"""A stand-in detserve.v1 server on Python grpcio, for testing our C client library against a
real gRPC implementation (framing, trailers, deadlines, cancellation) without the engine.

Stubs are generated at start-up from proto/detserve.proto with grpc_tools. Behaviour:
- tokens are a pure function of (prompt, seed) for deterministic requests and of a per-process
  counter otherwise, so tests can tell them apart;
- prompt id 9001 -> INVALID_ARGUMENT with a message that needs percent-encoding;
- prompt id 9002 -> streams slowly (50 ms per token) for deadline / cancel tests;
- prompt id 9003 -> one 300 KB text chunk (reassembly across many DATA frames);
- prompt id 9004 -> closes with OK before sending a final message.
It also takes detserve-like flags (--port, --mode, --window, --group, --inject-mismatch; others are
ignored) so the study scripts can be exercised without the engine: in mode fast a deterministic
request gets FAILED_PRECONDITION, and non-deterministic outputs vary from call to call.
Prints "PORT <n>" on stdout when ready. Usage: client_fake_server.py PROTO_DIR [PORT] [flags]"""
import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc

ap = argparse.ArgumentParser()
ap.add_argument("proto_dir")
ap.add_argument("port_pos", nargs="?", type=int, default=0)
ap.add_argument("--port", type=int, default=None)
ap.add_argument("--mode", default="dvr")
ap.add_argument("--window", type=int, default=8)
ap.add_argument("--group", type=int, default=4)
ap.add_argument("--inject-mismatch", type=float, default=0.0)
args, _unknown = ap.parse_known_args()
proto_dir = args.proto_dir
port = args.port if args.port is not None else args.port_pos
gen = tempfile.mkdtemp(prefix="ds-fake-")
atexit.register(shutil.rmtree, gen, True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # so atexit runs
rc = protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + gen, "--grpc_python_out=" + gen,
                  os.path.join(proto_dir, "detserve.proto")])
if rc != 0:
    sys.exit("protoc failed")
sys.path.insert(0, gen)
import detserve_pb2 as pb  # noqa: E402
import detserve_pb2_grpc as pbg  # noqa: E402

VOCAB = 256
lock = threading.Lock()
counter = [0]


def tok(prompt, seed, i):
    h = (sum(prompt) * 1000003 + seed * 7919 + i * 104729) & 0xFFFFFFFF
    return (h ^ (h >> 13)) % VOCAB


class Svc(pbg.DetserveServicer):
    def _gen(self, req, ctx):
        ids = list(req.prompt_ids.ids) if req.WhichOneof("prompt") == "prompt_ids" else [
            ord(ch) % VOCAB for ch in req.prompt_text]
        if not ids:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty prompt")
        if ids[0] == 9001:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad token id 9001 \u2265 vocab 100%")
        if req.deterministic and args.mode == "fast":
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "deterministic requests need mode dvr")
        if req.max_tokens <= 0:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "max_tokens must be > 0")
        seed = req.sampling.seed if req.sampling.WhichOneof("seed_opt") else 42
        with lock:
            counter[0] += 1
            salt = 0 if req.deterministic else counter[0]
        if ids[0] == 9003:
            yield pb.GenerateResponse(token_ids=[1], text="x" * 300000)
        elif ids[0] == 9004:
            return
        else:
            i = 0
            while i < req.max_tokens:
                if ids[0] == 9002:
                    time.sleep(0.05)
                    if not ctx.is_active():
                        print("CANCELLED %s" % req.request_id, flush=True)
                        return
                n = min(3, req.max_tokens - i)
                chunk = [tok(ids, seed + salt, i + k) for k in range(n)]
                r = pb.GenerateResponse(token_ids=chunk)
                if req.return_logprobs:
                    r.logprobs.extend([-0.5] * n)
                yield r
                i += n
        fp = "%032x" % (tok(ids, seed, 999) * 0x1000193) if req.deterministic else ""
        windows = (req.max_tokens + args.window - 1) // args.window
        rb = 1 if args.inject_mismatch == 0 else max(1, int(windows * args.inject_mismatch + 0.5))
        dvr = pb.DvrStats(verify_passes=2, windows=2, rollbacks=1, rolled_back_tokens=3,
                          recomputed_tokens=req.max_tokens + 1) if req.deterministic else None
        if req.deterministic and args.mode != "dvr":
            dvr = pb.DvrStats()
        elif req.deterministic and (args.window, args.group) != (8, 4):
            dvr = pb.DvrStats(verify_passes=windows, windows=windows, rollbacks=rb,
                              rolled_back_tokens=rb * 2, recomputed_tokens=req.max_tokens + rb * 2)
        yield pb.GenerateResponse(final=True, finish_reason=pb.FINISH_REASON_LENGTH,
                                  usage=pb.Usage(prompt_tokens=len(ids),
                                                 completion_tokens=req.max_tokens),
                                  fingerprint=fp, dvr=dvr, seed=seed,
                                  request_id=req.request_id, deterministic=req.deterministic)

    def Generate(self, req, ctx):
        yield from self._gen(req, ctx)

    def GenerateUnary(self, req, ctx):
        out = pb.GenerateResponse()
        for r in self._gen(req, ctx):
            out.token_ids.extend(r.token_ids)
            if r.final:
                fin = r
        fin.token_ids.extend(out.token_ids)
        return fin

    def ServerInfo(self, req, ctx):
        return pb.ServerInfoResponse(
            model=pb.ModelInfo(architecture="fake", vocab_size=VOCAB, num_layers=1,
                               context_length=512, identity="00" * 16, source="fake"),
            mode=args.mode, window=args.window, group=args.group, backend="python", version="fake-0", kv_blocks=64,
            kv_block_size=16, step_policy="auto", admit_policy="fcfs")


def health(req, ctx):
    return b"\x08\x01"  # HealthCheckResponse{status: SERVING}


server = grpc.server(futures.ThreadPoolExecutor(max_workers=80),
                     options=[("grpc.max_concurrent_streams", 100)])
pbg.add_DetserveServicer_to_server(Svc(), server)
server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
    "Check": grpc.unary_unary_rpc_method_handler(health, request_deserializer=lambda b: b,
                                                 response_serializer=lambda b: b)})])
bound = server.add_insecure_port("127.0.0.1:%d" % port)
server.start()
# SIGUSR1: graceful stop (GOAWAY, in-flight calls finish), to test the client's drain handling
signal.signal(signal.SIGUSR1, lambda *a: server.stop(10))
print("PORT %d" % bound, flush=True)
try:
    server.wait_for_termination()
except KeyboardInterrupt:
    pass

#!/usr/bin/python3
"""Integration: our C gRPC client (detserve-cli, detserve-bench) against a real gRPC server
implementation (Python grpcio, tests/client_fake_server.py). Checks streaming, unary, health,
ServerInfo, status names and exit codes, percent-decoded messages, deadlines (grpc-timeout),
cancellation (RST_STREAM seen by the server), 300 KB messages reassembled across DATA frames,
64 concurrent streams on one connection, trace replay, and schema-valid bench summaries.
Usage: test_client_fake.py DETSERVE_CLI DETSERVE_BENCH SOURCE_ROOT"""
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

cli, bench, root = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="ds-client-test-")
srv = subprocess.Popen(["/usr/bin/python3", os.path.join(root, "tests", "client_fake_server.py"),
                        os.path.join(root, "proto")], stdout=subprocess.PIPE, text=True)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args, timeout=30):
    return subprocess.run([cli, "--addr", addr] + list(args), capture_output=True, text=True,
                          timeout=timeout)


try:
    line = srv.stdout.readline()
    if not line.startswith("PORT "):
        sys.exit("fake server did not start: %r" % line)
    addr = "127.0.0.1:" + line.split()[1]
    srv_lines = queue.Queue()
    threading.Thread(target=lambda: [srv_lines.put(x.strip()) for x in srv.stdout], daemon=True).start()

    r = run("health")
    check(r.returncode == 0 and r.stdout.strip() == "SERVING", "health SERVING")
    r = run("info")
    check(r.returncode == 0 and "model.vocab_size: 256" in r.stdout and "mode: dvr" in r.stdout
          and "admit_policy: fcfs" in r.stdout, "info")

    r = run("generate", "--prompt-ids", "1,2,3", "--max-tokens", "10", "--deterministic", "--seed", "5")
    lines = r.stdout.split("\n")
    toks = lines[0].split()
    check(r.returncode == 0 and len(toks) == 10 and all(t.isdigit() for t in toks), "generate streams 10 ids")
    check("finish: LENGTH" in r.stdout and "usage: prompt_tokens=3 completion_tokens=10" in r.stdout,
          "generate final: finish + usage")
    check("fingerprint: " in r.stdout and "dvr: verify_passes=2 windows=2 rollbacks=1" in r.stdout,
          "generate final: fingerprint + dvr stats")
    r2 = run("generate", "--prompt-ids", "1,2,3", "--max-tokens", "10", "--deterministic", "--seed", "5",
             "--unary")
    check(r2.returncode == 0 and r2.stdout.split("\n")[0].split() == toks, "unary = streamed tokens")

    r = run("generate", "--prompt-ids", "9001")
    check(r.returncode == 3 and "error: INVALID_ARGUMENT: bad token id 9001 \u2265 vocab 100%" in r.stderr,
          "INVALID_ARGUMENT: exit 3, percent-decoded message (%r)" % r.stderr.strip())
    r = run("generate", "--prompt-ids", "9004")
    check(r.returncode == 13 and "INTERNAL" in r.stderr, "OK without a final message -> INTERNAL")
    r = run("--timeout-ms", "200", "generate", "--prompt-ids", "9002", "--max-tokens", "100")
    check(r.returncode == 4 and "DEADLINE_EXCEEDED" in r.stderr, "deadline -> DEADLINE_EXCEEDED (exit 4)")
    r = run("generate", "--prompt-ids", "9003", "--quiet")
    check(r.returncode == 0 and "finish: LENGTH" in r.stdout, "300 KB message reassembled")
    r = run("generate", "--prompt-ids", "9003", "--ids")
    check(r.returncode == 0 and r.stdout.split("\n")[0] == "1", "--ids prints token ids, not the text")
    r = subprocess.run([cli, "--addr", "127.0.0.1:1", "health"], capture_output=True, text=True)
    check(r.returncode == 14 and "UNAVAILABLE" in r.stderr, "no server -> UNAVAILABLE (exit 14)")
    r = run("generate")
    check(r.returncode == 64, "usage error -> 64")

    # cancel: Ctrl-C sends RST_STREAM; the server sees the call go inactive
    p = subprocess.Popen([cli, "--addr", addr, "generate", "--prompt-ids", "9002", "--max-tokens", "1000",
                          "--request-id", "cancel-me"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    check(p.returncode == 1 and "CANCELLED" in err, "Ctrl-C -> CANCELLED, exit 1")
    # (the deadline test above may also have logged a cancelled call, with no request id)
    seen, until = [], time.time() + 5
    while "CANCELLED cancel-me" not in seen and time.time() < until:
        try:
            seen.append(srv_lines.get(timeout=0.2))
        except queue.Empty:
            pass
    check("CANCELLED cancel-me" in seen, "server saw the cancel (%r)" % seen)

    # bench: 64 concurrent streams on one connection (all arrive at t = 0)
    summ = os.path.join(tmp, "s64.json")
    recs = os.path.join(tmp, "r64.jsonl")
    r = subprocess.run([bench, "--addr", addr, "--rate", "0", "--requests", "64", "--det-fraction", "0.5",
                        "--output-len", "uniform:1:24", "--summary", summ, "--records", recs,
                        "--record-tokens", "--quiet"], capture_output=True, text=True, timeout=60)
    s = json.load(open(summ))
    check(r.returncode == 0 and s["requests"]["ok"] == 64, "bench: 64 concurrent streams OK")
    rl = [json.loads(x) for x in open(recs)]
    check(len(rl) == 64 and all(x["tokens"] == x["max_tokens"] == len(x["token_ids"]) for x in rl),
          "bench records: tokens == max_tokens")
    check(all(len(x["itl_ms"]) == x["tokens"] - 1 for x in rl), "bench records: one gap per token after the first")
    check(s["requests"]["deterministic"] == sum(x["deterministic"] for x in rl), "bench: det count")
    check("requests 64" in r.stdout and "DVR:" in r.stdout, "bench table printed")

    # the same flags give the same request stream (and the fake server is a pure function of it)
    summ2 = os.path.join(tmp, "s64b.json")
    recs2 = os.path.join(tmp, "r64b.jsonl")
    subprocess.run([bench, "--addr", addr, "--rate", "0", "--requests", "64", "--det-fraction", "0.5",
                    "--output-len", "uniform:1:24", "--summary", summ2, "--records", recs2, "--quiet",
                    "--no-table"], check=True, timeout=60)
    rl2 = [json.loads(x) for x in open(recs2)]
    check([(x["deterministic"], x["max_tokens"], x["seed"]) for x in rl] ==
          [(x["deterministic"], x["max_tokens"], x["seed"]) for x in rl2], "bench: seeded stream reproducible")
    check([x["output_hash"] for x in rl if x["deterministic"]] ==
          [x["output_hash"] for x in rl2 if x["deterministic"]], "bench: det outputs equal across runs")

    # trace with errors and deadlines; closed loop
    trace = os.path.join(tmp, "t.jsonl")
    with open(trace, "w") as f:
        f.write('{"arrival_s": 0, "prompt_ids": [9001], "tag": "bad"}\n')
        f.write('{"arrival_s": 0.01, "prompt_ids": [9002], "max_tokens": 100}\n')
        f.write('{"arrival_s": 0.02, "prompt_len": 4, "max_tokens": 5, "deterministic": true}\n')
    summ3 = os.path.join(tmp, "s3.json")
    subprocess.run([bench, "--addr", addr, "--trace", trace, "--timeout-ms", "300", "--summary", summ3,
                    "--quiet", "--no-table"], check=True, timeout=60)
    s3 = json.load(open(summ3))
    check(s3["errors_by_status"] == {"INVALID_ARGUMENT": 1, "DEADLINE_EXCEEDED": 1} and s3["requests"]["ok"] == 1,
          "bench trace: errors by status (%s)" % s3["errors_by_status"])
    big = os.path.join(tmp, "big.jsonl")
    with open(big, "w") as f:
        for i in range(150):  # more than the default --requests: a trace is replayed whole
            f.write('{"arrival_s": %g, "prompt_len": 3, "max_tokens": 2}\n' % (i * 0.001))
    summ5 = os.path.join(tmp, "s5.json")
    subprocess.run([bench, "--addr", addr, "--trace", big, "--summary", summ5, "--quiet", "--no-table"],
                   check=True, timeout=60)
    check(json.load(open(summ5))["requests"]["ok"] == 150, "bench replays a whole 150-line trace")
    summ4 = os.path.join(tmp, "s4.json")
    subprocess.run([bench, "--addr", addr, "--users", "4", "--requests", "40", "--connections", "3",
                    "--summary", summ4, "--quiet", "--no-table"], check=True, timeout=60)
    check(json.load(open(summ4))["requests"]["ok"] == 40, "bench closed loop, 3 connections")

    v = subprocess.run(["/usr/bin/python3", os.path.join(root, "bench", "studies", "validate_summary.py"),
                        summ, summ2, summ3, summ4, summ5], capture_output=True, text=True)
    check(v.returncode == 0, "summaries validate against the schema " + v.stderr.strip())

    # last: graceful server stop (GOAWAY) while 4 slow calls run; they finish OK, later arrivals
    # cannot connect and are counted UNAVAILABLE
    trace = os.path.join(tmp, "drain.jsonl")
    with open(trace, "w") as f:
        for i in range(4):
            f.write('{"arrival_s": 0, "prompt_ids": [9002], "max_tokens": 12}\n')
        for i in range(3):
            f.write('{"arrival_s": 1.5, "prompt_len": 3, "max_tokens": 2}\n')
    recs = os.path.join(tmp, "drain.jsonl.out")
    p = subprocess.Popen([bench, "--addr", addr, "--trace", trace, "--records", recs, "--quiet", "--no-table"])
    time.sleep(0.3)
    srv.send_signal(signal.SIGUSR1)
    p.wait(timeout=30)
    st = [json.loads(x)["status"] for x in open(recs)]
    check(st == ["OK"] * 4 + ["UNAVAILABLE"] * 3, "GOAWAY: in-flight calls drain OK, later ones UNAVAILABLE (%s)" % st)
finally:
    srv.terminate()
    srv.wait(timeout=10)
    shutil.rmtree(tmp, True)

if failures:
    sys.exit("%d failure(s): %s" % (len(failures), "; ".join(failures)))

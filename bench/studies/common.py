"""Shared plumbing for the detserve studies: flags, starting and stopping a server per
configuration, running detserve-bench, and drawing gnuplot PNGs.

Every study takes the same flags (see add_common_args): which server binary, which model
(--preset tiny|small|llama3-8b or --model DIR), backend, threads, output directory, and --smoke
for the seconds-long CI version. A study writes <out>/<study>.json (its own result, with the
bench summaries it used) and <out>/<study>*.png next to it. Only the Python standard library is
used; gnuplot is optional (PNGs are skipped with a warning when it is missing)."""
import argparse
import atexit
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def add_common_args(ap):
    b = os.path.join(ROOT, "build")
    ap.add_argument("--server", default=os.path.join(b, "server", "detserve"),
                    help="detserve binary (or any command that takes detserve's flags)")
    ap.add_argument("--server-prefix", default="",
                    help="words put before the server binary (e.g. 'python3 fake.py proto')")
    ap.add_argument("--bench", default=os.path.join(b, "bench", "detserve-bench"))
    ap.add_argument("--cli", default=os.path.join(b, "client", "detserve-cli"))
    ap.add_argument("--preset", default="tiny", help="synthetic model preset (tiny, small, llama3-8b)")
    ap.add_argument("--model", default=None, help="model directory (overrides --preset)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="server threads (0: server default)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server flag, repeatable (e.g. --server-arg=--kv-blocks=4096)")
    ap.add_argument("--out", default=None, help="output directory (default: a temp dir, removed at exit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="CI size: a few seconds")
    ap.add_argument("--no-plot", action="store_true")
    return ap


def out_dir(args, study):
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        return args.out
    d = tempfile.mkdtemp(prefix="ds-%s-" % study)
    atexit.register(shutil.rmtree, d, True)
    return d


def model_desc(args):
    return args.model if args.model else "preset:" + args.preset


def log(msg):
    print("[study] " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """One detserve process with the given mode/W/G/extra flags; a context manager."""

    def __init__(self, args, mode="dvr", window=None, group=None, extra=()):
        self.args = args
        self.port = free_port()
        cmd = args.server_prefix.split() + ([args.server] if args.server else [])
        cmd += ["--model", args.model] if args.model else ["--preset", args.preset]
        cmd += ["--backend", args.backend, "--mode", mode, "--port", str(self.port), "--metrics-port", "-1"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if window:
            cmd += ["--window", str(window)]
        if group:
            cmd += ["--group", str(group)]
        cmd += list(extra) + list(args.server_arg)
        self.cmd = cmd
        self.addr = "127.0.0.1:%d" % self.port
        self.proc = None
        self.logf = None

    def __enter__(self):
        self.logf = tempfile.NamedTemporaryFile(prefix="ds-server-", suffix=".log", delete=False)
        log("server: " + " ".join(self.cmd))
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 300  # loading a real model on the CPU takes a while
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited with %d:\n%s" % (self.proc.returncode, self.log_tail()))
            r = subprocess.run([self.args.cli, "--addr", self.addr, "--timeout-ms", "2000", "health"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return self
            time.sleep(0.1)
        raise RuntimeError("server not healthy after 300 s:\n" + self.log_tail())

    def log_tail(self, n=30):
        try:
            with open(self.logf.name) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.logf:
            self.logf.close()
            os.unlink(self.logf.name)
        return False


def run_bench(args, server, name, outdir, bench_args, records=False):
    """Runs detserve-bench against server; returns (summary dict, records list or None)."""
    summ = os.path.join(outdir, name + ".summary.json")
    cmd = [args.bench, "--addr", server.addr, "--summary", summ, "--label", name, "--quiet", "--no-table",
           "--seed", str(args.seed)] + [str(a) for a in bench_args]
    recs = None
    if records:
        recs = os.path.join(outdir, name + ".records.jsonl")
        cmd += ["--records", recs, "--record-tokens"]
    log("bench: " + name)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("detserve-bench failed (%d): %s\nserver log:\n%s" % (r.returncode, r.stderr,
                                                                              server.log_tail()))
    with open(summ) as f:
        s = json.load(f)
    validate_summary(args, summ)
    rl = None
    if recs:
        with open(recs) as f:
            rl = [json.loads(x) for x in f]
        os.unlink(recs)  # large; the study keeps what it needs
    return s, rl


_validator = []


def validate_summary(args, path):
    """Schema + cross-field checks (validate_summary.py); mandatory with --smoke, else when the
    jsonschema module is available."""
    if not _validator:
        try:
            import validate_summary as vs
            import jsonschema
            with open(vs.SCHEMA) as f:
                _validator.append((vs, jsonschema.Draft7Validator(json.load(f))))
        except ImportError as e:
            if args.smoke:
                raise RuntimeError("cannot validate summaries: %s (install python3-jsonschema)" % e)
            _validator.append(None)
    if _validator[0] is None:
        return
    vs, v = _validator[0]
    try:
        vs.check(path, v)
    except Exception as e:
        raise RuntimeError("%s does not validate: %s" % (path, getattr(e, "message", e)))


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def write_result(outdir, study, args, result):
    result = dict(result)
    result["study"] = study
    result["model"] = model_desc(args)
    result["backend"] = args.backend
    result["smoke"] = args.smoke
    result["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # DETSERVE_RESULT_COMMIT describes builds that are not one commit (e.g. a local merge)
    result["commit"] = os.environ.get("DETSERVE_RESULT_COMMIT") or git_commit()
    # how busy the machine was: shared CI boxes make throughput numbers noisy
    result["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    result["cpus"] = os.cpu_count()
    p = os.path.join(outdir, study + ".json")
    with open(p, "w") as f:
        json.dump(result, f, indent=2, sort_keys=False)
        f.write("\n")
    log("wrote " + p)
    return p


def gnuplot(args, outdir, name, script, data):
    """Writes name.dat (data: a string) and renders name.png with the gnuplot script; the script
    refers to the data file as DAT."""
    if args.no_plot:
        return None
    dat = os.path.join(outdir, name + ".dat")
    with open(dat, "w") as f:
        f.write(data)
    gp = shutil.which("gnuplot")
    if not gp:
        log("gnuplot not found: no %s.png" % name)
        return None
    png = os.path.join(outdir, name + ".png")
    head = ('set terminal pngcairo size 800,500 noenhanced font "sans,10"\n' if _has_cairo(gp)
            else "set terminal png size 800,500 noenhanced\n")
    full = head + 'set output "%s"\nDAT = "%s"\nset grid\nset key outside right top\n' % (png, dat) + script
    r = subprocess.run([gp], input=full, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("gnuplot failed for %s: %s" % (name, r.stderr))
    return png


def _has_cairo(gp):
    r = subprocess.run([gp, "-e", "set terminal"], capture_output=True, text=True)
    return "pngcairo" in (r.stdout + r.stderr)


def pick(summary, *keys):
    v = summary
    for k in keys:
        v = v[k] if v is not None else None
    return v

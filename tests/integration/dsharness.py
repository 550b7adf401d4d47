"""dsharness.py - shared helpers for the detserve integration tests.

Generates the Python gRPC stubs at test time (Debian protoc + grpc_python_plugin) into the
build directory, starts a server on a free port (port 0; the bound port is read from its
log), stops it with SIGTERM and checks the exit code and, for ASan builds, that the sanitizer
reported nothing (no leaks after cancels, deadlines and disconnects). Also a minimal raw
HTTP/2 client (python3-h2) for the transport rows no real gRPC client can produce: non-POST,
garbage bytes, flow-control windows, hand-split frames.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

BIN = os.environ.get("DETSERVE_BIN", "")
PROTO_DIR = os.environ.get("DETSERVE_PROTO_DIR", "")
GEN_DIR = os.environ.get("DETSERVE_GEN_DIR", "")
ASAN = os.environ.get("DETSERVE_ASAN", "") == "1"
START_TIMEOUT = 120 if ASAN else 60


def gen_stubs():
    os.makedirs(GEN_DIR, exist_ok=True)
    subprocess.run(["protoc", "-I", PROTO_DIR, "--python_out=" + GEN_DIR,
                    "--grpc_python_out=" + GEN_DIR,
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                    "detserve.proto", "health.proto"], check=True)
    if GEN_DIR not in sys.path:
        sys.path.insert(0, GEN_DIR)


gen_stubs()
import grpc  # noqa: E402
import detserve_pb2 as pb  # noqa: E402
import detserve_pb2_grpc as pbg  # noqa: E402
import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402

SANITIZER_MARKS = ("ERROR: LeakSanitizer", "ERROR: AddressSanitizer", "runtime error:")


class Server:
    """A detserve process on 127.0.0.1 with its own free ports."""

    def __init__(self, *args, expect_fail=False):
        self.args = ["--port", "0", "--metrics-port", "0", "--drain-timeout", "20"] + list(args)
        env = dict(os.environ)
        if ASAN:
            env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
            env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
        self.proc = subprocess.Popen([BIN] + self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, text=True, errors="replace")
        self.lines = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.port = self.metrics_port = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.channels = []
        if expect_fail:
            return
        if not self.ready.wait(START_TIMEOUT) or self.port is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("server did not start:\n" + self.log())

    def _read(self):
        for line in self.proc.stderr:
            with self.lock:
                self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on \S+:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
            m = re.search(r"metrics on http://\S+:(\d+)/metrics", line)
            if m:
                self.metrics_port = int(m.group(1))
            if " ready in " in line:
                self.ready.set()
        self.ready.set()

    def log(self):
        with self.lock:
            return "\n".join(self.lines)

    def wait_log(self, pattern, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if re.search(pattern, self.log()):
                return True
            time.sleep(0.02)
        return False

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port

    def channel(self, **opts):
        ch = grpc.insecure_channel(self.target, options=list(opts.items()))
        self.channels.append(ch)
        return ch

    def stub(self):
        return pbg.DetserveStub(self.channel())

    def metrics_text(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """Value of one sample; labels must match exactly the ones given (subset match)."""
        total = None
        for line in self.metrics_text().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(got.get(k) == str(v) for k, v in labels.items()):
                total = (total or 0.0) + float(m.group(3))
        return total if total is not None else 0.0

    def wait_metric(self, pred, name, timeout=10, **labels):
        deadline = time.time() + timeout
        v = self.metric(name, **labels)
        while not pred(v) and time.time() < deadline:
            time.sleep(0.02)
            v = self.metric(name, **labels)
        return v

    def stop(self, timeout=60):
        """SIGTERM, wait, and return (rc, log). Raises when the sanitizer reported anything."""
        for ch in self.channels:
            ch.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError("server did not stop within %d s:\n%s" % (timeout, self.log()))
        self.reader.join(10)
        self.proc.stderr.close()
        log = self.log()
        for mark in SANITIZER_MARKS:
            if mark in log:
                raise AssertionError("sanitizer report from the server:\n" + log[-20000:])
        return rc, log

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            rc, log = self.stop()
            if exc[0] is None and rc != 0:
                raise AssertionError("server exited %d:\n%s" % (rc, log[-5000:]))


def frame(msg):
    """gRPC length prefix (uncompressed)."""
    return b"\x00" + len(msg).to_bytes(4, "big") + msg


def unframe(data):
    out = []
    while len(data) >= 5:
        n = int.from_bytes(data[1:5], "big")
        out.append(data[5:5 + n])
        data = data[5 + n:]
    assert not data, "trailing bytes in the response body"
    return out


class RawH2:
    """A bare HTTP/2 client over one socket (python3-h2), with manual flow control."""

    def __init__(self, port, window=None, auto_ack=True):
        import h2.config
        import h2.connection
        import h2.settings
        self.h2 = __import__("h2.events").events
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.auto_ack = auto_ack
        self.streams = {}
        self.closed = False
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, body=None, method="POST", extra=(), chunks=None):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("content-type", "application/grpc"),
                ("te", "trailers")] + list(extra)
        self.conn.send_headers(sid, hdrs, end_stream=body is None and not chunks)
        self.streams[sid] = {"headers": None, "data": b"", "trailers": None, "ended": False,
                             "reset": None, "frames": 0}
        if chunks:
            for i, c in enumerate(chunks):
                self.conn.send_data(sid, c, end_stream=i == len(chunks) - 1)
                self.flush()
        elif body is not None:
            self.conn.send_data(sid, body, end_stream=True)
        self.flush()
        return sid

    def pump(self, timeout=5.0):
        """Reads what arrives within timeout (one recv); returns False when the socket closed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            st = self.streams.get(getattr(ev, "stream_id", None))
            if isinstance(ev, self.h2.ResponseReceived):
                st["headers"] = dict(ev.headers)
                st["headers_ended_stream"] = ev.stream_ended is not None
            elif isinstance(ev, self.h2.TrailersReceived):
                st["trailers"] = dict(ev.headers)
            elif isinstance(ev, self.h2.DataReceived):
                st["data"] += ev.data
                st["frames"] += 1
                if self.auto_ack:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                else:
                    st.setdefault("unacked", 0)
                    st["unacked"] += ev.flow_controlled_length
            elif isinstance(ev, self.h2.StreamEnded):
                st["ended"] = True
            elif isinstance(ev, self.h2.StreamReset):
                st["reset"] = ev.error_code
                st["ended"] = True
            elif isinstance(ev, self.h2.ConnectionTerminated):
                self.goaway = ev
        self.flush()
        return True

    def ack(self, sid):
        st = self.streams[sid]
        n = st.pop("unacked", 0)
        if n:
            self.conn.acknowledge_received_data(n, sid)
            self.flush()

    def wait_end(self, sid, timeout=20):
        deadline = time.time() + timeout
        while not self.streams[sid]["ended"] and time.time() < deadline:
            if not self.pump(0.2):
                break
        return self.streams[sid]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

#!/usr/bin/env python3
"""trace_summary.py [--layers N] [--top K] TRACE [TRACE...] - where the time of a graph-replayed decode
step goes.

TRACE is a kernel timeline written by bench/gpu/cupti_trace.c (one line a kernel: start_ns
end_ns graph_id node_id grid_x grid_y grid_z block_x name). The graphs replayed most often are the
timed steps (bench_gpu decode replays the fast step 15 times after its warm-ups, the reference
step 7 times). For each such graph (the K replayed most often, default 2) this prints, over its replays (the median replay by wall
time): the step's wall time, and per kernel class the count, the summed kernel time, and the
idle time before the class's kernels (from the end of the last kernel still running to the
kernel's start: launch gaps and dependency waits no kernel overlaps). Kernel time summed over a
class may exceed its share of the wall time when PDL lets kernels overlap, so the median replay
is also split by position in the layer (N layers, default 32) into frontier advances, which
add up to the wall time.
"""
import collections
import gzip
import sys

CLASSES = [
    ("rmsnorm", "rmsnorm"),
    ("dattn", "attention"),
    ("attn", "attention"),
    ("qkv_rope", "qkv_rope"),
    ("skinny_kernel", "gemm_skinny"),
    ("stream_gemm", "gemm_stream"),
    ("gemv", "gemm_gemv"),
    ("silu_mul", "silu_mul"),
    ("gemm_ref", "gemm_ref"),
    ("mt_gemm", "gemm_ref"),
    ("sample", "sample"),
    ("embed", "embed"),
    ("mega", "mega"),
]


def kclass(name):
    low = name.lower()
    for key, cls in CLASSES:
        if key in low:
            return cls
    if "gemm" in low or "xmma" in low or "nvjet" in low or "cutlass" in low or "splitk" in low:
        return "gemm_cublas"
    return "other:" + name[:40]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            p = line.split(" ", 8)
            if len(p) < 9:
                continue
            rows.append((int(p[0]), int(p[1]), int(p[2]), p[8].strip(), int(p[3])))
    rows.sort()
    return rows


def replays(rows):
    """Each graph's kernels (in start order) cut into replays: a replay starts at the node that
    ran first in the graph's first replay. Replays of another length (cut short) are dropped."""
    by_graph = collections.defaultdict(list)
    for r in rows:
        if r[2]:
            by_graph[r[2]].append(r)
    out = {}
    for gid, ks in by_graph.items():
        first = ks[0][4]
        reps, cur = [], []
        for r in ks:
            if r[4] == first and cur:
                reps.append(cur)
                cur = []
            cur.append(r)
        reps.append(cur)
        n = collections.Counter(len(x) for x in reps).most_common(1)[0][0]
        out[gid] = [x for x in reps if len(x) == n]
    return out


def wall(rep):
    return rep[-1][1] - rep[0][0]


def median_replay(reps):
    """The replay of median wall time."""
    return sorted(reps, key=wall)[len(reps) // 2]


def summarize(reps):
    rep = median_replay(reps)
    cnt = collections.Counter()
    busy = collections.Counter()
    idle = collections.Counter()
    last_end = rep[0][0]
    for s, e, _, name, _ in rep:
        c = kclass(name)
        cnt[c] += 1
        busy[c] += e - s
        if s > last_end:
            idle[c] += s - last_end
        last_end = max(last_end, e)
    return wall(rep), cnt, busy, idle, len(rep)


def per_layer(rep, n_layer):
    """The replay's kernels after the first (the embedding) taken as n_layer equal periods (the
    kernels left after them: the final norm, LM head and sampling), by position in the period:
    mean frontier advance (end minus the latest earlier end: the step's wall time splits exactly
    into these), duration, and start relative to the latest earlier end (negative: launched
    early under PDL)."""
    per = (len(rep) - 1) // n_layer
    acc = collections.defaultdict(lambda: [0, 0, 0])
    names = {}
    prev = rep[0][1]
    for i, (s, e, _, name, _) in enumerate(rep[1 : 1 + per * n_layer]):
        a = acc[i % per]
        a[0] += e - prev
        a[1] += e - s
        a[2] += s - prev
        prev = max(prev, e)
        names[i % per] = name
    print(f"    per layer position (mean of {n_layer} layers; us): advance, duration, start")
    tot = 0.0
    for i in range(per):
        a = [x / n_layer / 1e3 for x in acc[i]]
        tot += a[0]
        print(f"    {i:3d} {a[0]:8.2f} {a[1]:8.2f} {a[2]:8.2f}  {kclass(names[i]):<12} {names[i][:60]}")
    print(f"    layer: {tot:.2f} us; after the layers: "
          + ", ".join(f"{kclass(r[3])} {(r[1] - r[0]) / 1e3:.2f}" for r in rep[1 + per * n_layer :]))


def main():
    n_layer, n_top = 32, 2
    args = sys.argv[1:]
    while args[:1] in (["--layers"], ["--top"]):
        if args[0] == "--layers":
            n_layer = int(args[1])
        else:
            n_top = int(args[1])
        args = args[2:]
    for path in args:
        rows = load(path)
        reps = replays(rows)
        print(f"{path}: {len(rows)} kernels, {len(reps)} graphs")
        top = sorted(reps.items(), key=lambda kv: -len(kv[1]))[:n_top]
        for gid, rl in top:
            med, cnt, busy, idle, n = summarize(rl)
            walls = [wall(r) for r in rl]
            print(
                f"  graph {gid}: {len(rl)} replays of {n} kernels; wall median {med / 1e6:.3f} ms "
                f"(min {min(walls) / 1e6:.3f}, max {max(walls) / 1e6:.3f}); "
                f"idle {sum(idle.values()) / 1e6:.3f} ms"
            )
            print(f"    {'class':<16}{'count':>6}{'kernel_ms':>11}{'us_each':>9}{'idle_ms':>9}")
            for c in sorted(busy, key=lambda c: -busy[c]):
                print(
                    f"    {c:<16}{cnt[c]:>6}{busy[c] / 1e6:>11.3f}"
                    f"{busy[c] / cnt[c] / 1e3:>9.2f}{idle[c] / 1e6:>9.3f}"
                )
            per_layer(median_replay(rl), n_layer)
        sys.stdout.flush()


if __name__ == "__main__":
    main()

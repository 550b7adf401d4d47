#!/usr/bin/env python3
"""test_trace_summary.py - bench/gpu/trace_summary.py on a synthetic kernel timeline.

Two graphs replayed back to back (a "fast" step of an embedding, 3 layers of 4 kernels and a
tail of 2, one of the layer kernels launched early and overlapping its predecessor as under PDL;
a "reference" step replayed fewer times), one kernel outside any graph, and a replay cut short.
Checks: replays are cut at the graph's first node and the short one is dropped; the two most
replayed graphs are the ones reported; the per-position frontier advances add up to the median
replay's wall time, and each equals what the timeline was built with; kernel classes follow the
names; idle time is the gaps no kernel covers."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "gpu"))
import trace_summary as ts  # noqa: E402

# (name, duration, gap before it: negative = starts before the previous kernel ends)
LAYER = [
    ("_Z14rmsnorm_kernelPf", 4000, 500),
    ("nvjet_sm90_tss_64x8_TNT", 20000, 300),
    ("_Z16dattn_mma_kernelILi128E", 9000, -2000),  # PDL: launched early, ends 7000 later
    ("_Z13skinny_kernelILi1E", 8000, 200),
]
HEAD = [("_Z12embed_kernelPKt", 3000, 0)]
TAIL = [("nvjet_sm90_tss_128x8_TNT", 50000, 400), ("_Z13sample_kernelPKf", 10000, 100)]
N_LAYER = 3


def one_step(t0, gid, node0):
    """One replay starting at t0: rows (start, end, gid, node, name) and its end time."""
    rows, end, node = [], t0, node0
    for name, dur, gap in HEAD + LAYER * N_LAYER + TAIL:
        s = end + gap
        e = s + dur
        rows.append((s, e, gid, node, name))
        end = max(end, e)
        node += 1
    return rows, end


def write_trace(path, fast_reps, ref_reps):
    lines, t = [], 1000
    for _ in range(fast_reps):
        rows, t = one_step(t, 7, 100)
        t += 5000
        lines += rows
    rows, _ = one_step(t, 7, 100)  # a replay cut short: its first 5 kernels only
    lines += rows[:5]
    t = rows[4][1] + 5000
    lines.append((t, t + 1000, 0, 0, "_Z9memset_kernelv"))
    t += 6000
    for _ in range(ref_reps):
        rows, t = one_step(t, 9, 300)
        t += 5000
        lines += rows
    with open(path, "w") as f:
        for s, e, gid, node, name in lines:
            f.write(f"{s} {e} {gid} {node} 1 1 1 128 {name}\n")


class TraceSummaryTest(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(suffix=".trace")
        os.close(fd)
        write_trace(self.path, 6, 3)

    def tearDown(self):
        os.unlink(self.path)

    def test_replays(self):
        reps = ts.replays(ts.load(self.path))
        self.assertEqual(sorted(reps), [7, 9])
        self.assertEqual(len(reps[7]), 6)  # the cut replay is dropped
        self.assertEqual(len(reps[9]), 3)
        n = len(HEAD) + N_LAYER * len(LAYER) + len(TAIL)
        self.assertTrue(all(len(r) == n for r in reps[7] + reps[9]))

    def test_classes(self):
        self.assertEqual(ts.kclass("_Z14rmsnorm_kernelPf"), "rmsnorm")
        self.assertEqual(ts.kclass("_Z16dattn_mma_kernelILi128E"), "attention")
        self.assertEqual(ts.kclass("nvjet_sm90_tss_64x8_TNT"), "gemm_cublas")
        self.assertEqual(ts.kclass("_Z13skinny_kernelILi1E"), "gemm_skinny")
        self.assertTrue(ts.kclass("_Z3foov").startswith("other:"))

    def test_wall_idle_and_advances(self):
        reps = ts.replays(ts.load(self.path))
        wall, cnt, busy, idle, n = ts.summarize(reps[7])
        rows, end = one_step(0, 7, 100)
        self.assertEqual(wall, end - rows[0][0])
        self.assertEqual(cnt["rmsnorm"], N_LAYER)
        self.assertEqual(busy["attention"], N_LAYER * 9000)
        # idle: every positive gap (the attention's is an overlap, not idle)
        gaps = sum(g for _, _, g in HEAD[1:] + LAYER * N_LAYER + TAIL if g > 0)
        self.assertEqual(sum(idle.values()), gaps)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ts.per_layer(reps[7][0], N_LAYER)
        text = out.getvalue().splitlines()
        adv = [float(line.split()[1]) for line in text[1 : 1 + len(LAYER)]]
        # each kernel's advance is its end minus the previous end: gap + duration, also for the
        # attention that starts 2000 ns early (7000 ns)
        want = [(g + d) / 1e3 for _, d, g in LAYER]
        for a, w in zip(adv, want):
            self.assertAlmostEqual(a, w, places=2)
        head = rows[0][1] - rows[0][0]
        tail_adv = sum(g + d for _, d, g in TAIL)
        self.assertAlmostEqual(sum(adv) * N_LAYER * 1e3 + tail_adv + head, wall, delta=1.0)
        self.assertIn("layer:", text[-1])

    def test_main_reports_two_graphs(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sys.argv = ["trace_summary.py", "--layers", str(N_LAYER), self.path]
            ts.main()
        text = out.getvalue()
        self.assertIn("graph 7: 6 replays", text)
        self.assertIn("graph 9: 3 replays", text)


if __name__ == "__main__":
    unittest.main()

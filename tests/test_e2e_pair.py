#!/usr/bin/env python3
"""test_e2e_pair.py - bench/gpu/e2e_pair.py on synthetic e2e traces.

Two traces of five steps (three decode, two prefill-carrying) in both formats: with the
rows_fast / rows_ref columns (the class comes from the rows, even where a decode step is slow)
and without them (the class comes from the base trace's step time). Checks each class's count,
sums and paired median difference, also split by running requests; that traces of different
lengths are refused; and the command line's output and exit codes."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "gpu"))
import e2e_pair as ep  # noqa: E402

OLD_HDR = "t_s\tstep_ms\trunning\twaiting\ttokens\tref_step\n"
NEW_HDR = "t_s\tstep_ms\trunning\twaiting\ttokens\tref_step\trows_fast\trows_ref\n"

# step_ms of base and other, rows (fast, ref) of base and other, running requests
STEPS = [
    (15.0, 15.5, (256, 0), (0, 256), 256),
    (60.0, 62.0, (2048, 0), (0, 2048), 200),
    (35.0, 36.0, (200, 0), (0, 200), 40),  # a slow decode step: the rows say decode
    (14.0, 14.25, (120, 0), (0, 120), 10),
    (58.0, 59.0, (1900, 0), (0, 1900), 128),
]


def write(path, new, which):
    with open(path, "w") as f:
        f.write(NEW_HDR if new else OLD_HDR)
        for i, (bms, oms, brows, orows, running) in enumerate(STEPS):
            ms = bms if which == 0 else oms
            rows = brows if which == 0 else orows
            line = "%.4f\t%.3f\t%d\t0\t%d\t%d" % (i * 0.1, ms, running, i, which)
            if new:
                line += "\t%d\t%d" % rows
            f.write(line + "\n")


class PairTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.paths = {}
        for new in (True, False):
            for which in (0, 1):
                p = os.path.join(d, "t-%d-%d.tsv" % (new, which))
                write(p, new, which)
                self.paths[(new, which)] = p

    def tearDown(self):
        self.dir.cleanup()

    def test_rows_decide_the_class(self):
        res = ep.pair(ep.load(self.paths[(True, 0)]), ep.load(self.paths[(True, 1)]))
        n, b, o, ds, dm = res["prefill"]
        self.assertEqual(n, 2)
        self.assertAlmostEqual(b, 118.0)
        self.assertAlmostEqual(o, 121.0)
        self.assertAlmostEqual(ds, 3.0)
        self.assertAlmostEqual(dm, 1.5)
        n, b, o, ds, dm = res["decode"]
        self.assertEqual(n, 3)  # the 35 ms step has 200 rows: decode
        self.assertAlmostEqual(b, 64.0)
        self.assertAlmostEqual(o, 65.75)
        self.assertAlmostEqual(ds, 1.75)
        self.assertAlmostEqual(dm, 0.5)

    def test_old_traces_split_by_time(self):
        res = ep.pair(ep.load(self.paths[(False, 0)]), ep.load(self.paths[(False, 1)]))
        self.assertEqual(res["prefill"][0], 3)  # 60, 35 and 58 ms are over 30
        self.assertEqual(res["decode"][0], 2)
        self.assertAlmostEqual(res["decode"][3], 0.75)
        res = ep.pair(ep.load(self.paths[(False, 0)]), ep.load(self.paths[(False, 1)]),
                      split_ms=40.0)
        self.assertEqual(res["prefill"][0], 2)

    def test_by_running(self):
        self.assertEqual([ep.running_bin(r) for r in (1, 31, 32, 127, 128, 255, 256, 300)],
                         ["1-31", "1-31", "32-127", "32-127", "128-255", "128-255", "256+",
                          "256+"])
        res = ep.pair(ep.load(self.paths[(True, 0)]), ep.load(self.paths[(True, 1)]),
                      by_running=True)
        self.assertEqual(list(res), ["prefill 128-255", "decode 1-31", "decode 32-127",
                                     "decode 256+"])
        self.assertEqual(res["prefill 128-255"][0], 2)
        self.assertAlmostEqual(res["prefill 128-255"][3], 3.0)
        self.assertAlmostEqual(res["decode 1-31"][3], 0.25)
        self.assertAlmostEqual(res["decode 32-127"][3], 1.0)
        self.assertAlmostEqual(res["decode 256+"][3], 0.5)

    def test_lengths_must_agree(self):
        base = ep.load(self.paths[(True, 0)])
        with self.assertRaises(ValueError):
            ep.pair(base, base[:-1])

    def test_command_line(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = ep.main([self.paths[(True, 0)], self.paths[(True, 1)]])
        self.assertEqual(rc, 0)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0].split()[0], "steps")
        self.assertEqual(lines[1].split()[:2], ["prefill", "2"])
        self.assertEqual(lines[2].split()[:2], ["decode", "3"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = ep.main(["--by-running", self.paths[(True, 0)], self.paths[(True, 1)]])
        self.assertEqual(rc, 0)
        self.assertEqual(out.getvalue().splitlines()[1].split()[:3], ["prefill", "128-255", "2"])
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(ep.main([self.paths[(True, 0)]]), 2)
            self.assertEqual(ep.main(["--bogus", self.paths[(True, 0)], self.paths[(True, 1)]]), 2)
            self.assertEqual(ep.main([self.paths[(True, 0)], "/nonexistent/trace.tsv"]), 1)
        self.assertIn("e2e_pair", err.getvalue())


if __name__ == "__main__":
    unittest.main()

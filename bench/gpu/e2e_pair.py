#!/usr/bin/env python3
"""e2e_pair.py [--split-ms MS] [--by-running] BASE OTHER - where an e2e run's extra time goes.

BASE and OTHER are per-step traces of `bench_gpu e2e` (E2E_TRACE=1: e2e-trace-NAME.tsv) of the
same workload, e.g. fast and dvr-10%. With every request submitted at once and the same
scheduler, both run the same step shapes in the same order (the step counts must agree), so
step i of one pairs with step i of the other.

Steps are split into two classes:
  - "prefill" steps carry prompt rows: more than 256 rows on either path (traces with the
    rows_fast / rows_ref columns), or, in older traces without them, a BASE step longer than
    --split-ms (default 30: the H200's llama3-8b steps are ~15 ms of decode or ~60 ms with a
    2048-token prompt chunk);
  - "decode" steps are the others.
For each class this prints the step count, each trace's summed step time, and OTHER - BASE
paired step by step: the summed and the median difference. --by-running also splits each class
by BASE's running requests after the step (1-31, 32-127, 128-255, 256 and more): a step's batch.
"""
import csv
import statistics
import sys

DECODE_MAX_ROWS = 256  # the engine's largest decode batch (max_running)


RUNNING_BINS = (32, 128, 256)  # lower edges of the --by-running bins after the first (1)


def running_bin(running):
    """The --by-running bin of a step with this many running requests, as a label."""
    lo = 1
    for edge in RUNNING_BINS:
        if running < edge:
            return "%d-%d" % (lo, edge - 1)
        lo = edge
    return "%d+" % lo


def load(path):
    """The trace's steps: a list of (step_ms, rows or None, running)."""
    with open(path, newline="") as f:
        rd = csv.DictReader(f, delimiter="\t")
        steps = []
        for row in rd:
            rows = None
            if "rows_fast" in row and "rows_ref" in row:
                rows = int(row["rows_fast"]) + int(row["rows_ref"])
            steps.append((float(row["step_ms"]), rows, int(row["running"])))
    return steps


def classify(base, other, split_ms):
    """'prefill' or 'decode' for each step pair."""
    out = []
    for (bms, brows, _), (_, orows, _) in zip(base, other):
        known = [r for r in (brows, orows) if r is not None]
        if known:
            out.append("prefill" if max(known) > DECODE_MAX_ROWS else "decode")
        else:
            out.append("prefill" if bms > split_ms else "decode")
    return out


def pair(base, other, split_ms=30.0, by_running=False):
    """{class: (steps, base_ms, other_ms, diff_sum_ms, diff_median_ms)}; with by_running the
    classes are "prefill 1-31", "decode 256+", ... in that order."""
    if len(base) != len(other):
        raise ValueError("the traces have %d and %d steps: not the same workload" %
                         (len(base), len(other)))
    classes = classify(base, other, split_ms)
    names = ["prefill", "decode"]
    if by_running:
        classes = ["%s %s" % (c, running_bin(base[i][2])) for i, c in enumerate(classes)]
        labels = [running_bin(r) for r in (1,) + RUNNING_BINS]
        names = ["%s %s" % (k, b) for k in names for b in labels]
    out = {}
    for name in names:
        idx = [i for i, c in enumerate(classes) if c == name]
        if not idx:
            continue
        diffs = [other[i][0] - base[i][0] for i in idx]
        out[name] = (len(idx), sum(base[i][0] for i in idx), sum(other[i][0] for i in idx),
                     sum(diffs), statistics.median(diffs))
    return out


def main(argv):
    split_ms, by_running = 30.0, False
    args = list(argv)
    while args and args[0].startswith("--"):
        if args[0] == "--split-ms" and len(args) >= 2:
            split_ms = float(args[1])
            args = args[2:]
        elif args[0] == "--by-running":
            by_running = True
            args = args[1:]
        else:
            sys.stderr.write(__doc__)
            return 2
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        res = pair(load(args[0]), load(args[1]), split_ms, by_running)
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write("e2e_pair: %s\n" % e)
        return 1
    print("%-16s %6s %10s %10s %12s %14s" % ("steps", "n", "base_s", "other_s", "diff_sum_s",
                                             "diff_median_ms"))
    for name, (n, b, o, ds, dm) in res.items():
        print("%-16s %6d %10.3f %10.3f %12.3f %14.3f" % (name, n, b / 1e3, o / 1e3, ds / 1e3, dm))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""e2e_pair.py [--split-ms MS] BASE OTHER - where one e2e configuration's extra time goes.

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
paired step by step: the summed and the median difference.
"""
import csv
import statistics
import sys

DECODE_MAX_ROWS = 256  # the engine's largest decode batch (max_running)


def load(path):
    """The trace's steps: a list of (step_ms, rows or None)."""
    with open(path, newline="") as f:
        rd = csv.DictReader(f, delimiter="\t")
        steps = []
        for row in rd:
            rows = None
            if "rows_fast" in row and "rows_ref" in row:
                rows = int(row["rows_fast"]) + int(row["rows_ref"])
            steps.append((float(row["step_ms"]), rows))
    return steps


def classify(base, other, split_ms):
    """'prefill' or 'decode' for each step pair."""
    out = []
    for (bms, brows), (_, orows) in zip(base, other):
        known = [r for r in (brows, orows) if r is not None]
        if known:
            out.append("prefill" if max(known) > DECODE_MAX_ROWS else "decode")
        else:
            out.append("prefill" if bms > split_ms else "decode")
    return out


def pair(base, other, split_ms=30.0):
    """{class: (steps, base_ms, other_ms, diff_sum_ms, diff_median_ms)}."""
    if len(base) != len(other):
        raise ValueError("the traces have %d and %d steps: not the same workload" %
                         (len(base), len(other)))
    classes = classify(base, other, split_ms)
    out = {}
    for name in ("prefill", "decode"):
        idx = [i for i, c in enumerate(classes) if c == name]
        if not idx:
            continue
        diffs = [other[i][0] - base[i][0] for i in idx]
        out[name] = (len(idx), sum(base[i][0] for i in idx), sum(other[i][0] for i in idx),
                     sum(diffs), statistics.median(diffs))
    return out


def main(argv):
    split_ms = 30.0
    args = list(argv)
    if len(args) >= 2 and args[0] == "--split-ms":
        split_ms = float(args[1])
        args = args[2:]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        res = pair(load(args[0]), load(args[1]), split_ms)
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write("e2e_pair: %s\n" % e)
        return 1
    print("%-8s %6s %10s %10s %12s %14s" % ("steps", "n", "base_s", "other_s", "diff_sum_s",
                                            "diff_median_ms"))
    for name, (n, b, o, ds, dm) in res.items():
        print("%-8s %6d %10.3f %10.3f %12.3f %14.3f" % (name, n, b / 1e3, o / 1e3, ds / 1e3, dm))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

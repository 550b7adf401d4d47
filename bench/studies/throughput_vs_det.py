#!/usr/bin/python3
"""Study 2, throughput vs deterministic fraction: the same closed-loop workload at deterministic
fractions {0, 2, 10, 25, 50, 100}% in mode dvr, against mode fast (no deterministic requests)
and mode invariant (everything on the reference path), in one run. The three servers run side by
side (idle when not measured) and the points are measured round-robin, --repeats times, so slow
drift of a shared machine hits every point alike; each point reports the median tok/s and the
ratio to fast's median.

  throughput_vs_det.py [common flags] [--users U] [--requests N] [--prompt-len D] [--output-len D]
                       [--fractions 0,2,10,25,50,100] [--repeats R]"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--users", type=int, default=None, help="closed-loop users (default 16; smoke 8)")
    ap.add_argument("--requests", type=int, default=None, help="per point (default 96; smoke 16)")
    ap.add_argument("--prompt-len", default=None, help="default uniform:16:64; smoke 16")
    ap.add_argument("--output-len", default=None, help="default 64; smoke 8")
    ap.add_argument("--fractions", default="0,2,10,25,50,100")
    ap.add_argument("--repeats", type=int, default=None, help="round-robin passes (default 3; smoke 1)")
    args = ap.parse_args()
    users = args.users or (8 if args.smoke else 16)
    nreq = args.requests or (16 if args.smoke else 96)
    plen = args.prompt_len or ("16" if args.smoke else "uniform:16:64")
    olen = args.output_len or ("8" if args.smoke else "64")
    fracs = [float(x) for x in args.fractions.split(",")]
    args.repeats = args.repeats or (1 if args.smoke else 3)
    out = common.out_dir(args, "throughput_vs_det")
    wl = ["--users", users, "--requests", nreq, "--prompt-len", plen, "--output-len", olen]
    res = {"params": {"users": users, "requests": nreq, "prompt_len": plen, "output_len": olen,
                      "repeats": args.repeats}, "points": []}
    # (name, server mode, det fraction)
    points = [("fast", "fast", 0.0), ("invariant", "invariant", 0.0)] + [("dvr-%g" % f, "dvr", f) for f in fracs]
    runs = {name: [] for name, _, _ in points}
    with common.Server(args, mode="fast") as s_fast, common.Server(args, mode="invariant") as s_inv, \
            common.Server(args, mode="dvr") as s_dvr:
        srv = {"fast": s_fast, "invariant": s_inv, "dvr": s_dvr}
        for k in range(args.repeats):
            for name, mode, f in points:
                s, _ = common.run_bench(args, srv[mode], "tput-%s-r%d" % (name, k), out,
                                        wl + ["--det-fraction", f / 100.0])
                runs[name].append(s)

    def point(name):
        rs = runs[name]
        rs_sorted = sorted(rs, key=lambda r: r["throughput"]["tok_per_s"] or 0)
        return {"tok_per_s": statistics.median(r["throughput"]["tok_per_s"] or 0 for r in rs),
                "req_per_s": statistics.median(r["throughput"]["req_per_s"] or 0 for r in rs),
                "errors": sum(r["requests"]["errors"] for r in rs),
                "runs_tok_per_s": [r["throughput"]["tok_per_s"] for r in rs],
                "summary": rs_sorted[len(rs) // 2]}

    fast, inv = point("fast"), point("invariant")
    res["fast"], res["invariant"] = fast, inv
    base = fast["tok_per_s"] or float("nan")
    inv["ratio_to_fast"] = inv["tok_per_s"] / base
    for f in fracs:
        p = point("dvr-%g" % f)
        p["det_percent"] = f
        p["ratio_to_fast"] = p["tok_per_s"] / base
        res["points"].append(p)
        common.log("dvr %g%% det: %.1f tok/s = %.3f x fast (runs %s)" % (
            f, p["tok_per_s"], p["ratio_to_fast"], ", ".join("%.0f" % x for x in p["runs_tok_per_s"])))
    common.log("fast %.1f tok/s; invariant %.1f tok/s = %.3f x fast" % (base, inv["tok_per_s"],
                                                                           inv["ratio_to_fast"]))
    res["pass"] = all(p["errors"] == 0 for p in res["points"]) and fast["errors"] == 0 and inv["errors"] == 0
    common.write_result(out, "throughput_vs_det", args, res)
    data = "".join("%g %.6f %.3f\n" % (p["det_percent"], p["ratio_to_fast"], p["tok_per_s"]) for p in res["points"])
    common.gnuplot(args, out, "throughput_vs_det", """
set title "Throughput vs deterministic fraction, mode dvr (%s; fast = %.1f tok/s)"
set xlabel "deterministic requests (%%)"
set ylabel "throughput / fast"
set yrange [0:1.3]
set xrange [-2:102]
plot DAT using 1:2 with linespoints lw 2 pt 7 title "dvr", \\
     %.6f with lines dt 2 lw 2 title "invariant (all requests)", \\
     1 with lines dt 3 lc rgb "gray" title "fast"
""" % (common.model_desc(args), base, inv["ratio_to_fast"]), data)
    if not res["pass"]:
        common.log("FAIL: some requests failed")
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Study 5, injected mismatches: the server's --inject-mismatch P forces a fraction P of verify
windows to roll back. At P in {0, 0.01, 0.05, 0.2}, the same closed-loop workload (50%
deterministic by default) shows how throughput and p99 latency degrade as rollbacks grow.

  inject.py [common flags] [--probs 0,0.01,0.05,0.2] [--det-fraction F] [--users U] [--requests N]"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--probs", default="0,0.01,0.05,0.2")
    ap.add_argument("--det-fraction", type=float, default=0.5)
    ap.add_argument("--users", type=int, default=None, help="default 16; smoke 8")
    ap.add_argument("--requests", type=int, default=None, help="per point (default 96; smoke 16)")
    ap.add_argument("--prompt-len", default=None, help="default uniform:16:64; smoke 16")
    ap.add_argument("--output-len", default=None, help="default 64; smoke 16")
    args = ap.parse_args()
    probs = [float(x) for x in args.probs.split(",")]
    users = args.users or (8 if args.smoke else 16)
    nreq = args.requests or (16 if args.smoke else 96)
    plen = args.prompt_len or ("16" if args.smoke else "uniform:16:64")
    olen = args.output_len or ("16" if args.smoke else "64")
    out = common.out_dir(args, "inject")
    wl = ["--users", users, "--requests", nreq, "--prompt-len", plen, "--output-len", olen,
          "--det-fraction", args.det_fraction]
    res = {"params": {"probs": probs, "det_fraction": args.det_fraction, "users": users, "requests": nreq,
                      "prompt_len": plen, "output_len": olen}, "points": []}
    base = None
    for pr in probs:
        with common.Server(args, mode="dvr", extra=["--inject-mismatch", str(pr)]) as srv:
            s, _ = common.run_bench(args, srv, "inject-%g" % pr, out, wl)
        tok = s["throughput"]["tok_per_s"]
        if base is None:
            base = tok
        p = {"inject": pr, "tok_per_s": tok, "ratio_to_p0": tok / base if base else None,
             "rollback_rate_per_window": s["dvr"]["rollback_rate_per_window"],
             "rollbacks_per_1k_tokens": s["dvr"]["rollbacks_per_1k_tokens"],
             "recompute_ratio": s["dvr"]["recompute_ratio"],
             "det_e2e_p99": s["latency"]["det"]["e2e_ms"]["p99"], "det_tpot_p99": s["latency"]["det"]["tpot_ms"]["p99"],
             "nondet_tpot_p99": s["latency"]["nondet"]["tpot_ms"]["p99"],
             "nondet_ttft_p99": s["latency"]["nondet"]["ttft_ms"]["p99"], "errors": s["requests"]["errors"]}
        res["points"].append(p)
        common.log("inject %g: %.1f tok/s (%.3f x P=0), rollbacks/window %s, det TPOT p99 %s ms" % (
            pr, tok, p["ratio_to_p0"] or 0, p["rollback_rate_per_window"], p["det_tpot_p99"]))
    # more injected mismatches must show up as more rollbacks
    rates = [p["rollback_rate_per_window"] or 0 for p in res["points"]]
    res["pass"] = all(p["errors"] == 0 for p in res["points"]) and rates[-1] >= rates[0]
    common.write_result(out, "inject", args, res)
    data = "".join("%g %.6f %s %s %s\n" % (p["inject"], p["ratio_to_p0"] or 0, p["det_tpot_p99"], p["nondet_tpot_p99"],
                                            p["rollback_rate_per_window"]) for p in res["points"])
    common.gnuplot(args, out, "inject", """
set title "Injected mismatches (%s, %g%% deterministic)"
set xlabel "injected mismatch probability per window"
set ylabel "throughput / (P = 0)"
set y2label "TPOT p99 (ms)"
set ytics nomirror
set y2tics
set yrange [0:1.3]
plot DAT using 1:2 with linespoints lw 2 pt 7 title "throughput ratio", \\
     DAT using 1:3 axes x1y2 with linespoints dt 2 title "det TPOT p99", \\
     DAT using 1:4 axes x1y2 with linespoints dt 3 title "non-det TPOT p99"
""" % (common.model_desc(args), 100 * args.det_fraction), data)
    if not res["pass"]:
        common.log("FAIL: errors, or rollbacks did not grow with injected mismatches")
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Study 4, latency vs load: open-loop Poisson arrivals swept up to saturation, at 0% and 50%
deterministic traffic, in mode dvr. Saturation is first measured with a closed loop (0% det);
the sweep then runs at fractions of it. Reports p50/p99 TTFT and TPOT of the NON-deterministic
requests, to show what deterministic traffic costs the others.

  latency_vs_load.py [common flags] [--loads 0.1,0.25,0.5,0.75,0.9,1.0,1.2] [--requests N]
                     [--det 0,50] [--prompt-len D] [--output-len D] [--users U]"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--loads", default=None, help="fractions of saturation (smoke 0.25,0.75)")
    ap.add_argument("--det", default="0,50", help="deterministic percentages")
    ap.add_argument("--requests", type=int, default=None, help="per point (default 200; smoke 16)")
    ap.add_argument("--users", type=int, default=None, help="closed loop for saturation (default 32; smoke 8)")
    ap.add_argument("--prompt-len", default=None, help="default uniform:16:64; smoke 16")
    ap.add_argument("--output-len", default=None, help="default uniform:16:64; smoke 8")
    args = ap.parse_args()
    loads = [float(x) for x in (args.loads or ("0.25,0.75" if args.smoke else "0.1,0.25,0.5,0.75,0.9,1.0,1.2")).split(",")]
    dets = [float(x) for x in args.det.split(",")]
    nreq = args.requests or (16 if args.smoke else 200)
    users = args.users or (8 if args.smoke else 32)
    plen = args.prompt_len or ("16" if args.smoke else "uniform:16:64")
    olen = args.output_len or ("8" if args.smoke else "uniform:16:64")
    out = common.out_dir(args, "latency_vs_load")
    wl = ["--prompt-len", plen, "--output-len", olen, "--connections", 2]
    res = {"params": {"loads": loads, "det_percent": dets, "requests": nreq, "users": users, "prompt_len": plen,
                      "output_len": olen}, "points": []}
    with common.Server(args, mode="dvr") as srv:
        s, _ = common.run_bench(args, srv, "load-saturation", out,
                                wl + ["--users", users, "--requests", max(nreq, 2 * users), "--det-fraction", 0])
        sat = s["throughput"]["req_per_s"]
        res["saturation_req_per_s"] = sat
        common.log("saturation: %.2f req/s (closed loop, %d users)" % (sat, users))
        for det in dets:
            for ld in loads:
                rate = sat * ld
                s, _ = common.run_bench(args, srv, "load-det%g-x%g" % (det, ld), out,
                                        wl + ["--rate", "%.4f" % rate, "--requests", nreq,
                                              "--det-fraction", det / 100.0])
                nd = s["latency"]["nondet"]
                p = {"det_percent": det, "load": ld, "rate": rate, "achieved_req_per_s": s["throughput"]["req_per_s"],
                     "nondet_ttft_p50": nd["ttft_ms"]["p50"], "nondet_ttft_p99": nd["ttft_ms"]["p99"],
                     "nondet_tpot_p50": nd["tpot_ms"]["p50"], "nondet_tpot_p99": nd["tpot_ms"]["p99"],
                     "det_ttft_p99": s["latency"]["det"]["ttft_ms"]["p99"],
                     "det_tpot_p99": s["latency"]["det"]["tpot_ms"]["p99"],
                     "errors": s["requests"]["errors"], "errors_by_status": s["errors_by_status"]}
                res["points"].append(p)
                common.log("det %g%% load %.2f (%.2f req/s): non-det TTFT p50 %s p99 %s ms, TPOT p50 %s p99 %s ms" % (
                    det, ld, rate, p["nondet_ttft_p50"], p["nondet_ttft_p99"], p["nondet_tpot_p50"], p["nondet_tpot_p99"]))
    res["pass"] = all(p["nondet_ttft_p99"] is not None for p in res["points"])
    common.write_result(out, "latency_vs_load", args, res)
    blocks = []
    for det in dets:
        pts = [p for p in res["points"] if p["det_percent"] == det]
        blocks.append("".join("%.4f %s %s %s %s\n" % (p["rate"], p["nondet_ttft_p50"], p["nondet_ttft_p99"],
                                                     p["nondet_tpot_p50"], p["nondet_tpot_p99"]) for p in pts))
    data = "\n\n".join(blocks)
    for col, what in ((3, "TTFT"), (5, "TPOT")):
        plots = ", \\\n     ".join(
            'DAT index %d using 1:%d with linespoints lw 2 lc %d title "p99, %g%% det", '
            'DAT index %d using 1:%d with linespoints dt 2 lc %d title "p50, %g%% det"' % (
                i, col, i + 1, d, i, col - 1, i + 1, d)
            for i, d in enumerate(dets))
        common.gnuplot(args, out, "latency_vs_load_%s" % what.lower(), """
set title "Non-deterministic %s vs load (%s; saturation %.2f req/s)"
set xlabel "offered load (req/s)"
set ylabel "%s (ms)"
set logscale y
plot %s
""" % (what, common.model_desc(args), sat, what, plots), data)
    if not res["pass"]:
        common.log("FAIL: a point has no non-deterministic latency")
        sys.exit(1)


if __name__ == "__main__":
    main()

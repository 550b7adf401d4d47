#!/usr/bin/python3
"""Study 3, rollback rate: all-deterministic traffic in mode dvr over W (window) x G (group) x
early verification on/off. Reports rollbacks per 1000 tokens, rollbacks per window, the rolled
back fraction of tokens (LLM-42's "recompute" figure: 2.9-14% at (32x16)...(8x64)) and the
engine's recompute ratio (all tokens the reference path computed, per committed token).
Meaningful margins need a real model (--model DIR for SmolLM2); synthetic weights rarely tie.

  rollback.py [common flags] [--windows 8,16,32,64,128] [--groups 1,4,16,32] [--users U]
              [--requests N] [--output-len D]"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--windows", default=None, help="default 8,16,32,64,128; smoke 8,32")
    ap.add_argument("--groups", default=None, help="default 1,4,16,32; smoke 1,4")
    ap.add_argument("--users", type=int, default=None, help="default 16; smoke 4")
    ap.add_argument("--requests", type=int, default=None, help="per point (default 64; smoke 8)")
    ap.add_argument("--prompt-len", default=None, help="default uniform:16:64; smoke 16")
    ap.add_argument("--output-len", default=None, help="default 128; smoke 16")
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    ws = [int(x) for x in (args.windows or ("8,32" if args.smoke else "8,16,32,64,128")).split(",")]
    gs = [int(x) for x in (args.groups or ("1,4" if args.smoke else "1,4,16,32")).split(",")]
    users = args.users or (4 if args.smoke else 16)
    nreq = args.requests or (8 if args.smoke else 64)
    plen = args.prompt_len or ("16" if args.smoke else "uniform:16:64")
    olen = args.output_len or ("16" if args.smoke else "128")
    out = common.out_dir(args, "rollback")
    wl = ["--users", users, "--requests", nreq, "--prompt-len", plen, "--output-len", olen, "--det-fraction", 1,
          "--temperature", args.temperature]
    res = {"params": {"windows": ws, "groups": gs, "users": users, "requests": nreq, "prompt_len": plen,
                      "output_len": olen, "temperature": args.temperature}, "points": []}
    for w in ws:
        for g in gs:
            with common.Server(args, mode="dvr", window=w, group=g) as srv:
                for ev in ("on", "off"):
                    s, _ = common.run_bench(args, srv, "rollback-w%d-g%d-ev%s" % (w, g, ev), out,
                                            wl + ["--early-verify", ev])
                    d = s["dvr"]
                    p = {"window": w, "group": g, "early_verify": ev == "on",
                         "rollbacks_per_1k_tokens": d["rollbacks_per_1k_tokens"],
                         "rollback_rate_per_window": d["rollback_rate_per_window"],
                         "rolled_back_ratio": d["rolled_back_ratio"], "recompute_ratio": d["recompute_ratio"],
                         "tok_per_s": s["throughput"]["tok_per_s"], "errors": s["requests"]["errors"],
                         "dvr": d}
                    res["points"].append(p)
                    common.log("W=%d G=%d early=%s: %.2f rollbacks/1k tok, rolled back %.2f%%, recompute %.3f" % (
                        w, g, ev, d["rollbacks_per_1k_tokens"] or 0, 100 * (d["rolled_back_ratio"] or 0),
                        d["recompute_ratio"] or 0))
    res["pass"] = all(p["errors"] == 0 and p["dvr"]["tokens"] > 0 for p in res["points"])
    common.write_result(out, "rollback", args, res)
    # one data block per (G, early verify): W, recompute ratio, rolled back %, rollbacks/1k
    blocks, titles = [], []
    for g in gs:
        for ev in (True, False):
            pts = [p for p in res["points"] if p["group"] == g and p["early_verify"] == ev]
            blocks.append("".join("%d %.6f %.6f %.6f\n" % (p["window"], p["recompute_ratio"] or 0,
                                                           100 * (p["rolled_back_ratio"] or 0),
                                                           p["rollbacks_per_1k_tokens"] or 0) for p in pts))
            titles.append("G=%d early %s" % (g, "on" if ev else "off"))
    data = "\n\n".join(blocks)
    plots = ", \\\n     ".join('DAT index %d using 1:2 with linespoints lw 2 title "%s"' % (i, t)
                               for i, t in enumerate(titles))
    common.gnuplot(args, out, "rollback_recompute", """
set title "Recompute ratio vs window W (%s, all deterministic)"
set xlabel "window W (tokens)"
set ylabel "reference tokens computed per committed token"
set logscale x 2
plot %s
""" % (common.model_desc(args), plots), data)
    plots2 = ", \\\n     ".join('DAT index %d using 1:3 with linespoints lw 2 title "%s"' % (i, t)
                                for i, t in enumerate(titles))
    common.gnuplot(args, out, "rollback_rolled_back", """
set title "Rolled-back tokens vs window W (%s)"
set xlabel "window W (tokens)"
set ylabel "rolled back (%% of committed tokens)"
set logscale x 2
plot %s
""" % (common.model_desc(args), plots2), data)
    if not res["pass"]:
        common.log("FAIL: errors or no deterministic tokens")
        sys.exit(1)


if __name__ == "__main__":
    main()

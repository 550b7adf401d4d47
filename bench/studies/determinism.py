#!/usr/bin/python3
"""Study 1, determinism: N identical requests (same prompt, seed, sampling) sent under random
background load, in modes fast and dvr. Reports the number of unique completions and the first
position where any completion departs from the most common one. Required: exactly 1 unique
completion in dvr (and one fingerprint), equal to the ref-only oracle's output; the script exits
1 otherwise. In fast mode the probes are sent as normal requests (fast rejects the flag).

  determinism.py [common flags] [--n 200] [--background 200] [--rate R] [--max-tokens 64]"""
import argparse
import collections
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def make_trace(path, n, n_bg, rate, max_tokens, vocab, seed, det, temperature):
    rnd = random.Random(seed)
    probe = [rnd.randrange(vocab) for _ in range(24)]
    probe_seed = rnd.randrange(1 << 31)
    rows = []
    t = 0.0
    # probes and background interleave on one Poisson clock, in random order
    kinds = ["probe"] * n + ["bg"] * n_bg
    rnd.shuffle(kinds)
    for k in kinds:
        t += rnd.expovariate(rate)
        if k == "probe":
            rows.append({"arrival_s": round(t, 6), "prompt_ids": probe, "max_tokens": max_tokens,
                         "deterministic": det, "seed": probe_seed, "temperature": temperature,
                         "tag": "probe"})
        else:
            rows.append({"arrival_s": round(t, 6), "prompt_len": rnd.randint(4, 96),
                         "max_tokens": rnd.randint(1, 2 * max_tokens), "deterministic": False,
                         "seed": rnd.randrange(1 << 31), "temperature": temperature, "tag": "bg"})
    with open(path, "w") as f:
        for r in rows:
            f.write(common.json.dumps(r) + "\n")
    return probe, probe_seed


def analyse(records):
    probes = [r for r in records if r["tag"] == "probe"]
    ok = [r for r in probes if r["status"] == "OK"]
    seqs = collections.Counter(tuple(r["token_ids"]) for r in ok)
    first_div = None
    if len(seqs) > 1:
        mode_seq = seqs.most_common(1)[0][0]
        for s in seqs:
            if s == mode_seq:
                continue
            d = next((i for i, (a, b) in enumerate(zip(s, mode_seq)) if a != b), min(len(s), len(mode_seq)))
            first_div = d if first_div is None else min(first_div, d)
    return {
        "probes": len(probes), "ok": len(ok),
        "errors": collections.Counter(r["status"] for r in probes if r["status"] != "OK"),
        "unique_completions": len(seqs),
        "largest_class": seqs.most_common(1)[0][1] if seqs else 0,
        "first_divergence": first_div,
        "unique_fingerprints": len({r["fingerprint"] for r in ok if r["fingerprint"]}),
        "background_ok": sum(1 for r in records if r["tag"] == "bg" and r["status"] == "OK"),
        "tokens": list(seqs.most_common(1)[0][0]) if seqs else [],
    }


def main():
    ap = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--n", type=int, default=None, help="identical probes (default 200; smoke 12)")
    ap.add_argument("--background", type=int, default=None, help="background requests (default = n)")
    ap.add_argument("--rate", type=float, default=None, help="arrivals/s (default 20; smoke 200)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 64; smoke 12")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--modes", default="fast,dvr")
    args = ap.parse_args()
    n = args.n or (12 if args.smoke else 200)
    n_bg = args.background if args.background is not None else n
    rate = args.rate or (200.0 if args.smoke else 20.0)
    max_tokens = args.max_tokens or (12 if args.smoke else 64)
    out = common.out_dir(args, "determinism")
    result = {"params": {"n": n, "background": n_bg, "rate": rate, "max_tokens": max_tokens,
                         "temperature": args.temperature}, "modes": {}, "summaries": {}}
    oracle_tokens = None
    for mode in args.modes.split(","):
        with common.Server(args, mode=mode) as srv:
            info = common.subprocess.run([args.cli, "--addr", srv.addr, "info"], capture_output=True,
                                         text=True).stdout
            vocab = int(next(l.split()[1] for l in info.splitlines() if l.startswith("model.vocab_size")))
            trace = os.path.join(out, "determinism-%s.trace.jsonl" % mode)
            probe, probe_seed = make_trace(trace, n, n_bg, rate, max_tokens, vocab, args.seed,
                                           mode != "fast", args.temperature)
            s, recs = common.run_bench(args, srv, "determinism-" + mode, out,
                                       ["--trace", trace, "--connections", "2"], records=True)
            os.unlink(trace)
            a = analyse(recs)
            a["errors"] = dict(a["errors"])
            result["modes"][mode] = {k: v for k, v in a.items() if k != "tokens"}
            result["modes"][mode]["completion"] = a["tokens"]
            result["summaries"][mode] = s
            common.log("%s: %d/%d probes OK, %d unique completions, first divergence %s" % (
                mode, a["ok"], a["probes"], a["unique_completions"], a["first_divergence"]))
    # the oracle: the probe alone, through the reference path
    with common.Server(args, mode="ref-only") as srv:
        r = common.subprocess.run([args.cli, "--addr", srv.addr, "generate", "--prompt-ids",
                                   ",".join(map(str, probe)), "--max-tokens", str(max_tokens), "--seed",
                                   str(probe_seed), "--temperature", str(args.temperature), "--ignore-eos",
                                   "--deterministic", "--ids"], capture_output=True, text=True)
        if r.returncode == 0:
            oracle_tokens = [int(x) for x in r.stdout.split("\n")[0].split()]
        result["oracle"] = {"status": "OK" if r.returncode == 0 else r.stderr.strip(), "completion": oracle_tokens}
    dvr = result["modes"].get("dvr")
    ok = True
    if dvr is not None:
        dvr["matches_oracle"] = oracle_tokens is not None and dvr["completion"] == oracle_tokens
        ok = (dvr["unique_completions"] == 1 and dvr["ok"] == dvr["probes"] and dvr["unique_fingerprints"] == 1
              and dvr["matches_oracle"])
    result["pass"] = ok
    common.write_result(out, "determinism", args, result)
    modes = list(result["modes"])
    data = "".join('%d "%s" %d\n' % (i, m, result["modes"][m]["unique_completions"]) for i, m in enumerate(modes))
    common.gnuplot(args, out, "determinism", """
set title sprintf("Unique completions of %d identical requests under load (%s)")
set ylabel "unique completions"
set style fill solid 0.6
set boxwidth 0.5
set yrange [0:%d]
set xtics ()
unset key
plot DAT using 1:3:xtic(2) with boxes lc rgb "#4477aa", DAT using 1:3:(sprintf("%%d", $3)) with labels offset 0,1
""" % (n, common.model_desc(args), max(r["unique_completions"] for r in result["modes"].values()) * 1.2 + 1), data)
    if not ok:
        common.log("FAIL: dvr must give exactly 1 unique completion equal to the oracle: %s" % dvr)
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""collect.py RUN_DIR OUT_DIR [NOTE] - merges one GPU run's files (gpu-*.json, tests.log) into
bench/results/gpu-<date>-<commit>.json with the date, GPU, commit and test summary."""
import json, os, re, sys

run, out = sys.argv[1], sys.argv[2]
note = sys.argv[3] if len(sys.argv) > 3 else ""
log = open(os.path.join(run, "tests.log")).read()
lines = log.splitlines()
commit = next((l.split()[1] for l in lines if l.startswith("commit:")), "unknown")
dirty = "+dirty" in log
date = lines[0].strip()
gpu = lines[2].strip() if len(lines) > 2 else ""
tests = {}
for m in re.finditer(r"=== (test_\w+) rc=(\d+) \((\d+) s\)", log):
    tests[m.group(1)] = {"rc": int(m.group(2)), "secs": int(m.group(3))}
failed = re.findall(r"\[  FAILED  \] (test_\w+)", log)
notes = [l for l in lines if re.search(r"vs CPU|twin|oracle/cuda|fast decode batch|fast path:", l)]
res = {"date": date, "gpu": gpu, "commit": commit + ("+dirty" if dirty else ""), "note": note,
       "tests": tests, "failed": sorted(set(failed)), "test_notes": notes, "bench": {}}
for f in sorted(os.listdir(run)):
    if f.startswith("gpu-") and f.endswith(".json"):
        try:
            res["bench"][f[4:-5]] = json.load(open(os.path.join(run, f)))
        except ValueError as e:
            res["bench"][f[4:-5]] = {"error": str(e)}
day = re.search(r"(\w{3}) (\d+) .*?(\d{4})", date)
stamp = "2026-11-%02d" % int(day.group(2)) if day else "unknown"
name = os.path.join(out, "gpu-%s-%s.json" % (stamp, commit[:8]))
json.dump(res, open(name, "w"), indent=1)
print(name)

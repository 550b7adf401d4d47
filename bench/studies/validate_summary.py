#!/usr/bin/python3
"""Validates detserve-bench summary JSON files against bench/summary.schema.json, plus the
cross-field invariants a schema cannot state (ok + errors = total, error counts add up,
percentiles ordered). Usage: validate_summary.py SUMMARY.json... ; exit 1 on the first failure."""
import json
import math
import os
import sys

import jsonschema

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "summary.schema.json")


def check(path, validator):
    with open(path) as f:
        s = json.load(f)
    validator.validate(s)
    r = s["requests"]
    assert r["ok"] + r["errors"] == r["total"], "ok + errors != total"
    assert sum(s["errors_by_status"].values()) == r["errors"], "errors_by_status does not add up"
    assert r["deterministic"] <= r["total"]
    for cls in ("det", "nondet", "all"):
        for m in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
            d = s["latency"][cls][m]
            q = [d[k] for k in ("min", "p50", "p90", "p99", "p99.9", "max")]
            if d["n"] == 0:
                assert all(v is None for v in q), "%s.%s: values without samples" % (cls, m)
            else:
                assert all(v is not None for v in q), "%s.%s: missing values" % (cls, m)
                assert all(a <= b + 1e-9 for a, b in zip(q, q[1:])), "%s.%s not ordered: %s" % (cls, m, q)
    lat = s["latency"]
    assert lat["det"]["requests"] + lat["nondet"]["requests"] == lat["all"]["requests"] == r["ok"]
    d = s["dvr"]
    if d["windows"]:
        assert math.isclose(d["rollback_rate_per_window"], d["rollbacks"] / d["windows"], rel_tol=1e-6)
        assert d["rollbacks"] <= d["windows"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for p in sys.argv[1:]:
        try:
            check(p, validator)
        except (jsonschema.ValidationError, AssertionError, KeyError, ValueError) as e:
            msg = e.message if isinstance(e, jsonschema.ValidationError) else str(e)
            where = "/".join(str(x) for x in getattr(e, "absolute_path", []))
            print("%s: INVALID: %s %s" % (p, msg, ("at " + where) if where else ""), file=sys.stderr)
            sys.exit(1)
        print("%s: valid" % p)


if __name__ == "__main__":
    main()

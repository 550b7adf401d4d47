#!/usr/bin/env python3
"""smi_summary.py SMI.CSV - one line a second of the nvidia-smi log of call.sh (timestamp, SM clock,
memory clock, power, temperature, throttle reasons; 0x4 = software power cap), then the mean SM
clock and power over the four e2e runs (fast, dvr-10%, fast, dvr-10%), whose bounds (seconds
from the log's start) were read off the per-second lines: each run is ~28 s of ~690 W."""
import collections
import datetime
import sys

rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(',')]
    if len(f) < 6:
        continue
    t = datetime.datetime.strptime(f[0], '%Y/%m/%d %H:%M:%S.%f')
    rows.append((t, int(f[1].split()[0]), float(f[3].split()[0]), int(f[4]), f[5]))
t0 = rows[0][0]
sec = collections.defaultdict(list)
for t, c, p, temp, r in rows:
    sec[int((t - t0).total_seconds())].append((c, p, temp, r))
print('s clock_MHz power_W temp_C throttle_reasons')
for s in sorted(sec):
    v = sec[s]
    print(s, round(sum(x[0] for x in v) / len(v)), round(sum(x[1] for x in v) / len(v)), v[-1][2],
          collections.Counter(x[3] for x in v).most_common(2))
runs = {'fast round 1': (22, 51), 'dvr-10% round 1': (57.5, 88), 'fast round 2': (94, 123.5),
        'dvr-10% round 2': (129, 160.5)}
for name, (a, b) in runs.items():
    v = [(c, p) for t, c, p, _, _ in rows if a <= (t - t0).total_seconds() < b]
    print('%-16s %3d samples: SM clock %.0f MHz, power %.0f W' %
          (name, len(v), sum(x[0] for x in v) / len(v), sum(x[1] for x in v) / len(v)))

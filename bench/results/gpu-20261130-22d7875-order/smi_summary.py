#!/usr/bin/env python3
"""smi_summary.py DIR - mean SM clock and power over each passprof run of call.sh (bounds from
marks.txt, samples from smi.csv: nvidia-smi every 50 ms; throttle reason 0x4 = software power cap)."""
import datetime
import sys

d = sys.argv[1]
rows = []
for line in open(d + '/smi.csv'):
    f = [x.strip() for x in line.split(',')]
    if len(f) < 4:
        continue
    t = datetime.datetime.strptime(f[0], '%Y/%m/%d %H:%M:%S.%f')
    rows.append((t, int(f[1].split()[0]), float(f[2].split()[0]), f[3]))
marks = [line.split() for line in open(d + '/marks.txt')]
day = rows[0][0].date()


def at(s):
    return datetime.datetime.combine(day, datetime.datetime.strptime(s, '%H:%M:%S.%f').time())


for i in range(len(marks) // 2):
    a, b = at(marks[2 * i][4]), at(marks[2 * i + 1][4])
    v = [(c, p, r) for t, c, p, r in rows if a <= t < b]
    capped = sum(1 for _, _, r in v if int(r, 16) & 4)
    print('passprof %d (%s): %d samples, SM clock mean %.0f MHz (min %d, max %d), power mean %.0f W, '
          'power cap active in %d' % (i + 1, marks[2 * i][5], len(v), sum(x[0] for x in v) / len(v),
                                     min(x[0] for x in v), max(x[0] for x in v),
                                     sum(x[1] for x in v) / len(v), capped))

#!/bin/sh
# Runs the five studies into one results folder: bench/results/<backend>-<date>-<commit>/ by default.
# Usage: bench/studies/run_all.sh [common study flags...]   (e.g. --preset small --threads 2)
#   OUT=dir to choose the folder; STUDIES="determinism rollback" to run a subset.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backend=cpu
prev=""
for a in "$@"; do
	[ "$prev" = "--backend" ] && backend=$a
	case $a in --backend=*) backend=${a#--backend=} ;; esac
	prev=$a
done
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
out=${OUT:-$root/bench/results/$backend-$(date -u +%Y%m%d)-$commit}
mkdir -p "$out"
for s in ${STUDIES:-determinism throughput_vs_det rollback latency_vs_load inject}; do
	echo "== $s -> $out" >&2
	/usr/bin/python3 "$here/$s.py" --out "$out" "$@"
done

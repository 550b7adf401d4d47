#!/bin/sh
# stage.sh BUILD DEST [--study] - copies what a GPU run needs (run.sh, the gpu test and bench
# executables, the runtime libraries the GPU machine lacks, the commit id) into DEST, e.g. a
# git-ignored folder of the checkout the device tool sends. --study adds the server, the load
# generator and the CLI (and their libraries) for the studies (bench/gpu/study.sh).
set -eu
build=${1:?usage: stage.sh BUILD DEST [--study]}
dest=${2:?usage: stage.sh BUILD DEST [--study]}
study=${3:-}
src=$(cd "$(dirname "$0")" && pwd)
# Meson 1.0 gives nvcc no depfile, so a CUDA object is not rebuilt when only a header it includes
# changed (kernels/*.cuh, kernels.h, ...): refuse to stage objects older than such a header.
root=$(cd "$src/../.." && pwd)
for o in "$build"/*.p/kernels_*.cu.o; do
  [ -f "$o" ] || continue
  newer=$(find "$root/kernels" "$root/common" \( -name '*.cuh' -o -name '*.h' \) -newer "$o" | head -1)
  if [ -n "$newer" ]; then
    echo "stage.sh: $newer is newer than $o (nvcc objects do not track headers):" >&2
    echo "  touch $root/kernels/*.cu && ninja -C $build" >&2
    exit 1
  fi
done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/devlib"
cp "$src/run.sh" "$src/libpath.sh" "$dest/"
# every gpu-suite test executable (tests/test_gpu_*), and the bench
for t in "$build"/tests/test_gpu_*; do
  [ -f "$t" ] && [ -x "$t" ] && cp "$t" "$dest/bin/"
done
cp "$build/bench/bench_gpu" "$dest/bin/"
libs="libcmocka.so.0 libxxhash.so.0 libjansson.so.4 libcudart.so.13"
if [ "$study" = --study ]; then
  cp "$build/server/detserve" "$build/bench/detserve-bench" "$build/client/detserve-cli" "$dest/bin/"
  libs="$libs libprotobuf-c.so.1 libutf8proc.so.2 libevent-2.1.so.7 libnghttp2.so.14 libpcre2-8.so.0"
fi
for lib in $libs; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
  [ -n "$path" ] && cp -L "$path" "$dest/devlib/"
done
# the kernels' shared library (meson.build: every executable links it)
cp "$build/libdskernels.so" "$dest/devlib/"
# the kernel timeline library (bench/gpu/cupti_trace.c) and CUPTI, where the build has them
if [ -f "$build/bench/libdscupti.so" ]; then
  cp "$build/bench/libdscupti.so" "$dest/devlib/"
  cupti=$(find /usr/local/cuda/lib64/ /usr/local/cuda/lib/ /usr/local/cuda/extras/CUPTI/lib64/ \
    -name 'libcupti.so.*' 2>/dev/null | head -1)
  [ -n "$cupti" ] && cp -L "$cupti" "$dest/devlib/"
fi
# gzip the executables and the kernels' library (a third of the size) so a staged folder stays
# well under the device tool's 64 MiB; run.sh unpacks them
gzip -6 "$dest"/bin/* "$dest/devlib/libdskernels.so"
git -C "$src" rev-parse HEAD > "$dest/COMMIT" 2>/dev/null || true
git -C "$src" status --porcelain | grep -q . && echo "+dirty" >> "$dest/COMMIT" || true
du -sh "$dest"

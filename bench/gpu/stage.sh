#!/bin/sh
# stage.sh BUILD DEST - copies what a GPU run needs (run.sh, the gpu test and bench executables,
# the runtime libraries the GPU machine lacks, the commit id) into DEST, e.g. a git-ignored
# folder of the checkout the device tool sends.
set -eu
build=${1:?usage: stage.sh BUILD DEST}
dest=${2:?usage: stage.sh BUILD DEST}
src=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/devlib"
cp "$src/run.sh" "$dest/"
cp "$build/tests/test_gpu_kernels" "$build/tests/test_gpu_backend" "$build/tests/test_gpu_engine" \
  "$build/bench/bench_gpu" "$dest/bin/"
for lib in libcmocka.so.0 libxxhash.so.0 libjansson.so.4 libcudart.so.13; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
  [ -n "$path" ] && cp -L "$path" "$dest/devlib/"
done
git -C "$src" rev-parse HEAD > "$dest/COMMIT" 2>/dev/null || true
git -C "$src" status --porcelain | grep -q . && echo "+dirty" >> "$dest/COMMIT" || true
du -sh "$dest"

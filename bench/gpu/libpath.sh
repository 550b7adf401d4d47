# libpath.sh - sourced by run.sh and study.sh on the GPU machine: stage_libpath STAGE prints the
# library path a staged run needs (STAGE/devlib: the libraries the GPU machine lacks, copied by
# stage.sh; then the CUDA toolkit's folders and wherever libcublasLt.so.13 is).
stage_libpath() {
	local libs=$1/devlib d lt
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13.0/lib64; do
		[ -d "$d" ] && libs=$libs:$d
	done
	if ! ldconfig -p | grep -q libcublasLt.so.13; then
		lt=$(find /usr /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
		[ -n "$lt" ] && libs=$libs:$(dirname "$lt")
	fi
	echo "$libs"
}

# stage_unpack STAGE: gunzips what stage.sh gzipped (bin/*.gz, devlib/*.gz), in place.
stage_unpack() {
  for z in "$1"/bin/*.gz "$1"/devlib/*.gz; do
    [ -f "$z" ] || continue
    gzip -d -f "$z" && chmod +x "${z%.gz}"
  done
}

#!/bin/sh
# gguf-parts.sh - moves a model file larger than one GPU call may carry (64 MiB) in parts.
#   here:        gguf-parts.sh split FILE N DEST   writes DEST-1 .. DEST-N (git-ignored folders
#                                                  of the checkout), each with one part and the
#                                                  whole file's sha256
#   GPU machine: gguf-parts.sh put PARTDIR STORE   copies the part (and the checksum) into
#                                                  STORE (e.g. /tmp/ds-gguf, kept by a warm
#                                                  machine between back-to-back calls)
#                gguf-parts.sh join STORE OUTFILE  joins the parts in order and checks the sha256
set -eu
cmd=${1:?usage: gguf-parts.sh split|put|join ...}
case $cmd in
split)
	file=${2:?file}; n=${3:?parts}; dest=${4:?dest prefix}
	size=$(stat -c %s "$file")
	per=$(( (size + n - 1) / n ))
	sum=$(sha256sum "$file" | cut -d' ' -f1)
	i=1
	while [ $i -le "$n" ]; do
		rm -rf "$dest-$i"
		mkdir -p "$dest-$i"
		dd if="$file" of="$dest-$i/part.$i" bs=1M iflag=skip_bytes,count_bytes \
			skip=$(( (i - 1) * per )) count=$per status=none
		echo "$sum $n $(basename "$file")" > "$dest-$i/SHA256"
		i=$((i + 1))
	done
	ls -l "$dest"-*/part.*
	;;
put)
	part=${2:?part dir}; store=${3:?store}
	mkdir -p "$store"
	cp "$part"/part.* "$part"/SHA256 "$store"/
	ls -l "$store"
	;;
join)
	store=${2:?store}; out=${3:?outfile}
	read -r sum n name < "$store/SHA256"
	: > "$out.tmp"
	i=1
	while [ $i -le "$n" ]; do
		[ -f "$store/part.$i" ] || { echo "gguf-parts: part $i of $n missing in $store" >&2; exit 1; }
		cat "$store/part.$i" >> "$out.tmp"
		i=$((i + 1))
	done
	got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
	[ "$got" = "$sum" ] || { echo "gguf-parts: sha256 mismatch ($got, want $sum)" >&2; exit 1; }
	mv "$out.tmp" "$out"
	echo "gguf-parts: joined $n parts into $out ($name, sha256 ok)"
	;;
*)
	echo "usage: gguf-parts.sh split|put|join ..." >&2
	exit 2
	;;
esac

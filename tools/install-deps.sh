#!/bin/sh
# Installs the Debian packages detserve needs to build, test and run (idempotent).
set -eu
pkgs="meson ninja-build pkg-config gcc clang libclang-rt-14-dev libjansson-dev libxxhash-dev
 libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev libevent-dev libcmocka-dev libpcre2-dev
 libutf8proc-dev python3 python3-pip python3-grpcio python3-grpc-tools python3-protobuf
 protobuf-compiler protobuf-compiler-grpc python3-h2 nghttp2-client gnuplot-nox python3-jsonschema"
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null

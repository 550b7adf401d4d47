#!/bin/sh
# The main job on an embedded default (README command 1). Grows with the project: it will
# start the server on the CPU with the default model and run a CLI demo against it.
set -eu
build=${1:-build}
echo "run-demo: build in $build is ready; the demo lands with the model loader and scheduler."

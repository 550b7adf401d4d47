#!/bin/bash
# session 24: det-first's scheduling cost to non-deterministic requests, in engine steps, on the CPU (tiny preset,
# one thread): the e2e's shape (1024 requests at once, prompts 256..512 here, 256 out, 2048-token steps, 256
# running, REF whenever a deterministic request runs). Step counts follow the schedule, not the backend's speed (the adaptive window aside); the
# tokens/s columns of this CPU run say nothing about the GPU.
for a in fcfs det-first; do
  build-gpu/bench/bench_offline --preset tiny --requests 1024 --prompt-max 512 --max-tokens 256 \
    --max-step-tokens 2048 --max-running 256 --kv-blocks 13312 --only dvr-10% --threads 1 \
    --admit $a --ref-step-bias 0 --json offline-$a.json > offline-$a.txt 2>&1
done
# The files here are the rerun after bench_offline moved to the load generator's sample statistics
# (bench/loadgen/stats.c: type-7 percentiles, printed with a decimal); every value equals the first run's
# (nearest-rank) output: the samples around each p50 / p99 rank were equal.

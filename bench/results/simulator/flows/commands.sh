#!/bin/bash
# How a worker's connections shared its link, measured (Chrome traces,
# FERRY_TRACE_DIR) beside ferry-sim --parts-out, for the cells the model misses (the policies
# without a credit on the unified cluster; usbyte and mercury on 8 colocated hosts) and two
# it fits (credit). Run as root on a quiet machine from the repository's root. The traces
# (25 MB per 8-host run) stay in $T; the figures in bench/results/simulator/flows/.
set -u
T=${T:-/tmp/u15}; R=bench/results/simulator/flows; mkdir -p $T $R
sim() { build/bin/ferry-sim --format json "$@"; }
# 1. The unified cluster (4 colocated hosts + k CPU-only servers, 200 Mbit/s, 50 MB push_pull).
for run in "fifo 0" "fifo 1" "fifo 2" "fifo 4" "credit 4" "p3 1"; do set -- $run
  mkdir -p $T/trace-$1-k$2
  bench/unified_bench.py --ks $2 --bytes 50M --iters 3 --warmup 2 --repeats 1 \
    --env FERRY_SCHEDULING_POLICY=$1 --env FERRY_TRACE_DIR=$T/trace-$1-k$2 --out $R/unified-meas-$1-k$2.json
  sim --workload pushpull:50M --workers 4 --colocate --cpu-servers $2 --rate 200mbit \
    --env FERRY_SCHEDULING_POLICY=$1 --iterations 3 --warmup 2 --parts-out $T/sim-$1-k$2-parts.json > /dev/null
  bench/flow_shares.py --trace-dir $T/trace-$1-k$2 --sim-parts $T/sim-$1-k$2-parts.json --json $R/flows-k$2-$1.json
done
# 2. 8 colocated hosts, VGG-16 x0.1 bytes, x0.66 compute, 200 Mbit/s.
for p in credit usbyte mercury; do
  mkdir -p $T/t8-$p
  /usr/bin/python3 bench/train_sim_bench.py --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
    --env FERRY_SCHEDULING_POLICY=$p --env FERRY_TRACE_DIR=$T/t8-$p --rates 200mbit --workers 8 \
    --colocate --iterations 5 --warmup 4 --repeats 1 --out $R/8hosts-$p.json
  sim --workload vgg16 --byte-scale 0.1 --compute-scale 0.66 --workers 8 --colocate --rate 200mbit \
    --env FERRY_SCHEDULING_POLICY=$p --iterations 5 --warmup 4 --parts-out $T/s8-$p-parts.json > /dev/null
  bench/flow_shares.py --stages --trace-dir $T/t8-$p --sim-parts $T/s8-$p-parts.json --json $R/stages-8hosts-$p.json
done

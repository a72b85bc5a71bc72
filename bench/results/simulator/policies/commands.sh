#!/bin/bash
# The emulated measurements of usbyte and prophet (2026-12-04; run as root on a quiet
# machine from the repository's root). Output in $OUT.
set -u
OUT=${OUT:-/tmp/ferry-policies}; mkdir -p $OUT
B=${B:-build/bin}
date
# 1. the train-sim matrix, every policy under test, 2 repeats
for m in "vgg16 0.1 0.33,0.66,1.32" "resnet50 0.5 0.46,0.92,1.84" "bert_base 0.1 0.855,1.71,3.42"; do set -- $m
  /usr/bin/python3 bench/train_sim_bench.py --bin $B --models $1 --byte-scale $2 --compute-scales $3 \
    --env FERRY_SCHEDULING_POLICY=credit,usbyte,prophet,p3,fifo --rates 1gbit --workers 2 --servers 2 \
    --iterations 5 --warmup 4 --repeats 2 --out $OUT/matrix-$1.json > $OUT/matrix-$1.log 2>&1
  date
done
# 2. drift: the links halve mid-run; the compute grows 1.5x mid-run (exact sums checked)
/usr/bin/python3 bench/train_sim_bench.py --bin $B --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
  --env FERRY_SCHEDULING_POLICY=credit,usbyte,prophet --rates 1gbit --workers 2 --servers 2 \
  --iterations 20 --warmup 2 --repeats 2 --check --rate-change 7:500mbit --settle 3 \
  --out $OUT/drift-rate.json > $OUT/drift-rate.log 2>&1
date
/usr/bin/python3 bench/train_sim_bench.py --bin $B --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
  --env FERRY_SCHEDULING_POLICY=credit,usbyte,prophet --rates 1gbit --workers 2 --servers 2 \
  --iterations 20 --warmup 2 --repeats 2 --check --compute-change 10:1.5 --settle 3 \
  --out $OUT/drift-compute.json > $OUT/drift-compute.log 2>&1
date
# 3. ferry-sim --tune's pick (usbyte; mercury second) against the defaults and FERRY_AUTOTUNE=1
#    on 8 colocated hosts at 200 Mbit/s (the config of credit-8hosts.json)
/usr/bin/python3 bench/train_sim_bench.py --bin $B --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
  --env FERRY_SCHEDULING_POLICY=credit,usbyte,mercury --rates 200mbit --workers 8 --colocate \
  --iterations 5 --warmup 4 --repeats 2 --out $OUT/tune-8hosts.json > $OUT/tune-8hosts.log 2>&1
date
/usr/bin/python3 bench/train_sim_bench.py --bin $B --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
  --env FERRY_AUTOTUNE=1 --rates 200mbit --workers 8 --colocate \
  --iterations 5 --warmup 24 --repeats 2 --out $OUT/autotune-8hosts.json > $OUT/autotune-8hosts.log 2>&1
date

# Later the same day (from the repository's root, as root, on a quiet machine):
# 4. the matrix for the two policies no earlier matrix had: priority, fifo-bucket (fifo-bucket
#    again after the timer fix: matrix-fifo-bucket-*.json; before it: before-fix-fifo-bucket-*.json)
for m in "vgg16 0.1 0.33,0.66,1.32" "resnet50 0.5 0.46,0.92,1.84" "bert_base 0.1 0.855,1.71,3.42"; do set -- $m
  /usr/bin/python3 bench/train_sim_bench.py --bin $B --models $1 --byte-scale $2 --compute-scales $3 \
    --env FERRY_SCHEDULING_POLICY=priority,fifo-bucket --rates 1gbit --workers 2 --servers 2 \
    --iterations 5 --warmup 4 --repeats 2 --out $OUT/matrix-priority-$1.json > $OUT/matrix-priority-$1.log 2>&1
done
# 5. the unified cluster under every policy but credit (data-path/final/unified.json has credit)
/usr/bin/python3 bench/unified_bench.py --bin $B --workers 4 --ks 0,1,2,4 --rate 200mbit --bytes 50M \
  --iters 3 --warmup 2 --repeats 2 \
  --env FERRY_SCHEDULING_POLICY=fifo,priority,p3,fifo-bucket,mercury,usbyte,prophet \
  --out $OUT/unified-policies.json > $OUT/unified-policies.log 2>&1
# 6. FERRY_AUTOTUNE=1 centred on the time-sized partition, against the default, 8 colocated hosts
/usr/bin/python3 bench/train_sim_bench.py --bin $B --models vgg16 --byte-scale 0.1 --compute-scales 0.66 \
  --env FERRY_AUTOTUNE=0,1 --rates 200mbit --workers 8 --colocate --iterations 5 --warmup 32 \
  --repeats 2 --log-level INFO --out $OUT/autotune-centred-8hosts.json > $OUT/autotune-centred-8hosts.log 2>&1

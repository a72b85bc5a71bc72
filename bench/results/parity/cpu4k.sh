#!/bin/bash
# CPU seconds (user+sys, every process of the local cluster) for 5000 back-to-back 4 KiB push_pulls.
root=$1
/usr/bin/time -f "%U %S %e" $root/scripts/local-cluster -s 2 -w 2 -- $root/build/bin/ferry-perf -b 4K -e 4K -n 5000 -w 20 --format=csv --nobarrier 2>&1 >/dev/null | tail -1

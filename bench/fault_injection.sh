#!/usr/bin/env bash
# The cost of lost and delayed messages: ferry-perf on a local cluster
# (2 servers, 2 workers, loopback) with Ferry's test-only fault injection off, with
# every message held FERRY_TEST_DELAY_MS, and with that plus FERRY_TEST_DROP_PERCENT of
# data messages dropped (recovered by resends after FERRY_RESEND_TIMEOUT_MS). Every
# result is checked exactly (the errors column must stay 0); prints the time per
# push_pull and the ratio of the lossy run to the delay-only run.
#
# Usage: bench/fault_injection.sh [DELAY_MS=20] [DROP_PERCENT=1] [RESEND_MS=200]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
delay=${1:-20}
drop=${2:-1}
resend=${3:-200}
perf=(${FERRY_BIN:-$root/build/bin}/ferry-perf -b 64K -e 16M -f 16 -n 40 -w 3)

run() {  # prints "bytes time_us errors" rows of worker 0
  env "$@" "$root/scripts/local-cluster" -s 2 -w 2 -- "${perf[@]}" 2>&1 |
    sed -n 's/^\[worker 0\] *\([0-9][0-9]*\) *\([0-9.][0-9.]*\) *[0-9.]* *\([0-9][0-9]*\)$/\1 \2 \3/p'
}

base=$(run FERRY_TEST_DELAY_MS=0)
delayed=$(run FERRY_TEST_DELAY_MS="$delay")
lossy=$(run FERRY_TEST_DELAY_MS="$delay" FERRY_TEST_DROP_PERCENT="$drop" FERRY_RESEND_TIMEOUT_MS="$resend")
echo "# ferry-perf, 2 workers x 2 servers, loopback; time per push_pull in us"
printf "%10s %12s %12s %12s %10s %8s\n" bytes no_faults "delay_${delay}ms" "+drop_${drop}%" lossy/delay errors
paste <(echo "$base") <(echo "$delayed") <(echo "$lossy") |
  awk '{ printf "%10d %12.1f %12.1f %12.1f %10.2f %8d\n", $1, $2, $5, $8, $8 / $5, $3 + $6 + $9 }'

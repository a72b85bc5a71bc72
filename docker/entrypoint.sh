#!/bin/sh
# The image's entrypoint (run under tini, which is PID 1 and forwards signals). It hands
# off to ferry-launch, which starts the role DMLC_ROLE names:
#   docker run -e DMLC_ROLE=scheduler ... ferry                        -> ferry-scheduler
#   docker run -e DMLC_ROLE=worker ... ferry python3 train.py          -> ferry-launch python3 train.py
#   docker run ... ferry ferry-launch --local-size 4 python3 train.py  -> the same, said explicitly
# Without DMLC_ROLE, a command runs as is (docker run -it ferry bash; ferry-perf --help).
set -e
if [ "${1:-}" = "ferry-launch" ]; then
  shift
  exec ferry-launch "$@"
fi
if [ -z "${DMLC_ROLE:-}" ] && [ $# -gt 0 ]; then
  exec "$@"
fi
exec ferry-launch "$@"

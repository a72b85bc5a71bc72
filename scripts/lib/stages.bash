# Stage timing for scripts/test and scripts/test-sanitizers (sourced, not run).
#   stages_own              the first script to call it prints stages_report at its exit
#   stage NAME              ends the stage before (printing its time) and starts NAME
#   stage_end               ends the current stage (call it before a subshell that starts
#                           stages of its own, and at the subshell's end)
#   stages_report           the wall time of every stage so far, and the total
#   ctest_timed NAME ARGS   ctest ARGS with a JUnit report, then the 15 slowest tests
#   pytest_timed ARGS       pytest ARGS, with the 15 slowest tests (--durations)
# Stage times go to $FERRY_STAGE_LOG (one "seconds name" line each), which scripts/test
# shares with the scripts it calls, so that one report covers them all.
: "${FERRY_STAGE_LOG:=$(mktemp)}"
export FERRY_STAGE_LOG
_stages_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
_stage_name=""
_stage_start=0

stage_end() {
  [[ -n $_stage_name ]] || return 0
  local took=$((SECONDS - _stage_start))
  echo "== $_stage_name: ${took} s"
  echo "$took $_stage_name" >>"$FERRY_STAGE_LOG"
  _stage_name=""
}

stage() {
  stage_end
  _stage_name=$1
  _stage_start=$SECONDS
  echo "== $1"
}

stages_own() {
  [[ -z ${FERRY_STAGES_OWNER:-} ]] || return 0
  export FERRY_STAGES_OWNER=$$
  trap stages_report EXIT
}

stages_report() {
  stage_end
  [[ -s $FERRY_STAGE_LOG ]] || return 0
  echo "== wall time by stage"
  awk '{ t = $1; $1 = ""; total += t; printf "%7d s %s\n", t, $0 } END { printf "%7d s  in all\n", total }' \
    "$FERRY_STAGE_LOG"
}

# ctest_timed NAME ARGS...: in a build folder; the report is left in Testing/NAME.xml.
ctest_timed() {
  local name=$1 rc=0
  shift
  ctest "$@" --output-junit "$PWD/Testing/$name.xml" || rc=$?
  python3 "$_stages_root/tests/support/slowest_tests.py" "$PWD/Testing/$name.xml" 15 || true
  return "$rc"
}

pytest_timed() {
  PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider -p timeout \
    --durations=15 --durations-min=0.5 "$@"
}

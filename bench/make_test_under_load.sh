#!/usr/bin/env bash
# make test three times in a row on a clean clone while another make test runs beside it
# (issue 20: the suite must pass on a busy 2-core machine). Both clones start without venvs,
# so the first run of each builds them inside make test, as CI does.
#
# Usage: bench/make_test_under_load.sh [WORKDIR] [RUNS]   (default /tmp/specdeploy-load, 3)
# Writes WORKDIR/timings.txt (one line per make test: rc, seconds, start, end) and a log per run;
# bench/RESULTS.md records runs on the project's 2-core machine.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/specdeploy-load}"
runs="${2:-3}"
rm -rf "$work" && mkdir -p "$work"
git clone -q "$repo" "$work/run" && git clone -q "$repo" "$work/beside"
echo "commit $(git -C "$work/run" rev-parse --short HEAD)" > "$work/timings.txt"

one_run() {  # one_run CLONE N: make test in CLONE, timed, logged as CLONE-N.log
    local start end rc
    start=$(date +%s)
    (cd "$work/$1" && make test) > "$work/$1-$2.log" 2>&1
    rc=$?
    end=$(date +%s)
    echo "$1 $2 rc=$rc $((end - start))s start=$(date -u -d "@$start" +%H:%M:%S)" \
        "end=$(date -u -d "@$end" +%H:%M:%S)" >> "$work/timings.txt"
    return $rc
}

( i=0; while [ ! -f "$work/done" ]; do i=$((i + 1)); one_run beside "$i"; done ) &
status=0
for i in $(seq "$runs"); do one_run run "$i" || status=1; done
touch "$work/done"
wait
cat "$work/timings.txt"
grep -hE "^[0-9]+ (passed|failed)" "$work"/run-*.log "$work"/beside-*.log | sort | uniq -c
exit $status

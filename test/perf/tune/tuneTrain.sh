#!/bin/sh
# tuneTrain.sh BROKER WORKLOAD - make tune's training (make pgo's PGO_TRAIN):
# the instrumented broker runs the workload twice, once with each
# --dbLockPrefer (mongoc has no store lock: once), TUNE_TRAIN_DURATION
# seconds each (default 20), so the profile is the workload's.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 workload=$2
gen=$(mktemp -d /tmp/coraine-tunetrain-XXXXXX)
trap 'rm -rf "$gen"' EXIT
python3 "$here/tuneGen.py" gen "$workload" "$gen"
locks="reads writes"
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["store"]["database"] != "mongoc")' \
    "$gen/workload.json" && locks=""
for lock in ${locks:-none}; do
    flags=""
    [ "$lock" = none ] || flags="--dbLockPrefer $lock"
    echo "tune: training on $(basename "$workload") ${flags:-}, ${TUNE_TRAIN_DURATION:-20} s"
    # shellcheck disable=SC2086
    "$here/tuneRun.sh" "$gen" "$bin" --duration "${TUNE_TRAIN_DURATION:-20}" --warmup 0 --label "train $lock" \
        -- $flags >/dev/null
done

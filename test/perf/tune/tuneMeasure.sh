#!/usr/bin/env bash
# tuneMeasure.sh WORKLOAD BROKER [RESULT] - make tune's measurement: with the
# profile-guided broker, --dbLockPrefer reads|writes x glibc / jemalloc /
# tcmalloc (LD_PRELOAD; one not installed is left out and named), each
# TUNE_REPEATS times (2), alternated (the order reversed every other round,
# so the machine's drift spreads over all). Each run is tuneRun.sh's: an
# empty store, the entities, the subscriptions, the warm-up, the measured
# run. Writes RESULT (tune-result.json), build/pgo/tune.env beside the
# broker, and ends with the one-line summary (tuneResult.py).
# TUNE_ALLOCATORS (e.g. "glibc" for a sanitizer build) limits the allocators tried.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
workload=$1 bin=$2 out=${3:-tune-result.json}
repeats=${TUNE_REPEATS:-2}
work=$(mktemp -d /tmp/coraine-tune-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/tuneGen.py" gen "$workload" "$work/gen"
python3 "$here/tuneRun.py" --warn-busy

find_lib() {
    for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
        [ -e "$d/$1" ] && { echo "$d/$1"; return; }
    done
    return 0
}
allocs=("glibc=") missing=()
for a in "jemalloc=libjemalloc.so.2=libjemalloc2" "tcmalloc_minimal=libtcmalloc_minimal.so.4=libtcmalloc-minimal4"; do
    IFS== read -r name lib pkg <<<"$a"
    case " ${TUNE_ALLOCATORS:-$name} " in *" $name "*) ;; *) continue ;; esac
    path=$(find_lib "$lib")
    if [ -n "$path" ]; then allocs+=("$name=$path"); else
        missing+=("$name")
        echo "tune: warning: $name is not installed ($pkg; scripts/deps.sh installs it): left out" >&2
    fi
done
locks=(reads writes)
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["store"]["database"] != "mongoc")' \
    "$work/gen/workload.json" && locks=(none)
combos=()
for l in "${locks[@]}"; do for a in "${allocs[@]}"; do combos+=("$l=$a"); done; done
echo "tune: measuring ${#combos[@]} combinations x $repeats runs of ${TUNE_DURATION:-(the workload duration)} s"
: >"$work/runs.jsonl"
for ((r = 0; r < repeats; r++)); do
    order=("${combos[@]}")
    if ((r % 2)); then order=(); for ((i = ${#combos[@]} - 1; i >= 0; i--)); do order+=("${combos[$i]}"); done; fi
    for c in "${order[@]}"; do
        IFS== read -r lock name path <<<"$c"
        flags=()
        [ "$lock" = none ] || flags=(--dbLockPrefer "$lock")
        line=$("$here/tuneRun.sh" "$work/gen" "$bin" --preload "$path" --label "run $((r + 1)) $lock $name" \
               -- "${flags[@]}") || true
        [ -n "$line" ] || line='{"rps": 0, "failedRequests": 0, "notificationsDue": 0, "notificationsDelivered": 0, "notificationsLost": 0, "error": "tuneRun.sh printed nothing"}'
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["dbLockPrefer"]=None if sys.argv[2]=="none" else sys.argv[2]; r["allocator"]=sys.argv[3]; print(json.dumps(r))' \
            "$line" "$lock" "$name" >>"$work/runs.jsonl"
    done
done
mkdir -p "$(dirname "$out")"
cp "$work/runs.jsonl" "${out%.json}.runs.jsonl"
missing_csv=$(IFS=,; echo "${missing[*]-}")
TUNE_WORKLOAD=$workload python3 "$here/tuneResult.py" "$work/runs.jsonl" --out "$out" --env "$(dirname "$bin")/tune.env" --missing "$missing_csv"

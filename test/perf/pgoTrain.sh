#!/bin/sh
# pgoTrain.sh BROKER - make pgo's training of the instrumented broker on a
# general mix: perf_run.py's request shapes on corDB in RAM (with a PATCH
# that notifies tools/receiver, patch_notify, and a query forwarded through
# fwd_chain.py's three-broker chain over HTTP and over cor://, fwd_http and
# fwd_cor) and on disk with --history corDB (the temporal query too), then
# workload.example.json's mix through tuneRun.sh (105 subscriptions on corDB
# on disk). PGO_TRAIN_DURATION: seconds per shape (5).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
d=${PGO_TRAIN_DURATION:-5}
tmp=$(mktemp -d /tmp/coraine-pgotrain-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "pgo: training $bin, ${d} s per shape"
python3 "$here/perf_run.py" --bin "$bin" --runs 1 --duration "$d" --entities 2000 --connections 20 \
    --shapes retrieve,query,create,batch_create,patch,patch_notify,merge,join,query_ldjson,orderby,orderby_patched,fwd_http,fwd_cor \
    >/dev/null
python3 "$here/perf_run.py" --bin "$bin" --runs 1 --duration "$d" --entities 2000 --connections 20 \
    --broker-flags "--dbDir $tmp/db --history corDB" --shapes retrieve,query,create,patch,merge,temporal >/dev/null
python3 "$here/tune/tuneGen.py" gen "$here/tune/workload.example.json" "$tmp/gen"
"$here/tune/tuneRun.sh" "$tmp/gen" "$bin" --duration "$d" --warmup 0 --label "pgo train: notifying writes" >/dev/null
echo "pgo: training done"

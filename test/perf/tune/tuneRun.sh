#!/bin/sh
# tuneRun.sh GENDIR BROKER [--duration S] [--warmup S] [--preload LIB] [--label L] [-- BROKER FLAGS]
# One run of a workload from an empty store (entities, subscriptions,
# warm-up, measured run); prints one JSON line. The work is tuneRun.py's.
exec python3 "$(dirname "$0")/tuneRun.py" "$@"

#!/usr/bin/env python3
"""tuneCompare.py - what make tune is worth on one workload: three ways, the same harness.

  tuneCompare.py WORKLOAD --general BROKER --tuned BROKER --result tune-result.json
                 [--runs 3] [--csv test/perf/results/tune_<workload>.csv] [--ways a,b,...]

The three ways, alternated run by run (tuneRun.py's runs: an empty store each):
  out-of-the-box   the general build (make pgo) with the default settings
  tuned-profile    make tune's build with the default settings (what the profile alone adds)
  tuned            make tune's build with the settings it chose (tune-result.json's best)
  ceiling          the trivial libmicrohttpd responder (test/perf/trivial_responder.c) driven by the same
                   wrk script: what this machine's HTTP layer and load generator allow for the mix
The CSV (one line per way and run) is report.py's input for doc/tuning.md.
`make tune-compare WORKLOAD=...` builds both brokers and runs this.
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tuneGen  # noqa: E402
import tuneRun  # noqa: E402

FIELDS = ["workload", "way", "run", "rps", "p99us", "failedRequests", "notificationsDue",
          "notificationsDelivered", "brokerOptions", "preload", "error"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--general", required=True)
    ap.add_argument("--tuned", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--csv")
    ap.add_argument("--ways", default="out-of-the-box,tuned-profile,tuned,ceiling",
                    help="the ways to run, alternated (e.g. ceiling,out-of-the-box for the ceiling alone)")
    a = ap.parse_args()
    name = os.path.splitext(os.path.basename(a.workload))[0]
    out = a.csv or os.path.join(tuneRun.ROOT, "test", "perf", "results", "tune_%s.csv" % name)
    with open(a.result) as f:
        best = json.load(f)["best"]
    if not best:
        sys.exit("tuneCompare: %s has no best combination" % a.result)
    w = tuneGen.check(tuneGen.load_file(a.workload))
    gendir = tempfile.mkdtemp(prefix="coraine-tunecmp-")
    tuneGen.gen(w, gendir)
    duration = float(os.environ.get("TUNE_DURATION") or w["duration"])
    warmup = float(os.environ.get("TUNE_WARMUP", "5"))
    default_flags = [] if w["store"]["database"] == "mongoc" else ["--dbLockPrefer", "reads"]
    ways = [("out-of-the-box", a.general, default_flags, ""),
            ("tuned-profile", a.tuned, default_flags, ""),
            ("tuned", a.tuned, best["brokerOptions"].split(), best["env"].get("LD_PRELOAD", "")),
            ("ceiling", None, [], "")]      # the trivial responder under the same wrk script
    wanted = a.ways.split(",")
    unknown = [x for x in wanted if x not in [wy[0] for wy in ways]]
    if unknown:
        sys.exit("tuneCompare: unknown way %s" % ", ".join(unknown))
    ways = [wy for wy in ways if wy[0] in wanted]
    rows = []
    for run in range(a.runs):
        for way, binary, flags, preload in (ways if run % 2 == 0 else list(reversed(ways))):
            r = (tuneRun.run_ceiling(gendir, duration, warmup) if way == "ceiling" else
                 tuneRun.run(gendir, binary, duration, warmup, preload, flags))
            rows.append({"workload": name, "way": way, "run": run + 1, "rps": round(r["rps"]), "p99us": r["p99us"],
                         "failedRequests": r["failedRequests"] + (1 if "error" in r else 0),
                         "notificationsDue": r["notificationsDue"],
                         "notificationsDelivered": r["notificationsDelivered"],
                         "brokerOptions": " ".join(flags), "preload": preload, "error": r.get("error", "")})
            tuneRun.log("compare %s run %d %s: %d requests/s, %d failed, notifications %d/%d" %
                        (name, run + 1, way, rows[-1]["rps"], rows[-1]["failedRequests"],
                         r["notificationsDelivered"], r["notificationsDue"]))
    tuneRun.write_csv(out, rows, "test/perf/tune/tuneCompare.py", runs=a.runs, durationSeconds=duration, best=best)
    print("tuneCompare: %s" % out)


if __name__ == "__main__":
    main()

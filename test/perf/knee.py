#!/usr/bin/env python3
"""knee.py - the saturation knee: an open-model load raised stage by stage.

A broker (corDB in RAM, --broker-flags added) holds perf_run's N Vehicles.
For each shape, openload (test/perf/openload.c: requests scheduled by time,
not by answers, each latency counted from the time the request was due, so
coordinated omission is counted) offers a constant rate for --duration s;
the rate then grows by --step until a stage breaks the bound: p99 above
--p99-ms, more than --max-errors of the requests failed (non-2xx, refused,
unanswered), or less than 95 % of the offered rate achieved. A stage past the
bound is run once more at the same rate (a shared machine's other load makes
single spikes); the ladder stops when the repeat breaks it too. The knee is
the highest offered rate within the bound. --runs repeats the ladders, the
shapes alternated; the median knee is printed.

  python3 test/perf/knee.py [--bin build/release/coraine] [--shapes retrieve,patch]
                            [--start 2000] [--step 1.5] [--max 400000] [--duration 5]
                            [--p99-ms 20] [--max-errors 0.001] [--runs 1] [--warmup 1] [--csv build/perf/knee.csv]

Shapes: retrieve (GET /entities/{id}), query (the type+q page of 20),
patch (PATCH /entities/{id}/attrs over the N Vehicles). One CSV line per
stage (report.py draws the curve). A benchmark: it never fails; on a shared
machine the knee moves with the other load (the CSV says the load average).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402

OPENLOAD = os.path.join(perf_run.ROOT, "build/release/perf/openload")


def openload(url, rate, duration, conns, method="GET", body=None, spread=1, headers=()):
    """One stage of openload: its JSON line as a dict."""
    cmd = perf_run.PIN_LOAD + [OPENLOAD, "-u", url, "-r", str(rate), "-d", str(duration), "-c", str(conns),
                               "-m", method, "-n", str(spread)]
    if body is not None:
        cmd += ["-b", body]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if out.returncode != 0:
        raise RuntimeError("openload failed: %s" % out.stderr.strip()[-300:])
    return json.loads(out.stdout)


def shape_request(shape, base, entities):
    """(url, method, body, spread, headers) for openload."""
    if shape == "retrieve":
        return base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", "GET", None, 1, ()
    if shape == "query":
        return base + perf_run.PAGE, "GET", None, 1, ()
    if shape == "patch":
        return (base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:{i}/attrs", "PATCH",
                '{"speed":{"type":"Property","value":{i}}}', entities, ("Content-Type: application/json",))
    raise SystemExit("knee.py: unknown shape %r (retrieve, query, patch)" % shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--shapes", default="retrieve,patch")
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--start", type=float, default=2000)
    ap.add_argument("--step", type=float, default=1.5)
    ap.add_argument("--max", type=float, default=400000)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=1, help="seconds at the first rate before each ladder, "
                    "not recorded")
    ap.add_argument("--p99-ms", type=float, default=20)
    ap.add_argument("--max-errors", type=float, default=0.001, help="the share of failed requests allowed")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--broker-flags", default="")
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "build/perf/knee.csv"))
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    if not os.path.exists(OPENLOAD):
        raise SystemExit("knee.py: %s is missing: make perf" % OPENLOAD)
    port = perf_run.free_port()
    broker = perf_run.start_broker(port, a.broker_flags.split())
    rows, knees = [], {s: [] for s in a.shapes.split(",")}
    try:
        base = "http://127.0.0.1:%d" % port
        perf_run.wait_up(base + "/version")
        perf_run.load(base, a.entities)
        for run in range(a.runs):
            for s in a.shapes.split(","):
                url, method, body, spread, headers = shape_request(s, base, a.entities)
                if a.warmup:
                    openload(url, round(a.start), a.warmup, a.connections, method, body, spread, headers)
                rate, stage, knee, retried = a.start, 0, 0, False
                while rate <= a.max:
                    stage += 1
                    c0 = tuneRun.cpu_seconds(broker.pid)
                    r = openload(url, round(rate), a.duration, a.connections, method, body, spread, headers)
                    cpu = tuneRun.cpu_seconds(broker.pid) - c0
                    failed = r["non2xx"] + r["errors"]
                    ok = (r["p99us"] <= a.p99_ms * 1000 and failed <= a.max_errors * max(1, r["scheduled"])
                          and r["achievedRate"] >= 0.95 * r["offeredRate"])
                    rows.append({"shape": s, "run": run + 1, "stage": stage, "offeredRate": round(rate),
                                 "achievedRate": round(r["achievedRate"]), "p50us": r["p50us"], "p90us": r["p90us"],
                                 "p99us": r["p99us"], "p999us": r["p999us"], "maxus": r["maxus"],
                                 "scheduled": r["scheduled"], "completed": r["completed"], "non2xx": r["non2xx"],
                                 "errors": r["errors"], "maxBacklog": r["maxBacklog"], "cpuSeconds": round(cpu, 2),
                                 "cpuUsPerRequest": round(cpu / max(1, r["completed"]) * 1e6, 1),
                                 "withinBound": int(ok), "retry": int(retried)})
                    print("run %d %-8s offered %8.0f achieved %8.0f p50 %6d p99 %8d µs failed %d %s" % (
                        run + 1, s, rate, r["achievedRate"], r["p50us"], r["p99us"], failed,
                        "ok" if ok else "PAST THE BOUND"), file=sys.stderr, flush=True)
                    if not ok and not retried:
                        retried = True            # a stage past the bound is run once more at the same rate
                        continue
                    if not ok:
                        break
                    knee, retried = rate, False
                    rate *= a.step
                knees[s].append(knee)
    finally:
        broker.terminate()
        broker.wait()
    tuneRun.write_csv(a.csv, rows, "test/perf/knee.py", p99BoundMs=a.p99_ms, maxErrors=a.max_errors,
                      durationSeconds=a.duration, connections=a.connections, entities=a.entities, runs=a.runs,
                      knees={s: v for s, v in knees.items()})
    print("| shape | knee (offered requests/s within p99 <= %g ms, failed <= %g %%) | runs |"
          % (a.p99_ms, a.max_errors * 100))
    print("|---|---:|---|")
    for s, v in knees.items():
        print("| %s | %.0f | %s |" % (s, statistics.median(v), ", ".join("%.0f" % x for x in v)))


if __name__ == "__main__":
    main()

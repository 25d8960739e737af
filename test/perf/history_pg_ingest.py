#!/usr/bin/env python3
"""history_pg_ingest.py - --history timescale (PostgreSQL): PATCH ingest, the temporal API's load, reads.

Starts a PostgreSQL of its own (test/functional/pg.py's PgServer: initdb in a
temporary directory, Unix socket only, fsync, full_page_writes and
synchronous_commit off as in the tests), then runs the shapes of --shapes:

  ingest  for each broker configuration (`none`, then `timescale` on a fresh
          database), alternated --runs times, a fresh broker loaded with
          --entities Vehicles and wrk's patch.lua (a merge of speed on one of
          them, keep-alive, --connections) for --duration seconds. Per
          configuration (medians of the runs): PATCH/s and the ratio to
          `none`, p99; the broker's CPU per PATCH (utime + stime from /proc,
          over the run); PostgreSQL's CPU per PATCH (every process of the
          cluster), counted until the history of the run is in the database
          (the writer may trail wrk); how long after wrk ended the last
          instance arrived (the queue's lag); non-2xx answers.
  load    --temporal-load instances of one attribute through the temporal API
          (POST .../attrs, 2,000 per request: the upsert path), per binary
          (--bin, and --base-bin side by side, alternated --runs times): the
          wall time until all are in PostgreSQL, instances/s, and
          PostgreSQL's and the broker's CPU per instance.
  lastN, hourly
          history_bench.py's read shapes against --history timescale
          (lastN=100 of --instances instances of one attribute, 1 and --conns
          connections; an hourly avg over a day of 1-second instances), timed
          once the load is in PostgreSQL; medians of --runs.

  python3 test/perf/history_pg_ingest.py [--shapes ingest,load,lastN,hourly] [--runs 3] [--duration 5]
          [--entities 10000] [--connections 50] [--temporal-load 100000] [--base-bin B]
          [--instances 100000] [--conns 8] [--csv-dir test/perf/results]

The rows go to --csv-dir (each CSV with its .meta.json, tuneRun.write_csv) for
report.py: history_pg.csv (ingest), history_pg_load.csv (load),
history_pg_reads.csv (lastN, hourly); a shape group not run leaves its file as
it is. The same tables are printed (markdown). A benchmark: slow figures never
fail it; non-2xx answers are counted in the rows (the exit status is then 1,
after the CSVs are written), and a broker that does not answer stops it.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "functional"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tune"))

from pg import PgServer                                       # noqa: E402
from perf_run import free_port, load, start_broker, wait_up, wrk   # noqa: E402
import perf_run                                               # noqa: E402
import history_bench                                          # noqa: E402
from tuneRun import cpu_seconds, write_csv                    # noqa: E402

SCRIPT = "test/perf/history_pg_ingest.py"


def cluster_pids(pg):
    with open(os.path.join(pg.data, "postmaster.pid")) as f:
        master = int(f.readline())
    pids = [master]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid == master:
                    pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def cluster_cpu(pg):
    """CPU seconds of the cluster's live processes (exited backends are lost:
    the broker keeps its connections, so none exit during a run)."""
    total = 0.0
    for p in cluster_pids(pg):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass
    return total


def counter(pg, db):
    return lambda: int(pg.psql("SELECT count(*) FROM coraine_instances", db))


def run(pg, mode, a):
    port = free_port()
    extra = ["--history", mode]
    db = None
    if mode == "timescale":
        db = pg.new_database()
        extra += ["--historyURI", pg.uri(db)]
    b = start_broker(port, extra)
    try:
        base = "http://127.0.0.1:%d" % port
        wait_up(base + "/version")
        load(base, a.entities)
        count = counter(pg, db) if db else None
        if count:
            while True:                    # the load's own history in first
                n0 = count()
                time.sleep(0.5)
                if count() == n0:
                    break
        c0, p0 = cpu_seconds(b.pid), cluster_cpu(pg) if db else 0.0
        t0 = time.time()
        rps, bad, p99 = wrk(base + "/", a.duration, a.connections, a.threads,
                            os.path.join(HERE, "patch.lua"), (str(a.entities),))
        t_end = time.time()
        c1 = cpu_seconds(b.pid)
        history_bench.alive(b, "--history " + mode)
        lag, rows = 0.0, 0
        if count:
            # the run's instances: one per PATCH; wait until they are all in
            expect = n0 + int(rps * (t_end - t0) * 0.98)
            while count() < expect and time.time() - t_end < 60:
                time.sleep(0.1)
            lag = time.time() - t_end
            rows = count() - n0
        p1 = cluster_cpu(pg) if db else 0.0
        patches = rps * (t_end - t0)
        return {"mode": mode, "rps": rps, "bad": bad, "p99": p99,
                "broker_us": (c1 - c0) * 1e6 / patches, "pg_us": (p1 - p0) * 1e6 / patches if db else 0,
                "lag": lag, "rows": rows, "patches": patches}
    finally:
        perf_run.stop(b, 30)


def ingest_rows(pg, a):
    res = {"none": [], "timescale": []}
    for _ in range(a.runs):
        for mode in res:
            r = run(pg, mode, a)
            res[mode].append(r)
            print("%-9s %8.0f req/s  non-2xx %d  broker %.1f us/PATCH  postgres %.1f us/PATCH  "
                  "lag %.2f s  rows %d" % (mode, r["rps"], r["bad"], r["broker_us"], r["pg_us"],
                                           r["lag"], r["rows"]), file=sys.stderr)
    none = statistics.median(r["rps"] for r in res["none"])
    rows = []
    for mode, rs in res.items():
        m = statistics.median(r["rps"] for r in rs)
        ts = mode == "timescale"
        rows.append({"history": mode, "entities": a.entities, "connections": a.connections,
                     "medianPatchesPerSecond": "%.0f" % m, "runs": history_bench.joined(r["rps"] for r in rs),
                     "vsHistoryNone": "%.2f" % (m / none if none else 0),
                     "medianP99us": history_bench.med(r["p99"] for r in rs),
                     "brokerCpuUsPerPatch": "%.1f" % statistics.median(r["broker_us"] for r in rs),
                     "postgresCpuUsPerPatch": "%.1f" % statistics.median(r["pg_us"] for r in rs) if ts else "-",
                     "historyLagSeconds": "%.2f" % statistics.median(r["lag"] for r in rs) if ts else "-",
                     "non2xx": sum(r["bad"] for r in rs)})
    return rows


def temporal_load(pg, binary, a):
    """N instances through POST /temporal/entities/{id}/attrs; the time until all are in PostgreSQL."""
    db = pg.new_database()
    port = free_port()
    b = start_broker(port, ["--history", "timescale", "--historyURI", pg.uri(db)], binary=binary)
    try:
        base = "http://127.0.0.1:%d" % port
        wait_up(base + "/version")
        c0, p0, t0 = cpu_seconds(b.pid), cluster_cpu(pg), time.time()
        history_bench.fill(base, "urn:ngsi-ld:Sensor:load", a.temporal_load)
        posted = time.time() - t0
        history_bench.alive(b, binary)
        count = counter(pg, db)
        while count() < a.temporal_load and time.time() - t0 < 900:
            time.sleep(0.05)
        wall = time.time() - t0
        n = count()
        return {"wall": wall, "posted": posted, "rate": n / wall, "n": n,
                "pg_us": (cluster_cpu(pg) - p0) * 1e6 / n, "broker_us": (cpu_seconds(b.pid) - c0) * 1e6 / n}
    finally:
        perf_run.stop(b, 30)


def load_rows(pg, a):
    bins = [a.bin or perf_run.BIN] + ([a.base_bin] if a.base_bin else [])
    res = {b: [] for b in bins}
    for _ in range(a.runs):
        for b in bins:
            r = temporal_load(pg, b, a)
            res[b].append(r)
            print("%s: %d instances in PostgreSQL after %.2f s (answered after %.2f s): %.0f instances/s, "
                  "PostgreSQL %.1f us/instance, broker %.1f us/instance" %
                  (b, r["n"], r["wall"], r["posted"], r["rate"], r["pg_us"], r["broker_us"]), file=sys.stderr)
    rows = []
    for b, rs in res.items():
        rows.append({"binary": os.path.relpath(b, ROOT) if b.startswith(ROOT + os.sep) else b,
                     "instances": a.temporal_load,
                     "medianInstancesPerSecond": "%.0f" % statistics.median(r["rate"] for r in rs),
                     "runs": history_bench.joined(r["rate"] for r in rs),
                     "medianSecondsInPostgres": "%.2f" % statistics.median(r["wall"] for r in rs),
                     "medianSecondsAnswered": "%.2f" % statistics.median(r["posted"] for r in rs),
                     "postgresCpuUsPerInstance": "%.1f" % statistics.median(r["pg_us"] for r in rs),
                     "brokerCpuUsPerInstance": "%.1f" % statistics.median(r["broker_us"] for r in rs),
                     "instancesMissing": sum(a.temporal_load - r["n"] for r in rs)})
    return rows


def read_rows(pg, a, shapes):
    """history_bench.reads on a broker with the PostgreSQL backend, each load waited for."""
    db = pg.new_database()
    count = counter(pg, db)

    def written(n):
        t0 = time.time()
        while count() < n and time.time() - t0 < 900:
            time.sleep(0.2)
        print("load    %d instances in PostgreSQL %.1f s after the temporal API answered" %
              (count(), time.time() - t0), file=sys.stderr)
    rows, _ = history_bench.reads(a, shapes, ["--history", "timescale", "--historyURI", pg.uri(db)], written)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="ingest,load,lastN,hourly")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=50, help="ingest: wrk's connections")
    ap.add_argument("--threads", type=int, default=2, help="ingest: wrk's threads")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--instances", type=int, default=100000, help="lastN: the attribute's instances")
    ap.add_argument("--conns", type=int, default=8, help="lastN: the connections of its second row")
    ap.add_argument("--temporal-load", type=int, default=100000, help="load: instances through the temporal API")
    ap.add_argument("--base-bin", help="load: a second binary, side by side")
    ap.add_argument("--csv-dir", default=history_bench.RESULTS, help="where the CSVs go (history_pg*.csv)")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    unknown = set(shapes) - {"ingest", "load", "lastN", "hourly"}
    if unknown:
        ap.error("unknown shape(s): %s" % ", ".join(sorted(unknown)))
    if a.bin:
        perf_run.BIN = a.bin = os.path.abspath(a.bin)
    if a.base_bin:
        a.base_bin = os.path.abspath(a.base_bin)
    out = []                       # (title, rows): each CSV is written as soon as its shapes are done

    def emit(name, title, rows, **extra):
        path = os.path.join(a.csv_dir, name)
        write_csv(path, rows, SCRIPT, **extra)
        out.append(("%s (%s)" % (title, path), rows))
    pg = PgServer()
    try:
        if "ingest" in shapes:
            emit("history_pg.csv", "ingest: PATCH, --history none and timescale", ingest_rows(pg, a),
                 runs=a.runs, durationSeconds=a.duration)
        if "load" in shapes:
            emit("history_pg_load.csv", "load: instances through the temporal API into PostgreSQL",
                 load_rows(pg, a), runs=a.runs)
        if "lastN" in shapes or "hourly" in shapes:
            emit("history_pg_reads.csv", "reads of --history timescale", read_rows(pg, a, shapes),
                 runs=a.runs, durationSeconds=a.duration)
    finally:
        pg.close()
    failed = 0
    for title, rows in out:
        history_bench.print_table(title, rows)
        failed += sum(int(r["non2xx"]) for r in rows if "non2xx" in r)
    if failed:
        print("history_pg_ingest: %d non-2xx answers (counted in the rows above)" % failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

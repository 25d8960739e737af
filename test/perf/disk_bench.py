#!/usr/bin/env python3
"""disk_bench.py - corDB on disk (issue 13): ingest in RAM and with each
--dbSync mode side by side, recovery time, disk bytes per entity, PATCH p99
during snapshots, and the start of an empty store.

  python3 test/perf/disk_bench.py ingest       [--duration 5] [--connections 50] [--runs 1]
  python3 test/perf/disk_bench.py recovery     [--entities 1000000] [--runs 1]
  python3 test/perf/disk_bench.py snapshot-p99 [--entities 1000000] [--duration 5] [--runs 1]
  python3 test/perf/disk_bench.py empty
  (each also [--csv-dir test/perf/results] [--bin build/release/coraine])

Each sub-command writes its rows to one CSV in --csv-dir (with .meta.json:
the commit, the machine, the load average and the command; tune/tuneRun.py's
write_csv), for report.py's sections of doc/performance.md, and prints the
same table to stdout: disk_ingest.csv, disk_recovery.csv,
disk_snapshot_p99.csv, disk_empty.csv. A sub-command not run leaves its file
as it is. One row is one line of the table: the medians of the runs, the
runs themselves (space-separated), the ratios. A benchmark: slow figures
never fail it, only a broker that fails (exits, does not come up, a failed
snapshot).

ingest: for each configuration (RAM, always, interval, none), a fresh broker
(a fresh --dbDir), 10,000 Vehicles loaded, then wrk runs creates (a new
Vehicle per request) and PATCHes (a merge of speed on one of the 10,000), 50
connections; a row per configuration: requests/s and p99 of each, the ratio
to RAM, and for the disk modes the fsyncs per second, the writes per fsync
and the mean time of an fsync (from /statistics: store.disk), and the
broker's CPU time and context switches per write (/proc: what a loaded
machine changes least; on 2 cores the CPU per write bounds `always`), the
share of the writes answered from the syncer (held answers:
store.disk.heldWrites) and the non-2xx answers. Configurations alternate
when --runs > 1; the load average is printed before and after (a shared
machine; both in the .meta.json). --history adds `always` with --history
corDB (its own log, synced in the same round of the syncer). --configs
replaces the configurations (and writes disk_ingest.csv all the same: give
such a run its own --csv-dir).

recovery: N Vehicles loaded (batch creates) into a broker with --dbSync
none, stopped; the start is timed --runs times (until GET /version answers,
the broker's own "recovered in" line and its CPU until then) from the log
alone, then after POST /admin/snapshot --runs times from the snapshot (and
the log after it); a row for each, with the disk bytes per entity (of the
log; of the snapshot file) and the time the snapshot took to write while
the broker served.

snapshot-p99: one broker (--dbSync interval, the default), N Vehicles; per
run, wrk PATCHes for --duration s without a snapshot, then while snapshots
(POST /admin/snapshot, written by the store's thread) run back to back; a
row for each: PATCHes/s, p99, the snapshots written and their median time,
the p99 ratio to the run without (the median of the runs' ratios).

empty: five starts of a broker on a new, empty --dbDir: the broker's own
"recovered in" (recovery and the log's start), the wall time until GET
/version answers and the broker's CPU until then (its threads' schedstat); one row.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tune"))
import perf_run  # noqa: E402  (shares the broker start, wrk and the Vehicle shape)
import tuneRun  # noqa: E402  (write_csv: the CSV and its .meta.json)

ROOT = perf_run.ROOT
SCRIPT = "test/perf/disk_bench.py"
EMPTY_STARTS = 5
median = statistics.median


def start(port, flags, logpath, binary=None):
    log = open(logpath, "ab")
    p = subprocess.Popen(perf_run.PIN_SERVER + [binary or perf_run.BIN, "-fg", "--port", str(port), "--bind", "127.0.0.1",
                          "--logLevel", "info"] + flags, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return p


def timed_start(port, flags, logpath):
    t0 = time.time()
    p = start(port, flags, logpath)
    while True:
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/version" % port, timeout=1).read()
            break
        except Exception:
            if p.poll() is not None:
                raise RuntimeError("broker exited: see %s" % logpath)
            time.sleep(0.002)
    return p, time.time() - t0


def stats(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/statistics" % port, timeout=10) as r:
        return json.load(r)["store"]


def snapshot(base):
    """POST /admin/snapshot, then GET /admin/snapshot until it is done: its answer (raises when it failed)."""
    with urllib.request.urlopen(urllib.request.Request(base + "/admin/snapshot", method="POST"), timeout=60) as r:
        before = json.load(r).get("seq", -1)
    while True:
        with urllib.request.urlopen(base + "/admin/snapshot", timeout=60) as r:
            g = json.load(r)
        if g.get("error"):
            raise RuntimeError("snapshot failed: %s" % g["error"])
        if not g["running"] and g.get("seq", -1) > before:
            return g
        time.sleep(0.01)


def proc_cost(pid):
    """The broker's CPU seconds (user + system) and context switches so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    cs = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                cs += sum(int(l.split()[1]) for l in f if "ctxt_switches" in l)
        except OSError:
            pass
    return cpu, cs


def cpu_ns_threads(pid):
    """The CPU time of the broker's living threads (ns, /proc/PID/task/*/schedstat: finer than the
    10 ms ticks of /proc/PID/stat, for a start of a few ms)."""
    ns = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                ns += int(f.read().split()[0])
        except OSError:
            pass
    return ns


def du(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def joined(xs, fmt):
    return " ".join(fmt % x for x in xs)


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def write(a, name, rows, **extra):
    """rows to --csv-dir/disk_NAME.csv (+ .meta.json), and as a markdown table to stdout."""
    path = os.path.join(a.csv_dir, "disk_%s.csv" % name)
    tuneRun.write_csv(path, rows, SCRIPT, **extra)
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r.values()) + " |")
    print("(written to %s)" % path)


def ingest(a):
    configs = [("RAM", [])] + [(m, ["--dbSync", m]) for m in ("always", "interval", "none")]
    if a.history:
        configs += [("always + history", ["--dbSync", "always", "--history", "corDB"])]
    if a.configs:
        # NAME=FLAGS;NAME=FLAGS ... (e.g. "RAM=;always=--dbSync always --connectionPoolSize 32");
        # a flag bin=PATH runs that binary (a before / after pair side by side)
        configs = [(c.split("=", 1)[0], c.split("=", 1)[1].split()) for c in a.configs.split(";")]
    res = {name: {"create": [], "patch": [], "cp99": [], "pp99": [], "fs": [], "wpf": [], "fms": [],
                  "cpu": [], "cs": [], "held": [], "bad": 0} for name, _ in configs}
    work = tempfile.mkdtemp(prefix="coraine-diskbench-")
    load0 = loadavg()
    try:
        for run in range(a.runs):
            for k, (name, flags) in enumerate(configs):
                port = perf_run.free_port()
                d = os.path.join(work, "db-%d-%d" % (run, k))
                fl = [f for f in flags if not f.startswith("bin=")]
                binary = next((f[4:] for f in flags if f.startswith("bin=")), None)
                fl += ["--dbDir", d] if name != "RAM" else []
                p = start(port, fl, os.path.join(work, "broker.log"), binary)
                try:
                    base = "http://127.0.0.1:%d" % port
                    perf_run.wait_up(base + "/version")
                    perf_run.load(base, 10000)
                    s0, t0, c0 = stats(port), time.time(), proc_cost(p.pid)
                    cr = perf_run.wrk_full(base + "/ngsi-ld/v1/entities", a.duration, a.connections, a.threads,
                                           os.path.join(HERE, "create.lua"))
                    pr = perf_run.wrk_full(base + "/", a.duration, a.connections, a.threads,
                                           os.path.join(HERE, "patch.lua"), ["10000"])
                    s1, t1, c1 = stats(port), time.time(), proc_cost(p.pid)
                finally:
                    perf_run.stop(p, 60)
                shutil.rmtree(d, ignore_errors=True)     # keep the disk small: one store at a time
                r = res[name]
                r["create"].append(cr["rps"])
                r["cp99"].append(cr["p99us"] or 0)
                r["patch"].append(pr["rps"])
                r["pp99"].append(pr["p99us"] or 0)
                nreq = max(cr["requests"] + pr["requests"], 1)
                r["cpu"].append((c1[0] - c0[0]) * 1e6 / nreq)
                r["cs"].append((c1[1] - c0[1]) / nreq)
                r["bad"] += cr["non2xx"] + pr["non2xx"]
                if cr["non2xx"] or pr["non2xx"]:
                    print("warning: %s: %d non-2xx answers" % (name, cr["non2xx"] + pr["non2xx"]))
                if "disk" in s1:
                    fs = s1["disk"]["fsyncs"] - s0["disk"]["fsyncs"]
                    w = s1["disk"]["logWrites"] - s0["disk"]["logWrites"]
                    r["fs"].append(fs / (t1 - t0))
                    us = s1["disk"].get("fsyncMicros", 0) - s0["disk"].get("fsyncMicros", 0)
                    if fs:                  # none: no fsync while wrk ran, nothing to divide ("-")
                        r["wpf"].append(w / fs)
                        r["fms"].append(us / 1000 / fs)
                    h = s1["disk"].get("heldWrites", 0) - s0["disk"].get("heldWrites", 0)
                    if w:
                        r["held"].append(h / w)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ram = "RAM" if "RAM" in res else configs[0][0]
    ram_c, ram_p = median(res[ram]["create"]), median(res[ram]["patch"])
    load1 = loadavg()
    print("load average (1, 5, 15 min): %.1f %.1f %.1f before, %.1f %.1f %.1f after; %d runs of %d s per shape" % (
        tuple(load0 + load1) + (a.runs, a.duration)))
    rows = []
    for name, _ in configs:
        r = res[name]
        c, pt = median(r["create"]), median(r["patch"])
        rows.append({
            "store": name if name == "RAM" or a.configs else "disk, --dbSync " + name,
            "createsPerSecond": round(c), "createsRuns": joined(r["create"], "%.0f"),
            "createsVsRam": "%.2f" % (c / ram_c if ram_c else 0), "createsP99ms": "%.1f" % (median(r["cp99"]) / 1000),
            "patchesPerSecond": round(pt), "patchesRuns": joined(r["patch"], "%.0f"),
            "patchesVsRam": "%.2f" % (pt / ram_p if ram_p else 0), "patchesP99ms": "%.1f" % (median(r["pp99"]) / 1000),
            "fsyncsPerSecond": "%.0f" % median(r["fs"]) if r["fs"] else "-",
            "writesPerFsync": "%.1f" % median(r["wpf"]) if r["wpf"] else "-",
            "msPerFsync": "%.2f" % median(r["fms"]) if r["fms"] else "-",
            "brokerCpuUsPerWrite": "%.1f" % median(r["cpu"]),
            "contextSwitchesPerWrite": "%.1f" % median(r["cs"]),
            "heldShare": "%.0f%%" % (100 * median(r["held"])) if r["held"] else "-",
            "non2xx": r["bad"]})
    write(a, "ingest", rows, runs=a.runs, durationSeconds=a.duration, connections=a.connections,
          entitiesLoaded=10000, loadAveragesBefore=load0)


def recovery(a):
    work = tempfile.mkdtemp(prefix="coraine-recovery-")
    d, logpath = os.path.join(work, "db"), os.path.join(work, "broker.log")
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    try:
        p = start(port, ["--dbDir", d, "--dbSync", "none", "--dbSnapshotSize", "0"], logpath)
        try:
            perf_run.wait_up(base + "/version")
            t0 = time.time()
            perf_run.load(base, a.entities)
            load_s = time.time() - t0
        finally:
            perf_run.stop(p, 60)
        log_bytes = du(d)

        def restart():
            p, secs = timed_start(port, ["--dbDir", d, "--dbSnapshotSize", "0"], logpath)  # no snapshot of its own
            try:
                cpu = proc_cost(p.pid)[0]   # the broker's CPU until it answered: what a loaded machine changes least
                with open(logpath) as f:
                    ms = re.findall(r"recovered .* in ([\d.]+) ms: (\d+) entities", f.read())[-1]
            except Exception:
                perf_run.stop(p, 60)
                raise
            return p, (secs, float(ms[0]), cpu, int(ms[1]))

        load0 = loadavg()
        from_log, from_snap = [], []
        for _ in range(a.runs):
            p, got = restart()
            from_log.append(got)
            if len(from_log) < a.runs:
                perf_run.stop(p, 60)
        try:
            snap = snapshot(base)       # the last broker started from the log writes it, serving
        finally:
            perf_run.stop(p, 60)
        # the snapshot stands for every entity; the restarts read it, then the log after its seq
        for _ in range(a.runs):
            p, got = restart()
            from_snap.append(got)
            perf_run.stop(p, 60)
        load1 = loadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = from_log[-1][3]
    print("entities: %d (loaded in %.1f s through batch creates); load average %.1f before the starts, %.1f after; "
          "the snapshot written in %.0f ms" % (n, load_s, load0[0], load1[0], snap["ms"]))
    rows = []
    for what, runs, nbytes, of, written in (("the log only", from_log, log_bytes, "the log", "-"),
                                            ("a snapshot (+ the log after it)", from_snap, snap["bytes"],
                                             "the snapshot", "%.0f" % snap["ms"])):
        rows.append({"startFrom": what, "entities": runs[-1][3],
                     "startSeconds": "%.2f" % median(x[0] for x in runs), "startSecondsRuns": joined([x[0] for x in runs], "%.2f"),
                     "recoveryMs": "%.0f" % median(x[1] for x in runs), "recoveryMsRuns": joined([x[1] for x in runs], "%.0f"),
                     "brokerCpuSeconds": "%.2f" % median(x[2] for x in runs),
                     "diskBytes": nbytes, "diskBytesOf": of, "bytesPerEntity": "%.0f" % (nbytes / max(runs[-1][3], 1)),
                     "snapshotWrittenMs": written})
    write(a, "recovery", rows, runs=a.runs, entities=a.entities, loadSeconds=round(load_s, 1),
          loadAveragesBefore=load0)


def snapshot_p99(a):
    """PATCH p99 over N entities, without and during snapshots (POST /admin/snapshot,
    written by the store's thread, back to back while wrk runs), alternated --runs times."""
    work = tempfile.mkdtemp(prefix="coraine-snapp99-")
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    script, args = os.path.join(HERE, "patch.lua"), [str(a.entities)]
    quiet, busy, snaps, errors = [], [], [], []
    load0 = loadavg()
    try:
        p = start(port, ["--dbDir", os.path.join(work, "db"), "--dbSnapshotSize", "0"], os.path.join(work, "broker.log"))
        try:
            perf_run.wait_up(base + "/version")
            perf_run.load(base, a.entities)
            for _ in range(a.runs):
                quiet.append(perf_run.wrk_full(base + "/", a.duration, a.connections, a.threads, script, args))
                stop_flag, these = [False], []

                def snapper():
                    try:
                        while not stop_flag[0]:
                            these.append(snapshot(base)["ms"])
                    except Exception as e:      # the broker failed: reported after wrk
                        errors.append(e)

                th = threading.Thread(target=snapper)
                th.start()
                try:
                    busy.append(perf_run.wrk_full(base + "/", a.duration, a.connections, a.threads, script, args))
                finally:
                    stop_flag[0] = True
                    th.join()
                if errors:
                    raise errors[0]
                snaps.append(these)
        finally:
            perf_run.stop(p, 60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [b["p99us"] / q["p99us"] if q["p99us"] and b["p99us"] else 0 for q, b in zip(quiet, busy)]
    every = [ms for s in snaps for ms in s]
    rows = []
    for what, runs, ns, ms, ratio, rruns in (
            ("no snapshot", quiet, "0", "-", "1.00", "-"),
            ("snapshots back to back", busy, joined([len(s) for s in snaps], "%d"),
             "%.0f" % median(every) if every else "-", "%.2f" % median(ratios), joined(ratios, "%.2f"))):
        rows.append({"case": what, "entities": a.entities,
                     "patchesPerSecond": round(median(x["rps"] for x in runs)),
                     "patchesRuns": joined([x["rps"] for x in runs], "%.0f"),
                     "p99ms": "%.1f" % (median(x["p99us"] or 0 for x in runs) / 1000),
                     "p99msRuns": joined([(x["p99us"] or 0) / 1000 for x in runs], "%.1f"),
                     "snapshotsPerRun": ns, "snapshotMs": ms,
                     "p99VsNoSnapshot": ratio, "p99RatioRuns": rruns,
                     "non2xx": sum(x["non2xx"] for x in runs)})
    print("load average %.1f before, %.1f after" % (load0[0], os.getloadavg()[0]))
    write(a, "snapshot_p99", rows, runs=a.runs, durationSeconds=a.duration, connections=a.connections,
          entities=a.entities, loadAveragesBefore=load0)


def empty(a):
    work = tempfile.mkdtemp(prefix="coraine-empty-")
    logpath = os.path.join(work, "broker.log")
    walls, cpus = [], []
    try:
        for i in range(EMPTY_STARTS):
            port = perf_run.free_port()
            p, secs = timed_start(port, ["--dbDir", os.path.join(work, "db%d" % i)], logpath)
            cpus.append(cpu_ns_threads(p.pid) / 1e6)
            walls.append(secs * 1000)
            perf_run.stop(p, 60)
        with open(logpath) as f:
            times = [float(x) for x in re.findall(r"recovered .* in ([\d.]+) ms", f.read())]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("load average %.1f" % os.getloadavg()[0])
    write(a, "empty", [{"store": "empty, on disk (a new --dbDir)", "starts": len(times),
                        "recoveryMs": "%.1f" % median(times), "recoveryMsRuns": joined(times, "%.1f"),
                        "startMs": "%.0f" % median(walls), "startMsRuns": joined(walls, "%.0f"),
                        "brokerCpuMs": "%.1f" % median(cpus), "brokerCpuMsRuns": joined(cpus, "%.1f")}],
          runs=EMPTY_STARTS)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ingest", "recovery", "empty", "snapshot-p99"])
    ap.add_argument("--runs", type=int, default=1,
                    help="ingest, snapshot-p99: alternated runs; recovery: starts from the log, and from the snapshot")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--entities", type=int, default=1000000)
    ap.add_argument("--history", action="store_true", help="ingest: also `always` with --history corDB")
    ap.add_argument("--configs", help="ingest: NAME=FLAGS;... instead of RAM and the three modes "
                    "(a NAME other than RAM gets a fresh --dbDir)")
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--csv-dir", default=os.path.join(ROOT, "test", "perf", "results"),
                    help="where disk_<sub-command>.csv and its .meta.json go (default test/perf/results)")
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    {"ingest": ingest, "recovery": recovery, "empty": empty, "snapshot-p99": snapshot_p99}[a.what](a)


if __name__ == "__main__":
    main()

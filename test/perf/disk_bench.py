#!/usr/bin/env python3
"""disk_bench.py - corDB on disk (issue 13): ingest in RAM and with each
--dbSync mode side by side, recovery time, disk bytes per entity, and the
start of an empty store.

  python3 test/perf/disk_bench.py ingest   [--duration 5] [--connections 50] [--runs 1]
  python3 test/perf/disk_bench.py recovery [--entities 1000000]
  python3 test/perf/disk_bench.py empty
  python3 test/perf/disk_bench.py snapshot-p99 [--entities 1000000] [--duration 5]

ingest: for each configuration (RAM, always, interval, none), a fresh broker
(a fresh --dbDir), 10,000 Vehicles loaded, then wrk runs creates (a new
Vehicle per request) and PATCHes (a merge of speed on one of the 10,000), 50
connections; the report gives requests/s and p99 of each, the ratio to RAM,
and for the disk modes the fsyncs per second, the writes per fsync and the
mean time of an fsync (from /statistics: store.disk), and the broker's CPU
time and context switches per write (/proc: what a loaded machine changes
least; on 2 cores the CPU per write bounds `always`), and the share of the
writes answered from the syncer (held answers: store.disk.heldWrites).
Configurations alternate when --runs > 1; the load average is printed before
and after (a shared machine). --history adds `always` with --history corDB
(its own log, synced in the same round of the syncer).

recovery: N Vehicles loaded (batch creates) into a broker with --dbSync
none, stopped; the start is timed (until GET /version answers, and the
broker's own "recovered in" line) from the log alone, then after POST
/admin/snapshot from the snapshot; disk bytes per entity of each.
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
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_run  # noqa: E402  (shares the broker start, wrk and the Vehicle shape)

ROOT = perf_run.ROOT


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
    """POST /admin/snapshot, then GET /admin/snapshot until it is done: its answer."""
    with urllib.request.urlopen(urllib.request.Request(base + "/admin/snapshot", method="POST"), timeout=60) as r:
        before = json.load(r).get("seq", -1)
    while True:
        with urllib.request.urlopen(base + "/admin/snapshot", timeout=60) as r:
            g = json.load(r)
        if not g["running"] and (g.get("seq", -1) > before or g.get("error")):
            return g
        time.sleep(0.01)


def stop(p):
    p.terminate()
    p.wait(timeout=60)


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


def du(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def ingest(a):
    configs = [("RAM", [])] + [(m, ["--dbSync", m]) for m in ("always", "interval", "none")]
    if a.history:
        configs += [("always + history", ["--dbSync", "always", "--history", "corDB"])]
    if a.configs:
        # NAME=FLAGS;NAME=FLAGS ... (e.g. "RAM=;always=--dbSync always --connectionPoolSize 32");
        # a flag bin=PATH runs that binary (a before / after pair side by side)
        configs = [(c.split("=", 1)[0], c.split("=", 1)[1].split()) for c in a.configs.split(";")]
    res = {name: {"create": [], "patch": [], "cp99": [], "pp99": [], "fs": [], "wpf": [], "fms": [],
                  "cpu": [], "cs": [], "held": []} for name, _ in configs}
    work = tempfile.mkdtemp(prefix="coraine-diskbench-")
    load0 = os.getloadavg()
    for run in range(a.runs):
        for name, flags in configs:
            port = perf_run.free_port()
            d = os.path.join(work, "db-%s-%d" % (name, run))
            fl = [f for f in flags if not f.startswith("bin=")]
            binary = next((f[4:] for f in flags if f.startswith("bin=")), None)
            fl += ["--dbDir", d] if name != "RAM" else []
            p = start(port, fl, os.path.join(work, "broker.log"), binary)
            base = "http://127.0.0.1:%d" % port
            perf_run.wait_up(base + "/version")
            perf_run.load(base, 10000)
            s0, t0, c0 = stats(port), time.time(), proc_cost(p.pid)
            rps, bad, p99 = perf_run.wrk(base + "/ngsi-ld/v1/entities", a.duration, a.connections, a.threads,
                                         os.path.join(HERE, "create.lua"))
            res[name]["create"].append(rps)
            res[name]["cp99"].append(p99 or 0)
            rps, bad2, p99 = perf_run.wrk(base + "/", a.duration, a.connections, a.threads,
                                          os.path.join(HERE, "patch.lua"), ["10000"])
            res[name]["patch"].append(rps)
            res[name]["pp99"].append(p99 or 0)
            s1, t1, c1 = stats(port), time.time(), proc_cost(p.pid)
            nreq = (res[name]["create"][-1] + res[name]["patch"][-1]) * a.duration
            res[name]["cpu"].append((c1[0] - c0[0]) * 1e6 / max(nreq, 1))
            res[name]["cs"].append((c1[1] - c0[1]) / max(nreq, 1))
            if bad or bad2:
                print("warning: %s: %d non-2xx answers" % (name, bad + bad2))
            if "disk" in s1:
                fs = s1["disk"]["fsyncs"] - s0["disk"]["fsyncs"]
                w = s1["disk"]["logWrites"] - s0["disk"]["logWrites"]
                res[name]["fs"].append(fs / (t1 - t0))
                res[name]["wpf"].append(w / fs if fs else 0)
                us = s1["disk"].get("fsyncMicros", 0) - s0["disk"].get("fsyncMicros", 0)
                res[name]["fms"].append(us / 1000 / fs if fs else 0)
                h = s1["disk"].get("heldWrites", 0) - s0["disk"].get("heldWrites", 0)
                res[name]["held"].append(h / w if w else 0)
            stop(p)
    shutil.rmtree(work, ignore_errors=True)
    m = statistics.median
    ram = "RAM" if "RAM" in res else configs[0][0]
    ram_c, ram_p = m(res[ram]["create"]), m(res[ram]["patch"])
    load1 = os.getloadavg()
    print("load average (1, 5, 15 min): %.1f %.1f %.1f before, %.1f %.1f %.1f after; %d runs of %d s per shape" % (
        load0 + load1 + (a.runs, a.duration)))
    print("| store | creates/s | x RAM | p99 (ms) | PATCHes/s | x RAM | p99 (ms) | fsyncs/s | writes per fsync "
          "| ms per fsync | broker CPU µs per write | context switches per write | held |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, _ in configs:
        r = res[name]
        c, pt = m(r["create"]), m(r["patch"])
        print("| %s | %.0f | %.2f | %.1f | %.0f | %.2f | %.1f | %s | %s | %s | %.1f | %.1f | %s |" % (
            name if name == "RAM" or a.configs else "disk, --dbSync " + name, c, c / ram_c, m(r["cp99"]) / 1000,
            pt, pt / ram_p, m(r["pp99"]) / 1000,
            "%.0f" % m(r["fs"]) if r["fs"] else "-", "%.1f" % m(r["wpf"]) if r["wpf"] else "-",
            "%.2f" % m(r["fms"]) if r["fms"] else "-", m(r["cpu"]), m(r["cs"]),
            "%.0f%%" % (100 * m(r["held"])) if r["held"] else "-"))


def recovery(a):
    work = tempfile.mkdtemp(prefix="coraine-recovery-")
    d, logpath = os.path.join(work, "db"), os.path.join(work, "broker.log")
    port = perf_run.free_port()
    p = start(port, ["--dbDir", d, "--dbSync", "none", "--dbSnapshotSize", "0"], logpath)
    base = "http://127.0.0.1:%d" % port
    perf_run.wait_up(base + "/version")
    t0 = time.time()
    perf_run.load(base, a.entities)
    load_s = time.time() - t0
    stop(p)
    log_bytes = du(d)

    def restart():
        p, secs = timed_start(port, ["--dbDir", d], logpath)
        cpu = proc_cost(p.pid)[0]       # the broker's CPU until it answered: what a loaded machine changes least
        with open(logpath) as f:
            ms = re.findall(r"recovered .* in ([\d.]+) ms: (\d+) entities", f.read())[-1]
        return p, secs, float(ms[0]), int(ms[1]), cpu

    load0 = os.getloadavg()
    p, s_log, ms_log, n, cpu_log = restart()
    snap = snapshot(base)
    stop(p)
    # drop the log the snapshot covers (a second snapshot would remove it: see doc/cordb.md)
    snap_bytes = snap["bytes"]
    p, s_snap, ms_snap, n2, cpu_snap = restart()
    stop(p)
    print("entities: %d (loaded in %.1f s through batch creates); load average %.1f before the starts, %.1f after" % (
        n, load_s, load0[0], os.getloadavg()[0]))
    print("| start from | start (s, until /version answers) | recovery (broker's own, ms) | broker CPU until then (s) "
          "| disk bytes | bytes per entity |")
    print("|---|---|---|---|---|---|")
    print("| the log only | %.2f | %.0f | %.2f | %d | %.0f |" % (s_log, ms_log, cpu_log, log_bytes, log_bytes / max(n, 1)))
    print("| a snapshot (+ its log) | %.2f | %.0f | %.2f | %d (snapshot) | %.0f |" % (
        s_snap, ms_snap, cpu_snap, snap_bytes, snap_bytes / max(n2, 1)))
    print("snapshot written in %.0f ms" % snap["ms"])
    shutil.rmtree(work, ignore_errors=True)


def snapshot_p99(a):
    """PATCH p99 over N entities, without and during snapshots (POST /admin/snapshot,
    written by the store's thread, back to back while wrk runs)."""
    import threading
    work = tempfile.mkdtemp(prefix="coraine-snapp99-")
    port = perf_run.free_port()
    p = start(port, ["--dbDir", os.path.join(work, "db"), "--dbSnapshotSize", "0"], os.path.join(work, "broker.log"))
    base = "http://127.0.0.1:%d" % port
    perf_run.wait_up(base + "/version")
    perf_run.load(base, a.entities)
    script, args = os.path.join(HERE, "patch.lua"), [str(a.entities)]
    rps0, _, p99_0 = perf_run.wrk(base + "/", a.duration, a.connections, a.threads, script, args)
    stop_flag, snaps = [False], []

    def snapper():
        while not stop_flag[0]:
            snaps.append(snapshot(base)["ms"])

    th = threading.Thread(target=snapper)
    th.start()
    rps1, _, p99_1 = perf_run.wrk(base + "/", a.duration, a.connections, a.threads, script, args)
    stop_flag[0] = True
    th.join()
    stop(p)
    shutil.rmtree(work, ignore_errors=True)
    print("| %d entities | PATCHes/s | p99 (ms) |" % a.entities)
    print("|---|---|---|")
    print("| no snapshot | %.0f | %.1f |" % (rps0, p99_0 / 1000))
    print("| snapshots back to back (%d, %.0f ms each) | %.0f | %.1f |" % (
        len(snaps), statistics.median(snaps) if snaps else 0, rps1, p99_1 / 1000))
    print("p99 ratio: %.2f" % (p99_1 / p99_0))


def empty(a):
    work = tempfile.mkdtemp(prefix="coraine-empty-")
    logpath = os.path.join(work, "broker.log")
    times = []
    cpus = []
    for i in range(5):
        port = perf_run.free_port()
        p, secs = timed_start(port, ["--dbDir", os.path.join(work, "db%d" % i)], logpath)
        cpus.append(proc_cost(p.pid)[0] * 1000)
        stop(p)
    with open(logpath) as f:
        times = [float(x) for x in re.findall(r"recovered .* in ([\d.]+) ms", f.read())]
    print("empty store on disk: recovery and log start %s ms (median %.1f); the broker's whole start "
          "(CPU, until /version answers) median %.0f ms; load average %.1f" % (
              ", ".join("%.1f" % t for t in times), statistics.median(times), statistics.median(cpus),
              os.getloadavg()[0]))
    shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ingest", "recovery", "empty", "snapshot-p99"])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--entities", type=int, default=1000000)
    ap.add_argument("--history", action="store_true", help="ingest: also `always` with --history corDB")
    ap.add_argument("--configs", help="ingest: NAME=FLAGS;... instead of RAM and the three modes "
                    "(a NAME other than RAM gets a fresh --dbDir)")
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    {"ingest": ingest, "recovery": recovery, "empty": empty, "snapshot-p99": snapshot_p99}[a.what](a)


if __name__ == "__main__":
    main()

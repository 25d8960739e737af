#!/usr/bin/env python3
"""tuneRun.py - one run of a workload (tuneRun.sh calls it): from an empty store,
the entities, the subscriptions, the warm-up, the measured run; one JSON line.

  tuneRun.py GENDIR BROKER [--duration S] [--warmup S] [--preload LIB] [--label L] [-- BROKER FLAGS]
  tuneRun.py --warn-busy        warns (stderr) of other processes taking CPU now

GENDIR is what `tuneGen.py gen` wrote. The broker starts on a free loopback
port with the flags after `--` (e.g. --dbLockPrefer writes) and LD_PRELOAD=LIB
(empty: glibc malloc); with store.persistent in a fresh --dbDir, with
store.history corDB or timescale (a PostgreSQL of its own, as the functional
tests start it: test/functional/pg.py), store.database mongoc through
start_mongo(). The notifications go to the receiver (build/release/tools/receiver).

The JSON line: rps, p99us, requests, failedRequests (non-2xx and socket
errors), notificationsDue (the broker's /statistics, during the measured run),
notificationsDelivered (what the receiver got for them, after the queues
drained), notificationsLost (due - delivered), brokerCpuSeconds (and its
brokerUserSeconds, brokerSysSeconds), brokerMinorFaults (the page faults of
the measured run), peakRssKiB, and "error" when the run could not be made (it
then counts as failed, and the exit status is 1).
Environment: TUNE_DURATION, TUNE_WARMUP (the defaults of --duration, --warmup),
TUNE_BROKER_CPUS, TUNE_LOAD_CPUS (taskset lists), TUNE_DRAIN (s to wait for the
notification queues, 30), CORAINE_RECEIVER (the receiver binary).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FUNCTIONAL = os.path.join(ROOT, "test", "functional")
sys.path.insert(0, os.path.dirname(HERE))
from perf_run import free_port  # noqa: E402


def log(msg):
    print("tune: " + msg, file=sys.stderr, flush=True)


def http(method, url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_up(url, proc, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("exited with %d before answering" % proc.returncode)
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError("did not answer %s within %d s" % (url, timeout))


def taskset(cpus):
    return ["taskset", "-c", cpus] if cpus else []


# ---- the stores' servers, started as the functional tests start them ---------------

def start_timescale():
    """A PostgreSQL of its own (test/functional/pg.py); returns (flags, stop)."""
    sys.path.insert(0, FUNCTIONAL)
    from pg import PgServer  # noqa: E402  (the tests' fixture, used as a library)
    pg = PgServer()
    return ["--history", "timescale", "--historyURI", pg.uri(pg.new_database())], pg.close


def start_mongo():
    """The MongoDB-wire server the tests use (test/functional/ferret.py: FerretDB, built with Go),
    and the broker's flags for it (a database prefix of its own); returns (flags, stop)."""
    sys.path.insert(0, FUNCTIONAL)
    import ferret  # noqa: E402
    server = ferret.FerretServer()
    return list(ferret.mongo_flags(server)), server.close


# ---- the measurements --------------------------------------------------------------------

def cpu_split(pid):
    """(user, system) CPU seconds of a process, every thread, from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def minor_faults(pid):
    """The minor page faults of a process so far, every thread (/proc/PID/stat minflt): a fault is a
    fresh page the kernel zeroes and maps, what a store that grows pays per page of it."""
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def cpu_seconds(pid):
    return sum(cpu_split(pid))


def cpu_delta(res, pid, before):
    """brokerCpuSeconds and its user / system parts since `before` (a cpu_split)."""
    u, s = cpu_split(pid)
    res["brokerUserSeconds"], res["brokerSysSeconds"] = round(u - before[0], 2), round(s - before[1], 2)
    res["brokerCpuSeconds"] = round(u + s - before[0] - before[1], 2)


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def wrk(port, script, duration, conns, load_cpus):
    cmd = taskset(load_cpus) + ["wrk", "-t%d" % min(2, conns), "-c%d" % conns, "-d%ds" % max(1, round(duration)),
                                "--latency", "--timeout", "10s", "-s", script, "http://127.0.0.1:%d" % port]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if out.returncode != 0:
        raise RuntimeError("wrk failed: %s" % out.stderr.strip()[-300:])
    s = out.stdout
    r = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", s).group(1)),
         "requests": int(re.search(r"(\d+) requests in", s).group(1)), "p99us": None}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", s)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", s)
    r["failedRequests"] = (int(bad.group(1)) if bad else 0) + (sum(int(g) for g in sock.groups()) if sock else 0)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", s)
    if p99:
        r["p99us"] = round(float(p99.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[p99.group(2)])
    return r


def stats(base):
    st, body = http("GET", base + "/statistics", timeout=10)
    n = json.loads(body)["notifications"] if st == 200 else {}
    dropped = sum(v for k, v in n.items() if k.startswith("dropped"))
    return {"due": n.get("due", 0), "queued": n.get("queued", 0), "dropped": dropped}


def received(rbase):
    return json.loads(urllib.request.urlopen(rbase + "/count", timeout=10).read())["entities"]


def settle(base, rbase, timeout):
    """Waits until the broker's notification queues are empty and the receiver got nothing new for 0.5 s."""
    end = time.time() + timeout
    last = received(rbase)
    while time.time() < end:
        time.sleep(0.5)
        now = received(rbase)
        if stats(base)["queued"] == 0 and now == last:
            return now
        last = now
    return last


def run(gendir, binary, duration, warmup, preload, flags):
    with open(os.path.join(gendir, "workload.json")) as f:
        w = json.load(f)
    broker_cpus = os.environ.get("TUNE_BROKER_CPUS", "")
    load_cpus = os.environ.get("TUNE_LOAD_CPUS", "")
    drain = float(os.environ.get("TUNE_DRAIN", "30"))
    receiver_bin = os.environ.get("CORAINE_RECEIVER", os.path.join(ROOT, "build/release/tools/receiver"))
    tmp = tempfile.mkdtemp(prefix="coraine-tune-")
    procs, stops = [], []
    res = {"rps": 0, "p99us": None, "requests": 0, "failedRequests": 0, "notificationsDue": 0,
           "notificationsDelivered": 0, "notificationsLost": 0, "brokerCpuSeconds": None, "peakRssKiB": None}
    try:
        extra = []
        st = w["store"]
        if st["database"] == "mongoc":
            f, stop = start_mongo()
            extra += f
            stops.append(stop)
        elif st["persistent"]:
            extra += ["--dbDir", os.path.join(tmp, "db")]
        if st["history"] == "corDB":
            extra += ["--history", "corDB"]
        elif st["history"] == "timescale":
            f, stop = start_timescale()
            extra += f
            stops.append(stop)
        rport = free_port()
        rec = subprocess.Popen(taskset(load_cpus) + [receiver_bin, "--port", str(rport)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(rec)
        rbase = "http://127.0.0.1:%d" % rport
        wait_up(rbase + "/count", rec)
        port = free_port()
        env = dict(os.environ)
        env["LD_PRELOAD"] = preload
        blog = open(os.path.join(tmp, "broker.log"), "w")
        broker = subprocess.Popen(taskset(broker_cpus) + [binary, "-fg", "--port", str(port), "--bind", "127.0.0.1",
                                                          "--logLevel", "warn"] + extra + flags,
                                  stdout=subprocess.DEVNULL, stderr=blog, env=env)
        procs.append(broker)
        base = "http://127.0.0.1:%d" % port
        try:
            wait_up(base + "/version", broker)
        except RuntimeError as e:
            blog.flush()
            with open(os.path.join(tmp, "broker.log")) as f:
                raise RuntimeError("the broker %s: %s" % (e, f.read()[-500:].strip()))
        with open(os.path.join(gendir, "fixture.json")) as f:
            for batch in json.load(f):
                code, body = http("POST", base + "/ngsi-ld/v1/entityOperations/create", batch)
                if code != 201:
                    raise RuntimeError("loading the entities: %d %s" % (code, body[:300]))
        with open(os.path.join(gendir, "subscriptions.json")) as f:
            for s in json.load(f):
                s["notification"]["endpoint"]["uri"] = rbase + "/notify"
                code, body = http("POST", base + "/ngsi-ld/v1/subscriptions", s)
                if code != 201:
                    raise RuntimeError("creating a subscription: %d %s" % (code, body[:300]))
        script = os.path.join(gendir, "mix.lua")
        conns = w["load"]["concurrency"]
        if warmup > 0:
            wrk(port, script, warmup, conns, load_cpus)
        before_rx = settle(base, rbase, drain)
        before = stats(base)
        cpu0, flt0 = cpu_split(broker.pid), minor_faults(broker.pid)
        r = wrk(port, script, duration, conns, load_cpus)
        cpu_delta(res, broker.pid, cpu0)
        res["brokerMinorFaults"] = minor_faults(broker.pid) - flt0
        after_rx = settle(base, rbase, drain)
        after = stats(base)
        res.update(r)
        res["notificationsDue"] = after["due"] - before["due"]
        res["notificationsDelivered"] = after_rx - before_rx
        res["notificationsDropped"] = after["dropped"] - before["dropped"]
        res["notificationsLost"] = max(0, res["notificationsDue"] - res["notificationsDelivered"])
        res["peakRssKiB"] = peak_rss_kib(broker.pid)
        if broker.poll() is not None:
            raise RuntimeError("the broker exited with %d during the run" % broker.returncode)
    except (RuntimeError, OSError, ValueError, AttributeError, subprocess.TimeoutExpired) as e:
        res["error"] = str(e)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for stop in stops:
            try:
                stop()
            except Exception as e:  # a server that does not stop must not hide the run's result
                log("stopping a store server: %s" % e)
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def run_ceiling(gendir, duration, warmup, spin_ns=0):
    """The machine's ceiling for the mix: the same wrk script against the trivial libmicrohttpd responder
    (test/perf/trivial_responder.c: coraine's HTTP layer answering every request with a fixed entity, a
    thread per core as coraine's pool), so a rate the broker cannot reach is told from one the machine
    cannot. No store, no notifications. spin_ns: the responder busy-waits that long per answer (a
    stand-in for a broker's own work, ingest_headroom.py)."""
    with open(os.path.join(gendir, "workload.json")) as f:
        w = json.load(f)
    load_cpus = os.environ.get("TUNE_LOAD_CPUS", "")
    binary = os.path.join(ROOT, "build/release/perf/trivial_responder")
    res = {"rps": 0, "p99us": None, "requests": 0, "failedRequests": 0, "notificationsDue": 0,
           "notificationsDelivered": 0, "notificationsLost": 0}
    port = free_port()
    proc = subprocess.Popen(taskset(os.environ.get("TUNE_BROKER_CPUS", "")) +
                            [binary, str(port), str(os.cpu_count() or 1), "0", str(int(spin_ns))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up("http://127.0.0.1:%d/" % port, proc)
        script = os.path.join(gendir, "mix.lua")
        conns = w["load"]["concurrency"]
        if warmup > 0:
            wrk(port, script, warmup, conns, load_cpus)
        cpu0, flt0 = cpu_split(proc.pid), minor_faults(proc.pid)
        res.update(wrk(port, script, duration, conns, load_cpus))
        cpu_delta(res, proc.pid, cpu0)
        res["brokerMinorFaults"] = minor_faults(proc.pid) - flt0
    except (RuntimeError, OSError, ValueError, AttributeError, subprocess.TimeoutExpired) as e:
        res["error"] = str(e)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return res


def about():
    """Where figures come from (each generated table names them): commit, machine, time, load."""
    import platform
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"commit": commit or "unknown",
            "machine": "%s, %d cores%s" % (platform.machine(), os.cpu_count(), ", " + model if model else ""),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadAverageAtEnd": round(os.getloadavg()[0], 2),
            "loadAverages": [round(x, 2) for x in os.getloadavg()], "nproc": os.cpu_count()}


def write_csv(path, rows, script, **extra):
    """rows (dicts) as CSV at path, and path.meta.json: about(), the command that ran (script and
    this process's arguments, with the TUNE_/PGO_ knobs set) and extra; report.py reads both."""
    import csv
    knobs = " ".join("%s=%s" % (k, v) for k, v in sorted(os.environ.items())
                     if (k.startswith(("TUNE_", "PGO_TRAIN")) or k == "SCALE") and k != "TUNE_WORKLOAD")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(path + ".meta.json", "w") as f:
        json.dump(dict(about(), command=(knobs + " " if knobs else "") + "python3 " + script + " " +
                       " ".join(sys.argv[1:]), **extra), f, indent=1)


def print_table(rows, title=None):
    """rows (dicts, one table: write_csv's) as markdown on stdout, under title."""
    if title:
        print("\n" + title + "\n")
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(str(v) for v in r.values()) + " |")
    sys.stdout.flush()


def warn_busy():
    """Other processes that took more than 20 % of a core over one second (a browser, a build...)."""
    def sample():
        out = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        s = f.read()
                    name = s[s.index("(") + 1:s.rindex(")")]
                    fl = s.rsplit(")", 1)[1].split()
                    out[int(d)] = (name, int(fl[11]) + int(fl[12]))
                except (OSError, ValueError, IndexError):
                    pass
        return out
    a = sample()
    time.sleep(1.0)
    b = sample()
    tck = os.sysconf("SC_CLK_TCK")
    busy = sorted(((b[p][1] - a[p][1]) / tck, b[p][0], p) for p in b if p in a and p != os.getpid())
    heavy = [x for x in busy if x[0] > 0.2]
    browsers = [x for x in b.items() if re.search(r"firefox|chrom|brave|opera|electron", x[1][0], re.I)]
    for cpu, name, pid in reversed(heavy):
        log("warning: %s (pid %d) is using %.0f %% of a core: the comparison measures the machine, "
            "not only the broker" % (name, pid, cpu * 100))
    for pid, (name, _) in browsers:
        log("warning: a browser is running (%s, pid %d): its load skews the comparison" % (name, pid))
    load1 = os.getloadavg()[0]
    if load1 > 0.5 * os.cpu_count():
        log("warning: load average %.2f on %d cores: the machine is busy" % (load1, os.cpu_count()))


def main(argv):
    if argv[1:2] == ["--warn-busy"]:
        warn_busy()
        return 0
    flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    gendir, binary = argv[1], argv[2]
    opts = {"--duration": None, "--warmup": os.environ.get("TUNE_WARMUP", "5"), "--preload": "", "--label": ""}
    rest = argv[3:]
    while rest:
        if rest[0] not in opts or len(rest) < 2:
            print("tuneRun.py: unknown option %s" % rest[0], file=sys.stderr)
            return 2
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    with open(os.path.join(gendir, "workload.json")) as f:
        wdur = json.load(f)["duration"]
    duration = float(opts["--duration"] or os.environ.get("TUNE_DURATION") or wdur)
    res = run(gendir, binary, duration, float(opts["--warmup"]), opts["--preload"], flags)
    res = {"label": opts["--label"], "brokerOptions": " ".join(flags), "preload": opts["--preload"], **res}
    print(json.dumps(res), flush=True)
    log("%s: %.0f requests/s, p99 %s us, %d failed, notifications %d due / %d delivered%s" %
        (opts["--label"] or " ".join(flags) or "run", res["rps"], res["p99us"], res["failedRequests"],
         res["notificationsDue"], res["notificationsDelivered"],
         ("  ERROR: " + res["error"]) if "error" in res else ""))
    return 1 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

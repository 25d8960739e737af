#!/usr/bin/env python3
"""soak.py - coraine under a long mixed load: does it hold?

One broker with corDB on disk (--dbDir, --dbSync interval), three
subscriptions on the loaded type (one notification endpoint: the
notification receiver, tools/receiver), and WORKERS threads that send, at
about RATE requests per second in all, a mix over ENTITIES entities:

    55% PATCH of an attribute        20% GET of one entity
    10% query by type and q          10% DELETE and create again (churn)
     5% batch upsert of 10 entities

For DURATION seconds the broker's resident memory is sampled every second.
Verdict (each must hold):
  - no 5xx and no failed request (every answer is the expected 2xx/404);
  - every notification delivered: once the queues are empty the broker's
    counters show nothing dropped or failed, and the receiver got as many
    notifications as the broker sent, none out of order, none twice;
  - RSS flat after warm-up (the first 20% of the run): the growth from the
    end of warm-up to the end is at most 16 MiB + 10%, and the slope of a
    least-squares line over those samples is reported.

  python3 test/soak/soak.py [--duration 600] [--rate 400] [--report doc/reliability.md]
  make soak              (10 minutes, the report into doc/reliability.md)
  .ci/run                (--duration 60, no report)

Loopback only; the broker, the receiver and the data directory are the
script's own and are removed at the end. Exit 0 when the verdict holds.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "scenarios"))
from scen import free_port, metrics  # noqa: E402  (the scenarios' helpers)
BIN = os.path.join(ROOT, "build/release/coraine")
RECEIVER = os.path.join(ROOT, "build/release/tools/receiver")
TYPE = "SoakSensor"
SUBS = 3


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Conn:
    """A keep-alive connection that reconnects once on a broken socket."""

    def __init__(self, port):
        self.port = port
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def req(self, method, path, body=None, headers=None):
        h = {"Content-Type": "application/json"} if body is not None else {}
        if headers:
            h.update(headers)
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            try:
                self.c.request(method, path, body=data, headers=h)
                r = self.c.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    return 0, b""
        return 0, b""


def entity(i, v):
    return {"id": "urn:ngsi-ld:%s:%06d" % (TYPE, i), "type": TYPE,
            "temperature": {"type": "Property", "value": v, "unitCode": "CEL"},
            "status": {"type": "Property", "value": "ok"},
            "location": {"type": "GeoProperty", "value": {"type": "Point",
                                                          "coordinates": [(i % 360) - 180 + 0.5, (i % 170) - 85 + 0.5]}}}


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_status = {}
        self.failed = []          # (method, path, status)
        self.accepted_writes = 0  # writes that change watched attributes, answered 2xx

    def add(self, method, path, status, ok, writes=0):
        with self.lock:
            self.by_status[status] = self.by_status.get(status, 0) + 1
            if not ok and len(self.failed) < 20:
                self.failed.append((method, path, status))
            if ok:
                self.accepted_writes += writes


def worker(port, n_entities, deadline, per_thread_rate, stats, seed, locks):
    rnd = random.Random(seed)
    c = Conn(port)
    interval = 1.0 / per_thread_rate
    next_at = time.time()
    api = "/ngsi-ld/v1"
    while time.time() < deadline:
        now = time.time()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        x = rnd.random()
        i = rnd.randrange(n_entities)
        eid = "urn:ngsi-ld:%s:%06d" % (TYPE, i)
        if x < 0.55:
            with locks[i % len(locks)]:
                st, _ = c.req("PATCH", api + "/entities/%s/attrs" % eid,
                              {"temperature": {"type": "Property", "value": rnd.randrange(1000)}})
            stats.add("PATCH", eid, st, st == 204, writes=1)
        elif x < 0.75:
            st, _ = c.req("GET", api + "/entities/" + eid)
            stats.add("GET", eid, st, st in (200, 404))     # 404: between a churn's delete and create
        elif x < 0.85:
            st, _ = c.req("GET", api + "/entities?type=%s&q=temperature%%3E%d&limit=20" % (TYPE, rnd.randrange(1000)))
            stats.add("QUERY", TYPE, st, st == 200)
        elif x < 0.95:
            with locks[i % len(locks)]:
                st, _ = c.req("DELETE", api + "/entities/" + eid)
                ok = st == 204
                stats.add("DELETE", eid, st, ok)
                st, _ = c.req("POST", api + "/entities", entity(i, rnd.randrange(1000)))
                stats.add("CREATE", eid, st, st == 201, writes=1)
        else:
            first = rnd.randrange(max(1, n_entities - 10))
            held = sorted({(first + k) % len(locks) for k in range(10)})
            for h in held:
                locks[h].acquire()
            try:
                st, _ = c.req("POST", api + "/entityOperations/upsert?options=update",
                              [entity(first + k, rnd.randrange(1000)) for k in range(10)])
            finally:
                for h in reversed(held):
                    locks[h].release()
            stats.add("UPSERT", "batch", st, st in (201, 204), writes=10)


def slope_per_min(samples):
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    num = sum((t - mt) * (r - mr) for t, r in samples)
    den = sum((t - mt) ** 2 for t, _ in samples) or 1.0
    return num / den * 60


def report(path, text):
    begin, end = "<!-- soak:begin -->", "<!-- soak:end -->"
    doc = open(path).read() if os.path.exists(path) else "# Reliability\n\n"
    block = begin + "\n" + text + "\n" + end
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    open(path, "w").write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=600)
    ap.add_argument("--rate", type=int, default=400, help="requests per second in all")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--report", help="write the results into this Markdown file (between soak markers)")
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # unwinds through the cleanup below
    tmp = tempfile.mkdtemp(prefix="coraine-soak-")
    rport, bport = free_port(), free_port()
    rcv = subprocess.Popen([RECEIVER, "--port", str(rport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = open(os.path.join(tmp, "coraine.log"), "wb")
    flags = ["-fg", "--port", str(bport), "--bind", "127.0.0.1", "--dbDir", os.path.join(tmp, "db"),
             "--dbSync", "interval", "--logLevel", "warn", "--dbSnapshotSize", "16M"]
    os.makedirs(os.path.join(tmp, "db"))
    br = subprocess.Popen([a.bin] + flags, stdout=log, stderr=subprocess.STDOUT)
    verdict, lines = True, []
    try:
        deadline = time.time() + 15
        while True:
            try:
                if Conn(bport).req("GET", "/ready")[0] == 200 and Conn(rport).req("GET", "/count")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit("soak: the broker or the receiver did not start")
            time.sleep(0.05)
        c = Conn(bport)
        for s in range(SUBS):
            st, body = c.req("POST", "/ngsi-ld/v1/subscriptions", {
                "type": "Subscription", "entities": [{"type": TYPE}], "watchedAttributes": ["temperature"],
                "notification": {"endpoint": {"uri": "http://127.0.0.1:%d/notify/%d" % (rport, s)},
                                 "attributes": ["temperature"], "sysAttrs": True}})
            assert st == 201, body
        stats = Stats()
        for start in range(0, a.entities, 100):
            batch = [entity(i, i % 1000) for i in range(start, min(a.entities, start + 100))]
            st, body = c.req("POST", "/ngsi-ld/v1/entityOperations/upsert", batch)
            assert st in (201, 204), body
            stats.add("UPSERT", "load", st, True, writes=len(batch))

        t0 = time.time()
        end = t0 + a.duration
        locks = [threading.Lock() for _ in range(256)]
        threads = [threading.Thread(target=worker, args=(bport, a.entities, end, a.rate / a.workers, stats, k, locks),
                                    daemon=True) for k in range(a.workers)]
        for t in threads:
            t.start()
        samples = []
        while time.time() < end:
            samples.append((time.time() - t0, rss_bytes(br.pid)))
            time.sleep(1)
        for t in threads:
            t.join(60)
        elapsed = time.time() - t0

        # the queues empty, then the counters
        deadline = time.time() + 60
        m = metrics(bport)
        while m.get("coraine_notify_queued", 0) > 0 and time.time() < deadline:
            time.sleep(0.2)
            m = metrics(bport)
        time.sleep(1)
        m = metrics(bport)
        rc = json.loads(Conn(rport).req("GET", "/count")[1])

        total = sum(stats.by_status.values())
        five = sum(n for s, n in stats.by_status.items() if s >= 500 or s == 0)
        dropped = sum(v for k, v in m.items() if k.startswith("coraine_notify_dropped_total"))
        sent, failed = m.get("coraine_notify_sent_total", 0), m.get("coraine_notify_failed_total", 0)
        warm = [r for t, r in samples if t >= a.duration * 0.2]
        rss_warm, rss_end = (warm[0], warm[-1]) if warm else (0, 0)
        growth = rss_end - rss_warm
        allowed = 16 * 2 ** 20 + rss_warm * 0.10
        slope = slope_per_min([(t, r) for t, r in samples if t >= a.duration * 0.2])
        checks = [
            ("no 5xx, no failed request", five == 0 and not stats.failed,
             "%d requests, %d 5xx or no answer, %d unexpected statuses" % (total, five, len(stats.failed))),
            ("every notification delivered", dropped == 0 and failed == 0 and rc["notifications"] == sent
             and rc["outOfOrder"] == 0 and rc["duplicates"] == 0 and m.get("coraine_notify_queued", 0) == 0,
             "broker sent %d (due %d), failed %d, dropped %d; receiver got %d, out of order %d, duplicates %d" % (
                 sent, m.get("coraine_notify_due_total", 0), failed, dropped, rc["notifications"],
                 rc["outOfOrder"], rc["duplicates"])),
            ("RSS flat after warm-up", growth <= allowed,
             "%.1f MiB after warm-up, %.1f MiB at the end (%+.1f MiB, allowed %.1f); slope %+.2f MiB/min; peak %.1f MiB"
             % (rss_warm / 2 ** 20, rss_end / 2 ** 20, growth / 2 ** 20, allowed / 2 ** 20, slope / 2 ** 20,
                max(r for _, r in samples) / 2 ** 20 if samples else 0)),
        ]
        verdict = all(ok for _, ok, _ in checks)
        rate = total / elapsed if elapsed else 0
        lines.append("## Soak test (%s)\n" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        lines.append("Generated by `test/soak/soak.py --duration %d --rate %d --workers %d --entities %d` "
                     "(`make soak`): corDB on disk (`--dbSync interval`), %d subscriptions on the loaded type, "
                     "a mix of 55%% PATCH, 20%% retrieve, 10%% query, 10%% delete+create, 5%% batch upsert. "
                     "Commit %s, %d cores." % (a.duration, a.rate, a.workers, a.entities, SUBS,
                                               subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                                                              capture_output=True, text=True).stdout.strip() or "?",
                                               os.cpu_count() or 0))
        lines.append("")
        lines.append("**Verdict: %s**\n" % ("PASS" if verdict else "FAIL"))
        lines.append("| check | result | numbers |")
        lines.append("|---|---|---|")
        for name, ok, detail in checks:
            lines.append("| %s | %s | %s |" % (name, "pass" if ok else "FAIL", detail))
        lines.append("")
        lines.append("%d requests in %.0f s (%.0f/s); answers by status: %s; %d notifications delivered "
                     "(%d changes)." % (total, elapsed, rate, ", ".join("%d: %d" % kv for kv in sorted(stats.by_status.items())),
                                        rc["notifications"], m.get("coraine_notify_delivered_changes_total", 0)))
        lines.append("")
        step = max(1, len(samples) // 10)
        lines.append("RSS (MiB) every %d s: %s" % (step, " ".join("%.0f" % (r / 2 ** 20) for _, r in samples[::step])))
        if stats.failed:
            lines.append("")
            lines.append("First unexpected answers: %s" % stats.failed[:10])
    finally:
        br.send_signal(signal.SIGTERM)
        try:
            br.wait(30)
        except subprocess.TimeoutExpired:
            br.kill()
            br.wait()
            verdict = False
            lines.append("\nThe broker did not stop within 30 s of SIGTERM.")
        if br.returncode not in (0, None) and verdict:
            verdict = False
            lines.append("\nThe broker exited %s at SIGTERM." % br.returncode)
        rcv.terminate()
        rcv.wait(10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if a.report:
        report(a.report, text)
    print("soak: %s" % ("PASS" if verdict else "FAIL"))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())

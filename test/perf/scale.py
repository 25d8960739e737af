#!/usr/bin/env python3
"""scale.py - the scale run: every count scaled by SCALE, every process sampled at 1 Hz.

At SCALE=1: 1,000,000 entities (perf_run's Vehicles) over 100 tenants,
10,000 subscriptions and 10,000 registrations, all loaded through the API
(batch create of 1,000 entities per request; one POST per subscription and
per registration, on a keep-alive connection). Every count is scaled by
SCALE (at least 1 of each; the tenants are round(100 x SCALE)). Then:

  firing     subscription k watches Vehicle k // T in tenant k % T and
             notifies tools/receiver; openload (test/perf/openload.c, an open
             model) PATCHes the Vehicles of tenant 0 that a subscription
             watches at each rate of --rates for --stage-seconds, so every
             write is due exactly one notification. Per stage: due (the
             broker's /statistics), delivered (the entities the receiver
             got), dropped, the write p99, and the drain time (from the last
             write until the last notification arrived, or the queue was
             empty).
  federated  registration r registers type Fed<r> at one of --sources
             coraine brokers (each holding one entity of each of its types);
             --queries queries for a random Fed<r> are sent to the broker,
             and the calls the sources received (their /statistics request
             counts) are divided by the queries: the registration index must
             narrow to the one source, so the figure is 1.0, not the number
             of sources.

RSS (VmRSS) and CPU (utime+stime) of every process (the broker, the
receiver, each source) are sampled every second, each sample tagged with
the phase under way. Outputs (report.py reads both, with their .meta.json):
  OUT/scale.csv          one line per phase or stage: counts, rates, times
  OUT/scale_samples.csv  the 1 Hz samples

  SCALE=0.01 python3 test/perf/scale.py [--out build/perf] [--rates 1000,2000,4000,8000,16000]
      [--stage-seconds 5] [--sources 4] [--queries 200] [--bin build/release/coraine] [--broker-flags '...']

SCALE=1 fits this machine (2 cores, 24 GiB) within an hour; CI runs
SCALE=0.001 (.ci/run). A benchmark: it fails only when the broker does.
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
import knee  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402


class Client:
    """One keep-alive connection to a broker (the loading is sequential)."""

    def __init__(self, base):
        self.c = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=120)

    def call(self, method, path, body=None, tenant=None):
        h = {"Content-Type": "application/json"} if body is not None else {}
        if tenant:
            h["NGSILD-Tenant"] = tenant
        self.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = self.c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise SystemExit("scale.py: %s %s answered %d: %s" % (method, path, r.status, data[:300]))
        return json.loads(data) if data else None


class Sampler(threading.Thread):
    """Every second: RSS and CPU of each named process, tagged with the phase under way."""

    def __init__(self, procs):
        super().__init__(daemon=True)
        self.procs, self.phase, self.rows, self.stop_ev = procs, "start", [], threading.Event()
        self.t0 = time.time()
        self.last = {}

    def run(self):
        while not self.stop_ev.wait(1.0):
            self.sample()

    def sample(self):
        t = round(time.time() - self.t0, 1)
        for name, pid in self.procs:
            try:
                cpu = tuneRun.cpu_seconds(pid)
                rss = perf_run.rss_kib(pid)
            except OSError:
                continue
            prev = self.last.get(name, (t, cpu))
            dt = t - prev[0]
            self.rows.append({"t": t, "phase": self.phase, "process": name, "rssKiB": rss,
                              "cpuSeconds": round(cpu, 2),
                              "cpuShare": round((cpu - prev[1]) / dt, 3) if dt > 0 else 0})
            self.last[name] = (t, cpu)


def notif(base):
    with urllib.request.urlopen(base + "/statistics", timeout=30) as r:
        return json.loads(r.read())


def received(rbase):
    with urllib.request.urlopen(rbase + "/count", timeout=30) as r:
        return json.loads(r.read())["entities"]


def requests_served(base):
    """The requests the source answered (this /statistics GET counts itself: a read before and one
    after a phase differ by the phase's requests and the first read)."""
    return notif(base)["requests"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=float(os.environ.get("SCALE", "1")))
    ap.add_argument("--out", default=os.path.join(perf_run.ROOT, "build/perf"))
    ap.add_argument("--rates", default="1000,2000,4000,8000,16000", help="the write rates of the firing phase, per s")
    ap.add_argument("--stage-seconds", type=float, default=5)
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--bin")
    ap.add_argument("--broker-flags", default="")
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    S = a.scale
    T = max(1, round(100 * S))
    E = max(T, round(1_000_000 * S))
    NS = max(1, round(10_000 * S))
    NR = max(1, round(10_000 * S))
    per_tenant = E // T
    if NS > E:
        raise SystemExit("scale.py: more subscriptions than entities")
    tenants = ["scale%d" % t for t in range(T)]
    rbin = os.path.join(os.path.dirname(perf_run.BIN), "tools", "receiver")
    if not os.path.exists(rbin):
        rbin = os.path.join(perf_run.ROOT, "build/release/tools/receiver")

    procs, named = [], []
    rows = []
    t_start = time.time()

    def phase_row(phase, **kv):
        rows.append(dict({"phase": phase, "scale": S, "entities": E, "tenants": T, "subscriptions": NS,
                          "registrations": NR, "seconds": "", "rate": "", "offeredRate": "", "achievedRate": "",
                          "writeP99us": "", "due": "", "delivered": "", "dropped": "", "drainSeconds": "",
                          "queries": "", "sourceCalls": "", "sourceCallsPerQuery": "", "queryP50us": "",
                          "queryP99us": "", "brokerRssKiB": ""}, **kv))
        print("scale: %s %s" % (phase, " ".join("%s=%s" % (k, v) for k, v in kv.items())), file=sys.stderr,
              flush=True)

    try:
        port = perf_run.free_port()
        broker = perf_run.start_broker(port, a.broker_flags.split())
        procs.append(broker)
        base = "http://127.0.0.1:%d" % port
        rport = perf_run.free_port()
        recv = subprocess.Popen([rbin, "--port", str(rport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(recv)
        rbase = "http://127.0.0.1:%d" % rport
        sources = []
        for k in range(a.sources):
            sp = perf_run.free_port()
            p = perf_run.start_broker(sp)
            procs.append(p)
            sources.append((p, "http://127.0.0.1:%d" % sp))
        perf_run.wait_up(base + "/version")
        perf_run.wait_up(rbase + "/count")
        for _, sb in sources:
            perf_run.wait_up(sb + "/version")
        named = [("broker", broker.pid), ("receiver", recv.pid)] + \
            [("source%d" % k, p.pid) for k, (p, _) in enumerate(sources)]
        sampler = Sampler(named)
        sampler.start()
        cl = Client(base)

        # ---- loading, through the API
        sampler.phase = "load_entities"
        t0 = time.time()
        for t in tenants:
            for start in range(0, per_tenant, 1000):
                cl.call("POST", "/ngsi-ld/v1/entityOperations/create",
                        [perf_run.vehicle(i) for i in range(start, min(per_tenant, start + 1000))], t)
        dt = time.time() - t0
        phase_row("load_entities", seconds=round(dt, 2), rate=round(per_tenant * T / dt),
                  brokerRssKiB=perf_run.rss_kib(broker.pid))

        sampler.phase = "load_subscriptions"
        t0 = time.time()
        for k in range(NS):
            cl.call("POST", "/ngsi-ld/v1/subscriptions",
                    {"type": "Subscription", "entities": [{"id": "urn:ngsi-ld:Vehicle:%d" % (k // T), "type": "Vehicle"}],
                     "watchedAttributes": ["speed"], "notification": {"endpoint": {"uri": rbase + "/n"}}},
                    tenants[k % T])
        dt = time.time() - t0
        phase_row("load_subscriptions", seconds=round(dt, 2), rate=round(NS / dt),
                  brokerRssKiB=perf_run.rss_kib(broker.pid))

        sampler.phase = "load_registrations"
        t0 = time.time()
        per_source = [[] for _ in sources]
        for r in range(NR):
            per_source[r % len(sources)].append(r)
        for k, (_, sb) in enumerate(sources):
            sc = Client(sb)
            ids = per_source[k]
            for start in range(0, len(ids), 1000):
                sc.call("POST", "/ngsi-ld/v1/entityOperations/create",
                        [{"id": "urn:ngsi-ld:Fed%d:1" % r, "type": "Fed%d" % r,
                          "v": {"type": "Property", "value": r}} for r in ids[start:start + 1000]])
        for r in range(NR):
            cl.call("POST", "/ngsi-ld/v1/csourceRegistrations",
                    {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Fed%d" % r}]}],
                     "endpoint": sources[r % len(sources)][1]})
        dt = time.time() - t0
        phase_row("load_registrations", seconds=round(dt, 2), rate=round(NR / dt),
                  brokerRssKiB=perf_run.rss_kib(broker.pid))

        # ---- subscription firing at a rising write rate
        watched = len(range(0, NS, T))                   # the Vehicles of tenant 0 that a subscription watches
        url = base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:{i}/attrs"
        for rate in [float(x) for x in a.rates.split(",")]:
            sampler.phase = "fire@%g" % rate
            st0, got0 = notif(base)["notifications"], received(rbase)
            r = knee.openload(url, round(rate), a.stage_seconds, 32, "PATCH",
                              '{"speed":{"type":"Property","value":{i}}}', watched,
                              ("Content-Type: application/json", "NGSILD-Tenant: " + tenants[0]))
            sampler.phase = "drain@%g" % rate
            t_end, last, t_last = time.time(), received(rbase), time.time()
            while time.time() - t_end < 60:
                n = received(rbase)
                if n != last:
                    last, t_last = n, time.time()
                st = notif(base)["notifications"]
                if n - got0 >= st["due"] - st0["due"] or (not st["queued"] and time.time() - t_last > 0.5):
                    break
                time.sleep(0.02)
            st1 = notif(base)["notifications"]
            drop = sum(v - st0.get(k, 0) for k, v in st1.items() if k.startswith("dropped"))
            phase_row("fire", rate=round(rate), offeredRate=r["offeredRate"], achievedRate=round(r["achievedRate"]),
                      writeP99us=r["p99us"], due=st1["due"] - st0["due"], delivered=last - got0, dropped=drop,
                      drainSeconds=round(max(0.0, t_last - t_end), 2), seconds=a.stage_seconds,
                      brokerRssKiB=perf_run.rss_kib(broker.pid))

        # ---- federated queries over the registrations
        sampler.phase = "federated"
        rnd = random.Random(18)
        before = sum(requests_served(sb) for _, sb in sources)
        lat = []
        for q in range(a.queries):
            r = rnd.randrange(NR)
            t0 = time.perf_counter()
            got = cl.call("GET", "/ngsi-ld/v1/entities?type=Fed%d" % r)
            lat.append((time.perf_counter() - t0) * 1e6)
            if len(got) != 1:
                raise SystemExit("scale.py: the query for Fed%d answered %d entities, not 1" % (r, len(got)))
        calls = sum(requests_served(sb) for _, sb in sources) - before - len(sources)
        lat.sort()
        phase_row("federated", queries=a.queries, sourceCalls=calls, sourceCallsPerQuery=round(calls / a.queries, 3),
                  queryP50us=round(lat[len(lat) // 2]), queryP99us=round(lat[int(0.99 * (len(lat) - 1))]),
                  brokerRssKiB=perf_run.rss_kib(broker.pid))
        sampler.phase = "done"
        sampler.sample()
        sampler.stop_ev.set()
        sampler.join()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    extra = dict(scale=S, totalSeconds=round(time.time() - t_start, 1), sources=a.sources,
                 stageSeconds=a.stage_seconds, rates=a.rates, loadedThrough="the API: batch create of 1,000 per "
                 "request, one POST per subscription and registration")
    tuneRun.write_csv(os.path.join(a.out, "scale.csv"), rows, "test/perf/scale.py", **extra)
    tuneRun.write_csv(os.path.join(a.out, "scale_samples.csv"), sampler.rows, "test/perf/scale.py", **extra)
    print("scale %g: %d entities over %d tenants, %d subscriptions, %d registrations, %.0f s in all"
          % (S, E, T, NS, NR, time.time() - t_start))
    print("| phase | rate | due | delivered | dropped | drain (s) | write p99 (µs) | source calls per query |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (r["phase"], r["rate"], r["due"], r["delivered"],
                                                         r["dropped"], r["drainSeconds"], r["writeP99us"],
                                                         r["sourceCallsPerQuery"]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""crash_loop.py - corDB on disk under kill -9 (issue 13, `make crash`).

Each iteration starts the broker on the same --dbDir with --dbSync always (and
a small --dbSnapshotSize, so that snapshots run, and get killed, too, and a
small --dbSegmentSize, so that the log rolls over between them), runs
concurrent writers for a random moment, kills the broker with SIGKILL, starts
it again and checks:
  - it starts (every time);
  - every acknowledged write is there with its acknowledged value; the one
    write a writer had in flight at the kill is either wholly there or not at
    all (a batch: all of its entities or none);
  - no entity is half-written (each holds exactly the attributes one write gave);
  - with --history: the history agrees with the store (the newest instance of
    each entity's attribute is its value, but for the write in flight).
Writers: each owns 16 entities (creates, PATCHes, deletes, batch upserts of 3
of them) and PATCHes its own attribute of one shared entity (PATCHes of the
same entity by several writers at once).

  python3 test/crash/crash_loop.py --iterations 100 [--bin build/release/coraine] [--sync interval] [--history]
Exit status 0 when every iteration passed; the broker logs of a failing
iteration are kept and their path printed.
"""
import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
API = "/ngsi-ld/v1"
TYPE = "http://example.org/CrashT"
ATTR = "http://example.org/v"
SHARED = "urn:crash:shared"
PER_WRITER = 16
JSON = {"Content-Type": "application/json"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, binp, dbdir, logpath, sync="always", extra=()):
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.log = open(logpath, "ab")
        cmd = [binp, "-fg", "--port", str(self.port), "--bind", "127.0.0.1", "--logLevel", "info",
               "--dbDir", dbdir, "--dbSync", sync, "--dbSnapshotSize", "256k",
               "--dbSegmentSize", "32k"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the broker exited at start with %s" % self.proc.returncode)
            try:
                if requests.get(self.base + "/version", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("the broker did not start within 20 s")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def ent_id(w, k):
    return "urn:crash:w%d:%d" % (w, k)


def body(eid, val):
    return {"id": eid, "type": TYPE, ATTR: {"type": "Property", "value": val}}


class Writer(threading.Thread):
    """model: id -> value (None: absent); shared: my attribute's value on SHARED."""

    def __init__(self, w, base, model, shared, seed):
        super().__init__(daemon=True)
        self.w, self.base, self.model, self.shared = w, base, model, shared
        self.pending = None          # (kind, {id: value or None}) of the write in flight
        self.rng = random.Random(seed)
        self.counter = seed * 1000000
        self.acks = 0
        self.stop = False
        self.error = None

    def run(self):
        s = requests.Session()
        try:
            while not self.stop:
                self.one(s)
        except requests.RequestException:
            pass                     # the broker was killed
        except Exception as e:       # a wrong answer
            self.error = repr(e)

    def one(self, s):
        self.counter += 1
        v = self.counter
        r = self.rng.random()
        k = self.rng.randrange(PER_WRITER)
        eid = ent_id(self.w, k)
        cur = self.model[eid]
        if r < 0.15:
            self.pending = ("shared", {SHARED: v})
            resp = s.patch(self.base + API + "/entities/%s/attrs" % SHARED, headers=JSON,
                           json={ATTR + "w%d" % self.w: {"type": "Property", "value": v}}, timeout=30)
            self.check(resp, 204)
            self.shared[0] = v
        elif r < 0.3:
            ks = self.rng.sample(range(PER_WRITER), 3)
            ids = [ent_id(self.w, x) for x in ks]
            self.pending = ("batch", {i: v for i in ids})
            resp = s.post(self.base + API + "/entityOperations/upsert", headers=JSON,
                          json=[body(i, v) for i in ids], timeout=30)
            self.check(resp, (201, 204))
            for i in ids:
                self.model[i] = v
        elif cur is None:
            self.pending = ("create", {eid: v})
            resp = s.post(self.base + API + "/entities", headers=JSON, json=body(eid, v), timeout=30)
            self.check(resp, 201)
            self.model[eid] = v
        elif r < 0.85:
            self.pending = ("patch", {eid: v})
            resp = s.patch(self.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={ATTR: {"type": "Property", "value": v}}, timeout=30)
            self.check(resp, 204)
            self.model[eid] = v
        else:
            self.pending = ("delete", {eid: None})
            resp = s.delete(self.base + API + "/entities/%s" % eid, timeout=30)
            self.check(resp, 204)
            self.model[eid] = None
        self.pending = None
        self.acks += 1

    def check(self, resp, ok):
        ok = ok if isinstance(ok, tuple) else (ok,)
        if resp.status_code not in ok:
            raise AssertionError("%s %s -> %d %s" % (resp.request.method, resp.request.url,
                                                     resp.status_code, resp.text[:300]))


def read_state(base, writers):
    """id -> value (None: absent) of every writer entity, and SHARED's attributes."""
    state = {}
    s = requests.Session()
    for w in range(writers):
        for k in range(PER_WRITER):
            eid = ent_id(w, k)
            resp = s.get(base + API + "/entities/" + eid, timeout=30)
            if resp.status_code == 404:
                state[eid] = None
                continue
            assert resp.status_code == 200, resp.text
            e = resp.json()
            keys = sorted(x for x in e if x not in ("id", "type", "@context"))
            assert keys == [ATTR], "entity %s half-written or wrong: %s" % (eid, e)
            state[eid] = e[ATTR]["value"]
    resp = s.get(base + API + "/entities/" + SHARED, timeout=30)
    assert resp.status_code == 200, "the shared entity is gone: %s" % resp.text
    shared = resp.json()
    return state, shared


def verify_history(base, state, writers, lagging):
    """--history corDB: the newest instance of every present entity's attribute
    is the store's value. An entity of a write in flight at a kill may differ
    (the store's log is written before the history's): it is in `lagging`
    until an acknowledged write of it brings them together again."""
    s = requests.Session()
    for wr in writers:
        if wr.pending:
            lagging.update(wr.pending[1])
    for eid, v in state.items():
        if v is None:
            continue
        resp = s.get(base + API + "/temporal/entities/" + eid, params={"lastN": "1", "attrs": ATTR}, timeout=30)
        assert resp.status_code == 200 or eid in lagging, "%s: no history: %s" % (eid, resp.text)
        inst = resp.json().get(ATTR) if resp.status_code == 200 else None
        inst = inst if isinstance(inst, list) else [inst]
        if inst and inst[-1] and inst[-1].get("value") == v:
            lagging.discard(eid)
        else:
            assert eid in lagging, "%s: history %r, store %r" % (eid, inst, v)


def verify(state, shared, writers):
    for wr in writers:
        kind, pend = wr.pending if wr.pending else (None, {})
        got_shared = shared.get(ATTR + "w%d" % wr.w, {}).get("value")
        if kind == "shared":
            assert got_shared in (wr.shared[0], pend[SHARED]), \
                "writer %d shared: %r, acked %r, in flight %r" % (wr.w, got_shared, wr.shared[0], pend[SHARED])
        else:
            assert got_shared == wr.shared[0], \
                "writer %d shared: %r, acked %r" % (wr.w, got_shared, wr.shared[0])
        applied = None
        for k in range(PER_WRITER):
            eid = ent_id(wr.w, k)
            acked, got = wr.model[eid], state[eid]
            if kind in ("create", "patch", "delete", "batch") and eid in pend:
                if got == pend[eid] and got != acked:
                    this = True
                elif got == acked:
                    this = False if got != pend[eid] else None
                else:
                    raise AssertionError("%s: %r, acked %r, in flight %r" % (eid, got, acked, pend[eid]))
                if this is not None:
                    if applied is not None and applied != this:
                        raise AssertionError("writer %d: a batch applied in part: %r; now %r, acked %r" % (
                            wr.w, pend, {i: state[i] for i in pend}, {i: wr.model[i] for i in pend}))
                    applied = this
            else:
                assert got == acked, "%s: %r after the restart, acknowledged %r" % (eid, got, acked)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--bin", default=os.environ.get("CORAINE_BIN",
                                                    os.path.join(REPO, "build", "release", "coraine")))
    ap.add_argument("--max-seconds", type=float, default=float(os.environ.get("CRASH_MAX_SECONDS", "900")))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--sync", default="always", choices=["always", "interval", "none"],
                    help="--dbSync of the broker: kill -9 is a process crash, after which every mode "
                         "keeps every acknowledged write (doc/cordb.md): the same checks apply")
    ap.add_argument("--history", action="store_true", help="run with --history corDB and check it too")
    a = ap.parse_args()
    extra = ("--history", "corDB") if a.history else ()
    lagging = set()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="coraine-crash-")
    dbdir, logpath = os.path.join(work, "db"), os.path.join(work, "broker.log")
    print("crash loop: %d iterations, %d writers, --dbSync %s%s, seed %d, in %s" % (
        a.iterations, a.writers, a.sync, " --history corDB" if a.history else "", a.seed, work))
    model = {ent_id(w, k): None for w in range(a.writers) for k in range(PER_WRITER)}
    shared = [[None] for _ in range(a.writers)]
    t0 = time.time()
    acks = 0
    b = Broker(a.bin, dbdir, logpath, a.sync, extra)
    resp = requests.post(b.base + API + "/entities", headers=JSON,
                         json={"id": SHARED, "type": TYPE}, timeout=30)
    assert resp.status_code == 201, resp.text
    done = 0
    try:
        for it in range(a.iterations):
            if time.time() - t0 > a.max_seconds:
                print("crash loop: time bound (%.0f s) reached after %d iterations" % (a.max_seconds, it))
                break
            writers = [Writer(w, b.base, model, shared[w], a.seed * 100 + it * 10 + w)
                       for w in range(a.writers)]
            for wr in writers:
                wr.start()
            time.sleep(rng.uniform(0.05, 0.6))
            b.kill()
            for wr in writers:
                wr.stop = True
                wr.join(timeout=30)
                if wr.error:
                    raise AssertionError("iteration %d: writer %d: %s" % (it, wr.w, wr.error))
            b = Broker(a.bin, dbdir, logpath, a.sync, extra)
            state, sh = read_state(b.base, a.writers)
            try:
                verify(state, sh, writers)
                if a.history:
                    verify_history(b.base, state, writers, lagging)
            except AssertionError as e:
                raise AssertionError("iteration %d (seed %d): %s" % (it, a.seed, e))
            # The recovered state is the model of the next iteration.
            model.update(state)
            for wr in writers:
                shared[wr.w][0] = sh.get(ATTR + "w%d" % wr.w, {}).get("value")
                acks += wr.acks
            done = it + 1
    except Exception as e:
        print("crash loop FAILED: %s\nbroker log: %s" % (e, logpath))
        try:
            b.kill()
        except Exception:
            pass
        return 1
    b.kill()
    print("crash loop: %d iterations passed, %d acknowledged writes checked, %.1f s" % (
        done, acks, time.time() - t0))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

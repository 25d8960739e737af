"""corDB on disk (issue 13) through HTTP: --dbDir keeps entities and objects
across restarts and kill -9; one broker per directory; POST /admin/snapshot;
faults injected with the LD_PRELOAD shim (build/<variant>/faultshim.so, `make
faultshim`): ENOSPC / EIO on write and on fsync are answered 503 with a
ProblemDetails and nothing applied, reads go on, writes resume once the disk
works, and nothing acknowledged is lost; a crash in the middle of a snapshot
recovers from the previous snapshot and the log.
"""
import os
import signal
import subprocess
import time

import pytest
import requests

from conftest import binary_path, REPO
from ngsi import free_port

API = "/ngsi-ld/v1"
JSON = {"Content-Type": "application/json"}
T = "http://example.org/DiskT"
A = "http://example.org/v"


def shim_path():
    p = os.environ.get("CORAINE_FAULTSHIM")
    if p and os.path.exists(p):
        return p
    b = os.path.dirname(binary_path())
    p = os.path.join(b, "faultshim.so")
    return p if os.path.exists(p) else None


class DiskBroker:
    live = []           # every broker started, so that a failed test leaves none running

    def __init__(self, dbdir, logdir, flags=(), fault_dir=None, expect_fail=False):
        DiskBroker.live.append(self)
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.logpath = os.path.join(logdir, "coraine-disk-%d.log" % self.port)
        env = dict(os.environ)
        if fault_dir:
            env["CORAINE_FAULT_DIR"] = fault_dir
            shim = shim_path()
            if not shim:
                pytest.skip("faultshim.so not built (make faultshim)")
            env["LD_PRELOAD"] = (shim + " " + env.get("LD_PRELOAD", "")).strip()
            # an ASan build: the shim comes before the ASan runtime
            env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").strip(":")
        cmd = [binary_path(), "-fg", "--port", str(self.port), "--bind", "127.0.0.1",
               "--logLevel", "info", "--dbDir", dbdir] + list(flags)
        with open(self.logpath, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if expect_fail:
                    return
                raise RuntimeError("broker exited at start: %s" % self.log())
            try:
                if requests.get(self.base + "/version", timeout=1).status_code == 200:
                    if expect_fail:
                        self.kill()
                        raise AssertionError("the broker started; it should have refused")
                    return
            except requests.RequestException:
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("broker did not start")

    def log(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=15)

    def create(self, eid, v, tenant=None):
        h = dict(JSON)
        if tenant:
            h["NGSILD-Tenant"] = tenant
        return requests.post(self.base + API + "/entities", headers=h,
                             json={"id": eid, "type": T, A: {"type": "Property", "value": v}}, timeout=15)

    def patch(self, eid, v):
        return requests.patch(self.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                              json={A: {"type": "Property", "value": v}}, timeout=15)

    def value(self, eid, tenant=None):
        h = {"NGSILD-Tenant": tenant} if tenant else {}
        r = requests.get(self.base + API + "/entities/" + eid, headers=h, timeout=15)
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        return r.json()[A]["value"]


@pytest.fixture(autouse=True)
def no_broker_left():
    """A test that fails before it stops its brokers leaves none running."""
    yield
    while DiskBroker.live:
        b = DiskBroker.live.pop()
        if getattr(b, "proc", None) is not None and b.proc.poll() is None:
            b.kill()


@pytest.fixture
def dbdir(tmp_path):
    return str(tmp_path / "db")


def snapshot(b):
    """POST /admin/snapshot (202: started in the store's thread), then GET until it is done."""
    r = requests.post(b.base + "/admin/snapshot", timeout=15)
    assert r.status_code == 202, r.text
    before = r.json().get("seq", -1)
    deadline = time.time() + 30
    while True:
        g = requests.get(b.base + "/admin/snapshot", timeout=15).json()
        if not g["running"] and (g.get("seq", -1) > before or g.get("error")):
            return g
        assert time.time() < deadline, "the snapshot did not finish"
        time.sleep(0.02)


def assert_503(r):
    assert r.status_code == 503, r.text
    pd = r.json()
    assert pd["status"] == 503 and pd["title"] and "nothing of this write was applied" in pd["detail"]


def test_restart_kill9_and_lock(dbdir, tmp_path):
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        assert b.create("urn:d:1", 1).status_code == 201
        assert b.create("urn:d:2", 2, tenant="tn").status_code == 201
        assert b.patch("urn:d:1", 10).status_code == 204
        r = requests.post(b.base + API + "/entityOperations/create", headers=JSON, timeout=15,
                          json=[{"id": "urn:d:b%d" % i, "type": T} for i in range(5)])
        assert r.status_code == 201, r.text
        assert requests.delete(b.base + API + "/entities/urn:d:b0", timeout=15).status_code == 204
        # a second broker on the same directory refuses to start, naming the first
        other = DiskBroker(dbdir, str(tmp_path), expect_fail=True)
        assert other.proc.returncode != 0
        assert "in use by another broker (pid %d)" % b.proc.pid in other.log()
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        assert b.value("urn:d:1") == 10
        assert b.value("urn:d:2", tenant="tn") == 2
        r = requests.get(b.base + API + "/entities", params={"type": T, "limit": 100}, timeout=15)
        assert sorted(e["id"] for e in r.json()) == ["urn:d:1"] + ["urn:d:b%d" % i for i in range(1, 5)]
        s = requests.get(b.base + "/statistics", timeout=15).json()["store"]
        assert s["disk"]["failed"] is False
    finally:
        b.stop()


def test_admin_snapshot(dbdir, tmp_path):
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "interval"])
    try:
        for i in range(20):
            assert b.create("urn:s:%d" % i, i).status_code == 201
        g = snapshot(b)
        assert g["entities"] == 20 and g["file"].endswith(".cdb") and "error" not in g
        assert b.patch("urn:s:3", 33).status_code == 204
    finally:
        b.stop()
    assert any(n.startswith("snap-") for n in os.listdir(dbdir))
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:s:3") == 33 and b.value("urn:s:19") == 19
    finally:
        b.stop()


def test_sigusr1_forces_a_snapshot(dbdir, tmp_path):
    # issue 13: "POST /admin/snapshot (or a signal) forces one": SIGUSR1,
    # taken by the main thread's sigwait with SIGINT/SIGTERM; the broker goes on
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always", "--dbSnapshotSize", "0"])
    try:
        for i in range(10):
            assert b.create("urn:u:%d" % i, i).status_code == 201
        assert not any(n.startswith("snap-") for n in os.listdir(dbdir))
        b.proc.send_signal(signal.SIGUSR1)
        deadline, g = time.time() + 15, {}
        while time.time() < deadline:
            g = requests.get(b.base + "/admin/snapshot", timeout=5).json()
            if not g["running"] and g.get("file"):
                break
            time.sleep(0.02)
        assert g.get("entities") == 10 and "error" not in g
        assert os.path.basename(g["file"]) in os.listdir(dbdir)
        assert "SIGUSR1" in b.log()
        assert b.patch("urn:u:3", 33).status_code == 204
    finally:
        b.stop()
    assert b.proc.returncode == 0
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:u:3") == 33 and b.value("urn:u:9") == 9
    finally:
        b.stop()


def test_sigusr1_in_ram_is_logged_and_ignored(tmp_path):
    port = free_port()
    logpath = os.path.join(str(tmp_path), "ram.log")
    with open(logpath, "wb") as f:
        p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1"],
                             stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                if requests.get(base + "/version", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.02)
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        assert p.poll() is None
        assert requests.get(base + "/version", timeout=5).status_code == 200
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=15)
        assert p.returncode == 0
        assert "SIGUSR1" in open(logpath, errors="replace").read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_admin_snapshot_in_ram(broker):
    for r in (requests.post(broker.base + "/admin/snapshot", timeout=15),
              requests.get(broker.base + "/admin/snapshot", timeout=15)):
        assert r.status_code == 422
        assert r.json()["type"].endswith("OperationNotSupported")


@pytest.mark.parametrize("sync", ["always", "interval"])
@pytest.mark.parametrize("err", ["ENOSPC", "EIO"])
@pytest.mark.parametrize("path", ["pwrite", "mmap"])
def test_write_fault(dbdir, tmp_path, sync, err, path):
    # pwrite: every append is a pwrite (the shim fails mmap of the segments),
    # the first write after the fault is answered 503. mmap: the appends are
    # copied into the segment's mapping while the space the segment was given
    # ahead lasts (a 16 KiB segment: at most 16 KiB ahead); the fault fails
    # the next space ahead (fallocate, the zeros) and the roll-over, so the
    # appends come to pwrite past it and meet the fault: 503. Until then
    # they are acknowledged and kept (the space was there).
    faults = tmp_path / "faults"
    faults.mkdir()
    flags = ["--dbSync", sync, "--dbSyncInterval", "20"]
    if path == "pwrite":
        (faults / "nommap").write_text("1")
    else:
        flags += ["--dbSegmentSize", "16k"]
    b = DiskBroker(dbdir, str(tmp_path), flags, fault_dir=str(faults))
    kept = []
    try:
        assert b.create("urn:f:1", 1).status_code == 201
        (faults / "write").write_text(err)
        if path == "mmap":
            for i in range(200):
                r = b.create("urn:f:k%d" % i, i)
                if r.status_code != 201:
                    break
                kept.append(i)
            else:
                raise AssertionError("the write fault never reached the appends")
            assert len(kept) < 200
            assert_503(r)
            assert b.value("urn:f:k%d" % len(kept)) is None
        assert_503(b.create("urn:f:2", 2))
        assert_503(b.patch("urn:f:1", 5))
        r = requests.post(b.base + API + "/entityOperations/upsert", headers=JSON, timeout=15,
                          json=[{"id": "urn:f:3", "type": T}, {"id": "urn:f:1", "type": T}])
        assert_503(r)
        assert b.value("urn:f:1") == 1               # reads go on, nothing applied
        assert b.value("urn:f:2") is None and b.value("urn:f:3") is None
        (faults / "write").unlink()
        deadline = time.time() + 5
        while b.create("urn:f:2", 2).status_code != 201:
            assert time.time() < deadline, "writes did not resume"
            time.sleep(0.05)
        assert b.patch("urn:f:1", 7).status_code == 204
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:f:1") == 7 and b.value("urn:f:2") == 2 and b.value("urn:f:3") is None
        assert all(b.value("urn:f:k%d" % i) == i for i in kept)
        assert b.value("urn:f:k%d" % len(kept)) is None
    finally:
        b.stop()


@pytest.mark.parametrize("err", ["EIO", "ENOSPC"])
def test_fsync_fault_always(dbdir, tmp_path, err):
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    try:
        assert b.create("urn:g:1", 1).status_code == 201
        (faults / "fsync").write_text(err)
        assert_503(b.patch("urn:g:1", 2))
        assert_503(b.create("urn:g:2", 2))
        assert b.value("urn:g:1") == 1 and b.value("urn:g:2") is None   # undone
        (faults / "fsync").unlink()
        deadline = time.time() + 5
        while b.create("urn:g:3", 3).status_code != 201:
            assert time.time() < deadline, "writes did not resume"
            time.sleep(0.05)
        s = requests.get(b.base + "/statistics", timeout=15).json()["store"]["disk"]
        assert s["failures"] >= 1 and s["failed"] is False
        assert s["fsyncs"] >= 1 and s["fsyncMicros"] > 0     # the time the fsyncs took
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:g:1") == 1 and b.value("urn:g:2") is None and b.value("urn:g:3") == 3
    finally:
        b.stop()


@pytest.mark.parametrize("err", ["EIO", "ENOSPC"])
def test_fsync_fault_interval(dbdir, tmp_path, err):
    # interval: a failed background fdatasync cannot take back writes already
    # acknowledged; they stay, and the log refuses writes (503) until an
    # fdatasync works again; nothing acknowledged is lost (a process crash)
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "interval", "--dbSyncInterval", "20"],
                   fault_dir=str(faults))
    acked = {}
    try:
        assert b.create("urn:h:0", 0).status_code == 201
        acked["urn:h:0"] = 0
        (faults / "fsync").write_text(err)
        deadline, i = time.time() + 5, 1
        while True:
            r = b.create("urn:h:%d" % i, i)
            if r.status_code == 201:
                acked["urn:h:%d" % i] = i
                i += 1
                assert time.time() < deadline, "the fsync fault was never seen"
                time.sleep(0.005)
                continue
            assert_503(r)
            break
        assert_503(b.patch("urn:h:0", 5))
        assert b.value("urn:h:0") == 0                  # reads go on
        (faults / "fsync").unlink()
        deadline = time.time() + 5
        while b.create("urn:h:x", 42).status_code != 201:
            assert time.time() < deadline, "writes did not resume"
            time.sleep(0.05)
        acked["urn:h:x"] = 42
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        for eid, v in acked.items():
            assert b.value(eid) == v, eid
    finally:
        b.stop()


@pytest.mark.parametrize("sync", ["always", "interval"])
def test_machine_crash(dbdir, tmp_path, sync):
    # A machine crash (the faultshim's powercut: every log segment cut back
    # to its size at its last good fdatasync, then kill -9). always: every
    # acknowledged write is there; interval (50 ms): every write acknowledged
    # more than the interval plus a margin before the cut is there. Both: the
    # entities there are a prefix of the writes (nothing lost in the middle).
    # The margin covers an fdatasync that takes long on a busy disk (interval
    # promises a sync every interval, not how long the disk takes to do it).
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "nommap").write_text("1")     # the shim cuts what it saw written (pwrites)
    interval, margin = 0.05, 1.5
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", sync, "--dbSyncInterval", "50",
                                          "--dbSegmentSize", "16k"], fault_dir=str(faults))
    acked, cut, t0 = [], None, time.time()
    s = requests.Session()
    try:
        i = 0
        while True:
            if cut is None and time.time() - t0 > (1.0 if sync == "always" else 3.0):
                cut = time.time()
                (faults / "powercut").write_text("1")
            try:
                r = s.post(b.base + API + "/entities", headers=JSON, timeout=15,
                           json={"id": "urn:m:%d" % i, "type": T, A: {"type": "Property", "value": i}})
            except requests.RequestException:
                break                                # the power went
            assert r.status_code == 201, r.text
            acked.append((i, time.time()))
            i += 1
        b.proc.wait(timeout=15)
    finally:
        b.kill()
    assert cut is not None and len(acked) > 20
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        present = [b.value("urn:m:%d" % n) == n for n, _ in acked]
        k = present.index(False) if False in present else len(present)
        assert all(not x for x in present[k:]), "a write lost in the middle"
        if sync == "always":
            assert k == len(acked), "acknowledged writes lost: %d of %d" % (len(acked) - k, len(acked))
        else:
            old = [n for n, t in acked if t < cut - interval - margin]
            assert k >= len(old), "writes older than the interval lost: %d present, %d older" % (k, len(old))
    finally:
        b.stop()


def test_crash_during_snapshot(dbdir, tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    try:
        for i in range(10):
            assert b.create("urn:c:%d" % i, i).status_code == 201
        snapshot(b)
        for i in range(10, 20):
            assert b.create("urn:c:%d" % i, i).status_code == 201
        assert b.patch("urn:c:0", 100).status_code == 204
        (faults / "snapcrash").write_text("1")
        try:
            assert requests.post(b.base + "/admin/snapshot", timeout=15).status_code == 202
        except requests.RequestException:
            pass
        b.proc.wait(timeout=15)
        assert b.proc.returncode == -signal.SIGKILL
    finally:
        b.kill()
    assert any(n.endswith(".tmp") for n in os.listdir(dbdir))   # the snapshot it was writing
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:c:0") == 100
        for i in range(1, 20):
            assert b.value("urn:c:%d" % i) == i
    finally:
        b.stop()


def test_torn_tail_and_corrupt_middle(dbdir, tmp_path):
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        for i in range(3):
            assert b.create("urn:t:%d" % i, i).status_code == 201
    finally:
        b.stop()
    seg = os.path.join(dbdir, "log-00000001.cdb")
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(b"\x50\x00\x00\x00garbage")          # a record cut short
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:t:2") == 2
        assert "torn tail" in b.log() and "11 bytes dropped" in b.log()
    finally:
        b.stop()
    assert os.path.getsize(seg) == size
    with open(seg, "r+b") as f:                      # a byte inside the first record
        f.seek(30)
        c = f.read(1)
        f.seek(30)
        f.write(bytes([c[0] ^ 0xff]))
    b = DiskBroker(dbdir, str(tmp_path), expect_fail=True)
    assert "log-00000001.cdb: a corrupt record at offset 8" in b.log()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbRecover", "truncate"])
    try:
        assert b.value("urn:t:0") is None and b.value("urn:t:2") is None
        assert b.create("urn:t:9", 9).status_code == 201
    finally:
        b.stop()


def test_subscriptions_survive_a_restart_and_notify(dbdir, tmp_path):
    # 5.8.1 and issue 13: a subscription is a stored object, logged and
    # recovered like the entities; after kill -9 and a restart it is listed
    # and notifies again (notify/ rebuilds its index from the store)
    from receiver import Receiver
    rcv = Receiver()
    try:
        b = DiskBroker(dbdir, str(tmp_path), flags=("--dbSync", "always"))
        sub = {"id": "urn:ngsi-ld:Subscription:disk1", "type": "Subscription",
               "entities": [{"type": T}], "notification": {"endpoint": {"uri": rcv.uri}}}
        r = requests.post(b.base + API + "/subscriptions", headers=JSON, json=sub, timeout=15)
        assert r.status_code == 201, r.text
        b.kill()
        b = DiskBroker(dbdir, str(tmp_path))
        try:
            r = requests.get(b.base + API + "/subscriptions/urn:ngsi-ld:Subscription:disk1", timeout=15)
            assert r.status_code == 200, r.text
            assert b.create("urn:ngsi-ld:DiskT:sub1", 7).status_code == 201
            rcv.wait(1, 10)
            body = rcv.notifications()[0]["body"]
            assert body["subscriptionId"] == "urn:ngsi-ld:Subscription:disk1"
            assert body["data"][0]["id"] == "urn:ngsi-ld:DiskT:sub1"
        finally:
            b.stop()
    finally:
        rcv.stop()


def test_zeros_ahead_always(dbdir, tmp_path):
    """--dbSync always writes zeros ahead of its appends (an fdatasync that
    does not grow the file skips the inode): a clean stop cuts them off, a
    kill -9 leaves them, and recovery takes them for the end of the log
    (no warning, nothing lost), also in a segment before the last (a crash
    between a roll-over and the cut of the old segment)."""
    seg = os.path.join(dbdir, "log-00000001.cdb")
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        for i in range(5):
            assert b.create("urn:z:%d" % i, i).status_code == 201
        deadline = time.time() + 10
        while os.path.getsize(seg) < (1 << 20) and time.time() < deadline:
            time.sleep(0.01)                         # the snapshot thread writes them
        assert os.path.getsize(seg) >= (1 << 20)
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        assert "zeros ahead cut" in b.log() and "torn" not in b.log()
        for i in range(5):
            assert b.value("urn:z:%d" % i) == i
        assert b.create("urn:z:5", 5).status_code == 201
    finally:
        b.stop()
    size = os.path.getsize(seg)
    assert size < 1 << 20                            # cut at the clean stop
    with open(seg, "ab") as f:                       # as a crash after a roll-over leaves it
        f.write(bytes(1 << 16))
    with open(os.path.join(dbdir, "log-00000002.cdb"), "wb") as f:
        f.write(b"CDBLOG01")
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"])
    try:
        assert "zeros ahead cut" in b.log()
        for i in range(6):
            assert b.value("urn:z:%d" % i) == i
    finally:
        b.stop()
    assert os.path.getsize(seg) == size

"""corDB on disk, --dbSync always, answered from the syncer (doc/cordb.md
"Held answers"): a write's answer is built by its handler, then held with the
connection suspended (no worker thread waits) until the log's thread has
fsynced it; every store write path of the API (create, PATCH, batch, delete)
goes so, over HTTP and over cor://. Proved here with the LD_PRELOAD shim
(build/<variant>/faultshim.so): a power cut in the middle of 200 concurrent
writers loses no acknowledged write; a failed fdatasync acknowledges nothing
(503 ProblemDetails, nothing applied) and writes work again after; a failed
fdatasync of the history log (--history corDB) is answered 503 as well; a
SIGTERM while answers are held exits 0 with every acknowledged write kept.
"""
import concurrent.futures
import json
import os
import signal
import socket
import struct
import threading
import time

import pytest
import requests

from ngsi import free_port
from test_cordb_disk import API, A, JSON, T, DiskBroker, no_broker_left, dbdir  # noqa: F401 (fixtures)
from test_cor import F_CONTENT_TYPE, F_TARGET, REQUEST, RESPONSE, fields, frame, hello, read_frame

N = 200


def held(b):
    return requests.get(b.base + "/statistics", timeout=15).json()["store"]["disk"]["heldWrites"]


def body(eid, v):
    return {"id": eid, "type": T, A: {"type": "Property", "value": v}}


def until_written(b, eid, v):
    """Writes work again once the disk does (the log's thread repairs it)."""
    deadline = time.time() + 10
    while b.create(eid, v).status_code != 201:
        assert time.time() < deadline, "writes did not resume"
        time.sleep(0.05)


def assert_503(r):
    assert r.status_code == 503, (r.status_code, r.text)
    p = r.json()
    assert p["type"] and p["title"] and "nothing of this write was applied" in p["detail"], p


def test_200_concurrent_writers_answered_after_their_fsync(dbdir, tmp_path):
    """200 writers at once (creates, PATCHes, batch upserts, deletes), each on
    its own connection, against a disk whose fsync takes 30 ms: all answered,
    by the syncer (heldWrites), in few fsyncs (group commit); then a power cut
    (every segment cut back to its size at its last good fdatasync, kill -9)
    while 200 more write: every write acknowledged before the cut is there
    after the restart, with its acknowledged value."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "fsyncdelay").write_text("30")
    (faults / "nommap").write_text("1")     # the power cut cuts what the shim saw written (pwrites)
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    for i in range(50):
        assert b.create("urn:w:p%d" % i, 0).status_code == 201
        assert b.create("urn:w:d%d" % i, 0).status_code == 201
    s0 = requests.get(b.base + "/statistics", timeout=15).json()["store"]["disk"]

    def write(i):
        with requests.Session() as s:
            k = i % 4
            if k == 0:
                r = s.post(b.base + API + "/entities", headers=JSON, json=body("urn:w:c%d" % i, i), timeout=30)
                return r.status_code == 201, r
            if k == 1:
                r = s.patch(b.base + API + "/entities/urn:w:p%d/attrs" % (i % 50), headers=JSON,
                            json={A: {"type": "Property", "value": i}}, timeout=30)
                return r.status_code == 204, r
            if k == 2:
                r = s.post(b.base + API + "/entityOperations/upsert", headers=JSON,
                           json=[body("urn:w:u%d:%d" % (i, j), j) for j in range(3)], timeout=30)
                return r.status_code in (201, 204), r
            r = s.delete(b.base + API + "/entities/urn:w:d%d" % (i // 4), timeout=30)
            return r.status_code == 204, r

    with concurrent.futures.ThreadPoolExecutor(N) as ex:
        res = list(ex.map(write, range(N)))
    bad = [r.text for ok, r in res if not ok]
    assert not bad, bad[:3]
    s1 = requests.get(b.base + "/statistics", timeout=15).json()["store"]["disk"]
    assert s1["heldWrites"] - s0["heldWrites"] >= N // 2       # answered from the syncer
    writes, syncs = s1["logWrites"] - s0["logWrites"], s1["fsyncs"] - s0["fsyncs"]
    assert syncs < writes, (writes, syncs)                       # group commit
    for i in range(0, N, 4):
        assert b.value("urn:w:c%d" % i) == i
        assert b.value("urn:w:u%d:2" % (i + 2)) == 2
        assert b.value("urn:w:d%d" % (i // 4)) is None

    # the power cut, in the middle of 200 writers creating entities
    acked, stop = {}, threading.Event()
    lock = threading.Lock()

    def writer(w):
        with requests.Session() as s:
            for k in range(1000):
                if stop.is_set():
                    return
                eid = "urn:cut:%d:%d" % (w, k)
                try:
                    r = s.post(b.base + API + "/entities", headers=JSON, json=body(eid, k), timeout=30)
                except requests.RequestException:
                    return
                if r.status_code != 201:
                    return
                with lock:
                    acked[eid] = k

    ths = [threading.Thread(target=writer, args=(w,)) for w in range(N)]
    for t in ths:
        t.start()
    deadline = time.time() + 20
    while len(acked) < 300 and time.time() < deadline:
        time.sleep(0.01)
    (faults / "powercut").write_text("1")
    b.proc.wait(timeout=30)                                      # killed by the shim at the next log write
    stop.set()
    for t in ths:
        t.join()
    assert len(acked) >= 300
    (faults / "powercut").unlink()
    (faults / "fsyncdelay").unlink()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        missing = [e for e, v in acked.items() if b.value(e) != v]
        assert not missing, "%d of %d acknowledged writes lost: %s" % (len(missing), len(acked), missing[:5])
    finally:
        b.stop()


def test_failed_fsync_acknowledges_nothing_then_writes_resume(dbdir, tmp_path):
    """Every write path held while the fdatasync fails: 503 ProblemDetails,
    nothing applied (reads see the values before), and writes work again
    once the disk does; after a restart nothing of the failed writes is
    there."""
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    try:
        for i in range(20):
            assert b.create("urn:f:%d" % i, 0).status_code == 201
        h0 = held(b)
        (faults / "fsync").write_text("EIO")

        def write(i):
            with requests.Session() as s:
                k = i % 4
                if k == 0:
                    return s.post(b.base + API + "/entities", headers=JSON, json=body("urn:f:new%d" % i, i),
                                  timeout=30)
                if k == 1:
                    return s.patch(b.base + API + "/entities/urn:f:%d/attrs" % (i % 20), headers=JSON,
                                   json={A: {"type": "Property", "value": 99}}, timeout=30)
                if k == 2:
                    return s.post(b.base + API + "/entityOperations/upsert", headers=JSON,
                                  json=[body("urn:f:b%d" % i, 1), body("urn:f:%d" % (i % 20), 98)], timeout=30)
                return s.delete(b.base + API + "/entities/urn:f:%d" % (i % 20), timeout=30)

        with concurrent.futures.ThreadPoolExecutor(40) as ex:
            res = list(ex.map(write, range(40)))
        for r in res:
            assert_503(r)
        for i in range(20):
            assert b.value("urn:f:%d" % i) == 0                 # nothing applied, nothing deleted
        for i in range(0, 40, 4):
            assert b.value("urn:f:new%d" % i) is None
            assert b.value("urn:f:b%d" % (i + 2)) is None
        assert held(b) > h0                                      # those were held answers
        (faults / "fsync").unlink()
        until_written(b, "urn:f:after", 7)
        r = requests.patch(b.base + API + "/entities/urn:f:0/attrs", headers=JSON,
                           json={A: {"type": "Property", "value": 5}}, timeout=15)
        assert r.status_code == 204, r.text
    finally:
        b.kill()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert b.value("urn:f:0") == 5 and b.value("urn:f:1") == 0 and b.value("urn:f:after") == 7
        assert b.value("urn:f:new0") is None and b.value("urn:f:b2") is None
    finally:
        b.stop()


def test_failed_history_fsync_is_answered_503(dbdir, tmp_path):
    """--history corDB, --dbSync always: the store's and the history's logs
    are synced in one round of the syncer; when the history log's fdatasync
    fails, the write is not acknowledged (503 ProblemDetails); once it works
    again, writes are answered 204."""
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always", "--history", "corDB"], fault_dir=str(faults))
    try:
        assert b.create("urn:hf:1", 1).status_code == 201
        (faults / "hfsync").write_text("EIO")
        r = b.patch("urn:hf:1", 2)
        assert r.status_code == 503, r.text
        p = r.json()
        assert p["type"] and p["title"] and "history" in p["detail"], p
        (faults / "hfsync").unlink()
        deadline = time.time() + 10
        while b.patch("urn:hf:1", 3).status_code != 204:
            assert time.time() < deadline, "writes did not resume"
            time.sleep(0.05)
    finally:
        b.stop()


def http_op(fid, method, target, payload=None):
    items = [(3, method), (F_TARGET, target)]
    if payload is not None:
        items.append((F_CONTENT_TYPE, b"application/json"))
    data = json.dumps(payload).encode() if payload is not None else b""
    return frame(REQUEST, fid, struct.pack(">BBH", 255, 1 if data else 0, len(items)) + fields(items) + data)


def cor_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(hello())
    read_frame(s)
    return s


def test_held_answers_over_cor(dbdir, tmp_path):
    """cor:// runs the same handlers outside libmicrohttpd: its worker waits
    for the held answer; 16 writes in flight on one connection are all
    answered 201 after their fsync, and with the fsync failing 503 with
    nothing applied."""
    faults = tmp_path / "faults"
    faults.mkdir()
    port = free_port()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always", "--corPort", str(port)], fault_dir=str(faults))
    try:
        h0 = held(b)
        s = cor_connect(port)
        for i in range(16):
            s.sendall(http_op(i + 1, b"POST", b"/ngsi-ld/v1/entities", body("urn:cor:%d" % i, i)))
        got = {}
        for _ in range(16):
            t, fid, status, _fl, _body = read_frame(s)
            assert t == RESPONSE
            got[fid] = status
        assert sorted(got) == list(range(1, 17)) and set(got.values()) == {201}, got
        assert held(b) >= h0 + 16
        (faults / "fsync").write_text("EIO")
        s.sendall(http_op(100, b"PATCH", b"/ngsi-ld/v1/entities/urn:cor:0/attrs",
                          {A: {"type": "Property", "value": 50}}))
        t, fid, status, fl, data = read_frame(s)
        assert (t, fid, status) == (RESPONSE, 100, 503), data
        assert b"nothing of this write was applied" in data
        (faults / "fsync").unlink()
        s.close()
        assert b.value("urn:cor:0") == 0
        until_written(b, "urn:cor:after", 1)
    finally:
        b.stop()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        assert [b.value("urn:cor:%d" % i) for i in range(16)] == list(range(16))
    finally:
        b.stop()


def test_sigterm_with_held_answers_exits_0_and_keeps_every_acknowledged_write(dbdir, tmp_path):
    """A SIGTERM while 100 writers wait for a slow fsync (200 ms): the
    broker finishes them (held answers count as under way), exits 0, and
    every write it acknowledged is there after the restart."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "fsyncdelay").write_text("200")
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    acked, lock = {}, threading.Lock()
    started = threading.Barrier(101)

    def writer(w):
        started.wait()
        try:
            r = requests.post(b.base + API + "/entities", headers=JSON, json=body("urn:st:%d" % w, w), timeout=30)
        except requests.RequestException:
            return
        if r.status_code == 201:
            with lock:
                acked["urn:st:%d" % w] = w

    ths = [threading.Thread(target=writer, args=(w,)) for w in range(100)]
    for t in ths:
        t.start()
    started.wait()
    time.sleep(0.1)                             # the writes are in, their fsync is slow
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=30) == 0, b.log()
    for t in ths:
        t.join()
    assert acked, "nothing was acknowledged before the stop"
    (faults / "fsyncdelay").unlink()
    b = DiskBroker(dbdir, str(tmp_path))
    try:
        missing = [e for e, v in acked.items() if b.value(e) != v]
        assert not missing, missing[:5]
    finally:
        b.stop()

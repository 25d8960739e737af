"""corDB history on --dbDir (issue 14): instances, deletes and modifications
of the history survive a restart and kill -9 (its log), and a history
snapshot (--dbSnapshotSize) followed by more writes and a restart."""

import os

import requests

from test_cordb_disk import DiskBroker, dbdir, no_broker_left  # noqa: F401  (the fixtures)
from ngsi import API, uid

JSON = {"Content-Type": "application/json"}


def post(b, path, body):
    return requests.post(b.base + API + path, headers=JSON, json=body, timeout=15)


def temporal(b, eid, **params):
    r = requests.get(b.base + API + "/temporal/entities/" + eid, params=params, timeout=15)
    assert r.status_code == 200, r.text
    return r.json()


def obs(v, t):
    return {"type": "Property", "value": v, "observedAt": t}


def snapshot(b, timeout=60):
    """POST /admin/snapshot, then wait for the history snapshot's log line
    (the history's snapshot thread writes it; the answer does not wait)."""
    import time
    n = b.log().count("history: snapshot of")
    r = requests.post(b.base + "/admin/snapshot", timeout=15)
    assert r.status_code in (200, 202), r.text
    end = time.time() + timeout
    while b.log().count("history: snapshot of") == n:
        assert time.time() < end, "no history snapshot"
        time.sleep(0.02)


def values(b, eid, attr="speed"):
    return [i["value"] for i in temporal(b, eid, attrs=attr).get(attr, [])]


def test_history_survives_kill9_and_restart(dbdir, tmp_path):
    flags = ("--history", "corDB", "--historyMaxInstances", "4")
    b = DiskBroker(dbdir, str(tmp_path), flags)
    eid = uid("Vehicle")
    r = post(b, "/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [
        obs(1, "2020-01-01T00:00:01Z"), obs(2, "2020-01-01T00:00:02Z"), {"type": "Property", "value": "x",
                                                                         "unitCode": "KMH",
                                                                         "observedAt": "2020-01-01T00:00:03Z"}]})
    assert r.status_code == 201, r.text
    for v in range(4, 7):
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"speed": obs(v, "2020-01-01T00:00:%02dZ" % v)}, timeout=15)
        assert r.status_code == 204, r.text
    before = temporal(b, eid)
    iid = before["speed"][1]["instanceId"]
    assert requests.delete(b.base + API + "/temporal/entities/%s/attrs/speed/%s" % (eid, iid),
                           timeout=15).status_code == 204
    before = temporal(b, eid)
    assert [i["value"] for i in before["speed"]] == ["x", 5, 6]
    b.kill()                          # kill -9: the history log is replayed
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert temporal(b, eid) == before
    # the entity's newest version is known again: q selects it
    r = requests.get(b.base + API + "/temporal/entities", params={"type": "Vehicle", "q": "speed==6"}, timeout=15)
    assert [e["id"] for e in r.json()] == [eid]
    # instance ids go on where they were
    r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                       json={"speed": obs(7, "2020-01-01T00:00:07Z")}, timeout=15)
    after = temporal(b, eid)["speed"]
    assert len({i["instanceId"] for i in after}) == len(after) == 4
    b.stop()


def test_history_snapshot_then_log_then_restart(dbdir, tmp_path):
    flags = ("--history", "corDB", "--dbSnapshotSize", "4k")
    b = DiskBroker(dbdir, str(tmp_path), flags)
    eid = uid("Room")
    r = post(b, "/entities", {"id": eid, "type": "Room", "t": obs(0, "2020-01-01T00:00:00Z"),
                              "name": {"type": "Property", "value": "a room", "unitCode": "X",
                                       "note": {"type": "Property", "value": {"k": [1, "two"]}}},
                              "owner": {"type": "Relationship", "object": "urn:ngsi-ld:P:1"}})
    assert r.status_code == 201, r.text
    for v in range(1, 120):            # several history snapshots on the way
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"t": obs(v, "2020-01-01T00:%02d:%02dZ" % (v // 60, v % 60))}, timeout=15)
        assert r.status_code == 204
    assert requests.delete(b.base + API + "/entities/" + eid, timeout=15).status_code == 204
    before = temporal(b, eid, timeproperty="createdAt", options="sysAttrs")
    deleted = temporal(b, eid, timeproperty="deletedAt")
    assert len(before["t"]) == 120 and "t" in deleted
    b.stop()
    assert "history: snapshot" in b.log()
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert temporal(b, eid, timeproperty="createdAt", options="sysAttrs") == before
    assert temporal(b, eid, timeproperty="deletedAt") == deleted
    assert before["name"][0]["note"]["value"] == {"k": [1, "two"]} and before["owner"][0]["object"] == "urn:ngsi-ld:P:1"
    b.stop()


def test_history_modify_and_deletes_replay(dbdir, tmp_path):
    flags = ("--history", "corDB")
    b = DiskBroker(dbdir, str(tmp_path), flags)
    keep, gone = uid("Vehicle"), uid("Vehicle")
    for eid in (keep, gone):
        r = post(b, "/temporal/entities", {"id": eid, "type": "Vehicle",
                                           "speed": [obs(1, "2020-01-01T00:00:01Z"), obs(2, "2020-01-01T00:00:02Z")],
                                           "load": [obs(9, "2020-01-01T00:00:01Z")]})
        assert r.status_code == 201, r.text
    iid = temporal(b, keep)["speed"][0]["instanceId"]
    r = requests.patch(b.base + API + "/temporal/entities/%s/attrs/speed/%s" % (keep, iid), headers=JSON,
                       json={"value": 11}, timeout=15)
    assert r.status_code == 204, r.text
    assert requests.delete(b.base + API + "/temporal/entities/%s/attrs/load" % keep, timeout=15).status_code == 204
    assert requests.delete(b.base + API + "/temporal/entities/" + gone, timeout=15).status_code == 204
    before = temporal(b, keep, options="sysAttrs")
    assert [i["value"] for i in before["speed"]] == [11, 2] and "load" not in before
    b.kill()
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert temporal(b, keep, options="sysAttrs") == before
    assert requests.get(b.base + API + "/temporal/entities/" + gone, timeout=15).status_code == 404
    b.stop()


def hsyncs(fault_dir):
    try:
        return os.path.getsize(os.path.join(fault_dir, "hsyncs"))
    except FileNotFoundError:
        return 0


def test_history_durable_before_the_answer_under_dbsync_always(dbdir, tmp_path):
    """--dbSync always: a write is answered only after its history is on disk
    (an fdatasync of history.log before each answer, counted by the shim),
    however long --dbSyncInterval is; with interval the history log is synced
    every --dbSyncInterval only. Then kill -9 keeps every acknowledged
    instance."""
    fault_dir = str(tmp_path / "faults")
    os.mkdir(fault_dir)
    flags = ("--history", "corDB", "--dbSync", "always", "--dbSyncInterval", "600000")
    b = DiskBroker(dbdir, str(tmp_path), flags, fault_dir=fault_dir)
    eid = uid("Vehicle")
    assert post(b, "/entities", {"id": eid, "type": "Vehicle", "speed": obs(0, "2020-01-01T00:00:00Z")}
                ).status_code == 201
    for v in range(1, 6):
        n = hsyncs(fault_dir)
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"speed": obs(v, "2020-01-01T00:00:%02dZ" % v)}, timeout=15)
        assert r.status_code == 204, r.text
        assert hsyncs(fault_dir) > n, "PATCH %d answered before its history was synced" % v
    n = hsyncs(fault_dir)                        # a temporal API write too
    r = post(b, "/temporal/entities/%s/attrs" % eid, {"speed": [obs(9, "2019-01-01T00:00:00Z")]})
    assert r.status_code == 204, r.text
    assert hsyncs(fault_dir) > n
    b.kill()
    b = DiskBroker(dbdir, str(tmp_path), flags, fault_dir=fault_dir)
    assert values(b, eid) == [9, 0, 1, 2, 3, 4, 5]
    b.kill()
    # interval (the default mode): no fdatasync per write
    b = DiskBroker(dbdir, str(tmp_path), ("--history", "corDB", "--dbSyncInterval", "600000"),
                   fault_dir=fault_dir)
    n = hsyncs(fault_dir)
    for v in range(6, 11):
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"speed": obs(v, "2020-01-01T00:00:%02dZ" % v)}, timeout=15)
        assert r.status_code == 204, r.text
    assert hsyncs(fault_dir) == n
    b.stop()


def test_admin_snapshot_writes_the_history_and_compacts_its_log(dbdir, tmp_path):
    """POST /admin/snapshot snapshots the history too (history.snap, the log
    compacted to what came after the copy); a crash between installing the
    snapshot and compacting the log (the old log put back) replays nothing
    twice; writes after the snapshot are in the new log."""
    flags = ("--history", "corDB")
    b = DiskBroker(dbdir, str(tmp_path), flags)
    eid = uid("Vehicle")
    assert post(b, "/entities", {"id": eid, "type": "Vehicle", "speed": obs(0, "2020-01-01T00:00:00Z")}
                ).status_code == 201
    for v in range(1, 40):
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"speed": obs(v, "2020-01-01T00:00:%02dZ" % v)}, timeout=15)
        assert r.status_code == 204, r.text
    logp, snapp = os.path.join(dbdir, "history.log"), os.path.join(dbdir, "history.snap")
    with open(logp, "rb") as f:
        old_log = f.read()
    snapshot(b)
    assert os.path.exists(snapp)
    assert os.path.getsize(logp) < len(old_log) // 4       # compacted
    want = values(b, eid)
    assert want == list(range(40))
    b.kill()
    with open(logp, "wb") as f:                             # as if the compaction had not happened
        f.write(old_log)
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert values(b, eid) == want
    for v in range(40, 45):
        r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                           json={"speed": obs(v, "2020-01-01T00:00:%02dZ" % v)}, timeout=15)
        assert r.status_code == 204, r.text
    b.kill()
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert values(b, eid) == list(range(45))
    b.stop()


def test_history_snapshot_under_concurrent_writes_then_kill9(dbdir, tmp_path):
    """A history snapshot is copied entity by entity while writers go on
    (doc/history.md, "On disk"): writers that change an entity not yet
    copied copy it first. Snapshots taken under PATCHes, temporal upserts,
    instance deletes and modifications, entity creates and deletes, then
    kill -9 and a restart: exactly the history before the crash, the
    entities in their creation order, and instance ids going on."""
    import random
    import re
    import threading
    flags = ("--history", "corDB", "--temporalLimit", "1000000", "--dbSnapshotSize", "0")
    b = DiskBroker(dbdir, str(tmp_path), flags)
    kind = "Snap" + uid("Snap").split(":")[-1]
    ids = ["urn:ngsi-ld:%s:%d" % (kind, i) for i in range(12)]
    for n, eid in enumerate(ids):            # a few large entities, so that a copy takes a while
        inst = [obs(k, "2020-01-01T%02d:%02d:%02dZ" % (k // 3600, k // 60 % 60, k % 60))
                for k in range(20000 if n < 4 else 50)]
        for c in range(0, len(inst), 2000):
            r = post(b, "/temporal/entities", {"id": eid, "type": kind, "speed": inst[c:c + 2000],
                                               "name": {"type": "Property", "value": "e%d" % n}})
            assert r.status_code in (201, 204), r.text
    stop, errors = [], []

    def patcher(seed):
        rnd = random.Random(seed)
        k = 0
        while not stop:
            k += 1
            eid = rnd.choice(ids[:4] if rnd.random() < 0.5 else ids)
            r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                               json={"speed": obs(k, "2021-01-01T00:%02d:%02dZ" % (k // 60 % 60, k % 60))},
                               timeout=15)
            if r.status_code != 204:
                errors.append(r.text)

    def temporal_writer():
        rnd = random.Random(7)
        k = 0
        while not stop:
            k += 1
            eid = rnd.choice(ids[:4])
            if k % 3 == 0:                   # upserts of older instances
                post(b, "/temporal/entities/%s/attrs" % eid,
                     {"speed": [obs(-k, "2019-06-01T00:00:%02dZ" % (k % 60))]})
            elif k % 3 == 1:                 # delete or modify an instance
                got = temporal(b, eid, attrs="speed", lastN="5")["speed"]
                iid = got[rnd.randrange(len(got))]["instanceId"]
                url = b.base + API + "/temporal/entities/%s/attrs/speed/%s" % (eid, iid)
                if k % 2:
                    requests.delete(url, timeout=15)
                else:
                    requests.patch(url, headers=JSON, json={"value": 1000 + k}, timeout=15)
            else:                            # entities come and go
                eid = "urn:ngsi-ld:%s:new%d" % (kind, k)
                post(b, "/temporal/entities", {"id": eid, "type": kind, "speed": [obs(k, "2020-02-01T00:00:00Z")]})
                if k % 2:
                    requests.delete(b.base + API + "/temporal/entities/" + eid, timeout=15)

    threads = [threading.Thread(target=patcher, args=(s,)) for s in range(3)] + [threading.Thread(target=temporal_writer)]
    for t in threads:
        t.start()
    try:
        for n in range(20):                  # until writers have copied entities first a few times
            snapshot(b)
            cows = sum(int(m) for m in re.findall(r"; (\d+) entities copied first by their writers", b.log()))
            if n >= 5 and cows >= 5:
                break
    finally:
        stop.append(1)
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert b.log().count("history: snapshot of") >= 6

    def state():
        r = requests.get(b.base + API + "/temporal/entities", timeout=60,
                         params={"type": kind, "options": "sysAttrs", "limit": "1000"})
        assert r.status_code == 200, r.text
        return r.json()
    before = state()
    assert len(before) > len(ids)
    print("entities copied first by their writers:", cows)
    b.kill()
    b = DiskBroker(dbdir, str(tmp_path), flags)
    assert state() == before                 # the same instances, ids, times, and entity order
    r = requests.patch(b.base + API + "/entities/%s/attrs" % ids[0], headers=JSON,
                       json={"speed": obs(1, "2022-01-01T00:00:00Z")}, timeout=15)
    assert r.status_code == 204
    got = temporal(b, ids[0], attrs="speed")["speed"]
    assert len({i["instanceId"] for i in got}) == len(got)
    b.stop()

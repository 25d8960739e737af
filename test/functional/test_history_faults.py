"""corDB history on disk (--history corDB --dbDir, doc/history.md "Faults"):
a failed write or fdatasync of history.log makes history refuse (the writes
are answered 503: their history may not be on disk) until a snapshot taken
after the fault is installed and the log compacted and synced; then writes
are answered again, and after a kill -9 every acknowledged instance is
there (the 503 ones too: they were kept in memory and are in the snapshot).
Faults are injected with the LD_PRELOAD shim (test/crash/faultshim.c:
D/hwrite, D/hfsync). Temporal retrieval: ETSI GS CIM 009 5.7.3 / 6.19.3.1.
"""
import time

import requests

from test_cordb_disk import API, A, DiskBroker, no_broker_left, dbdir  # noqa: F401 (fixtures)


def values(b, eid):
    r = requests.get(b.base + API + "/temporal/entities/" + eid, params={"options": "temporalValues"}, timeout=15)
    assert r.status_code == 200, r.text
    return [p[0] for p in r.json()[A]["values"]]


def resumes(b, eid, v):
    deadline = time.time() + 15
    while True:
        r = b.patch(eid, v)
        if r.status_code == 204:
            return
        assert r.status_code == 503, r.text
        assert time.time() < deadline, "history did not answer again: %s" % b.log()[-2000:]
        time.sleep(0.1)


def run_fault(dbdir, tmp_path, fault, sync):
    faults = tmp_path / "faults"
    faults.mkdir()
    flags = ["--dbSync", sync, "--history", "corDB"]
    b = DiskBroker(dbdir, str(tmp_path), flags, fault_dir=str(faults))
    try:
        assert b.create("urn:hfault:1", 1).status_code == 201
        assert b.patch("urn:hfault:1", 2).status_code == 204
        (faults / fault).write_text("EIO")
        r = b.patch("urn:hfault:1", 3)
        if sync == "always":
            assert r.status_code == 503, r.text
            p = r.json()
            assert p["type"] and p["title"] and "history" in p["detail"], p
            # the fault is still there (recovery snapshots fail): still 503
            time.sleep(0.5)
            assert b.patch("urn:hfault:1", 4).status_code == 503
        else:
            # interval: acknowledged before any sync, as the store's writes;
            # the history is kept in memory and the recovery snapshot writes it
            assert r.status_code == 204, r.text
            time.sleep(0.5)
            assert b.patch("urn:hfault:1", 4).status_code == 204
        (faults / fault).unlink()
        resumes(b, "urn:hfault:1", 5)
        assert b.patch("urn:hfault:1", 6).status_code == 204
        deadline = time.time() + 15             # (interval: nobody waits for the recovery)
        while "history log works again" not in b.log():
            assert time.time() < deadline, b.log()[-2000:]
            time.sleep(0.05)
        b.kill()
        b = DiskBroker(dbdir, str(tmp_path), flags)
        got = values(b, "urn:hfault:1")
        for v in (1, 2, 5, 6) if sync == "always" else (1, 2, 3, 4, 5, 6):
            assert v in got, got                # every acknowledged instance
        assert got[-1] == 6 and got == sorted(got), got
    finally:
        b.stop()


def test_history_write_fault_recovers_always(dbdir, tmp_path):
    """A failed write() of history.log (EIO) under --dbSync always: 503 while
    the disk fails; once it works, a snapshot rewrites what memory holds and
    history answers again (before, the flag stayed set for good)."""
    run_fault(dbdir, tmp_path, "hwrite", "always")


def test_history_write_fault_recovers_interval(dbdir, tmp_path):
    """The same under --dbSync interval (the default)."""
    run_fault(dbdir, tmp_path, "hwrite", "interval")


def test_history_fsync_fault_recovers_always(dbdir, tmp_path):
    """A failed fdatasync of history.log under always: Linux forgets the error
    once reported, so a later fdatasync that succeeds proves nothing about the
    bytes before it; writes are refused until the recovery snapshot."""
    run_fault(dbdir, tmp_path, "hfsync", "always")

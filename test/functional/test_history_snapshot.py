"""corDB history's snapshot on --dbDir (issue 14): a writer of a series the
incremental snapshot has not copied yet waits for one chunk of it (256
instances), never for the series' whole copy. The snapshot's log line says
how many instances a writer copied at once at most; the history after a
kill -9 and a restart is the one before."""

import re
import threading
import time

import requests

from test_cordb_disk import DiskBroker, dbdir, no_broker_left  # noqa: F401  (the fixtures)
from test_temporal_disk import JSON, obs, post, snapshot, temporal
from ngsi import API

N = 100000


def test_writer_of_a_big_series_waits_for_one_chunk_of_the_snapshot(dbdir, tmp_path):
    flags = ["--history", "corDB", "--historyMaxInstances", str(N), "--dbSnapshotSize", "0"]
    b = DiskBroker(dbdir, str(tmp_path), flags)
    eid = "urn:ngsi-ld:Vehicle:big"
    step = 5000
    for c in range(0, N, step):             # one series of 100,000 instances
        inst = [obs(k, "2020-01-01T%02d:%02d:%02d.%03dZ" % (k // 3600000, k // 60000 % 60, k // 1000 % 60, k % 1000))
                for k in range(c, c + step)]
        r = post(b, "/temporal/entities", {"id": eid, "type": "Vehicle", "speed": inst})
        assert r.status_code in (201, 204), r.text
    stop = []
    worst = [0.0]
    n_patch = [0]
    seq = [0]
    lock = threading.Lock()

    def patcher():                           # each PATCH appends, and drops the series' oldest instance (the bound)
        while not stop:
            with lock:
                seq[0] += 1
                k = seq[0]
            t0 = time.time()
            r = requests.patch(b.base + API + "/entities/%s/attrs" % eid, headers=JSON,
                               json={"speed": obs(10 ** 6 + k, "2021-01-01T%02d:%02d:%02dZ" % (k // 3600, k // 60 % 60, k % 60))},
                               timeout=30)
            worst[0] = max(worst[0], time.time() - t0)
            assert r.status_code == 204, r.text
            n_patch[0] += 1
    threads = [threading.Thread(target=patcher)]   # one device: its observedAt in order
    for th in threads:
        th.start()
    try:
        for _ in range(10):                  # the writer meets the copy of its series
            snapshot(b)
            m = re.findall(r"; (\d+) entities copied first by their writers, the longest in [\d.]+ ms, "
                           r"of (\d+) instances at once at most", b.log())
    finally:
        stop.append(1)
        for th in threads:
            th.join()
    copies = sum(int(x) for x, _ in m)
    most = max(int(y) for _, y in m)
    print("writer copies %d, at most %d instances at once; %d PATCHes, the slowest %.1f ms"
          % (copies, most, n_patch[0], worst[0] * 1000))
    # the walk copies the series from its head, 256 instances per hold of the
    # lock, ahead of the bound's drops: the writer waits for one hold; when a
    # drop comes first, the writer copies one chunk, never the series
    assert len(m) == 10 and n_patch[0] > 10
    assert most <= 256, b.log()[-2000:]
    before = temporal(b, eid, attrs="speed", lastN="5")
    count = len(requests.get(b.base + API + "/temporal/entities/" + eid, timeout=60,
                             params={"attrs": "speed", "lastN": str(N)}).json()["speed"])
    b.kill()
    b = DiskBroker(dbdir, str(tmp_path), flags)
    try:
        assert temporal(b, eid, attrs="speed", lastN="5") == before
        after = requests.get(b.base + API + "/temporal/entities/" + eid, timeout=60,
                             params={"attrs": "speed", "lastN": str(N)}).json()["speed"]
        assert len(after) == count
    finally:
        b.stop()

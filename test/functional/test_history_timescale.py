"""--history timescale: attribute history in a real PostgreSQL (test/functional/pg.py).

What is particular to this backend (the temporal API itself is tested against
both backends by the temporal test file): where the rows go (one set of tables,
a tenant column), the bounded queue (a write is answered only when its history
is queued; a full queue makes writers wait --historyQueueTimeout and then
answers 503 with nothing applied; nothing queued is lost while PostgreSQL is
down), read-your-writes of the temporal API, deletes not overtaken by queued
instances, and the history surviving a restart of the broker.
"""

import os
import subprocess
import time
import uuid

import pytest
import requests

from conftest import MONGOC, Client, binary_path, fresh_tenant
from ngsi import API, ERR, free_port, uid
from pg import PgServer

SPEED = "https://uri.etsi.org/ngsi-ld/default-context/speed"


def vehicle(eid, speed=1, **kw):
    e = {"id": eid, "type": "Vehicle",
         "speed": {"type": "Property", "value": speed, "observedAt": "2024-01-01T00:00:00Z"}}
    e.update(kw)
    return e


def ts_broker(broker_factory, uri, *flags):
    # a read waits for the queued history (--historyQueueTimeout + 1 s): generous, so
    # that a loaded machine's PostgreSQL is not mistaken for a failure
    if "--historyQueueTimeout" not in flags:
        flags = ("--historyQueueTimeout", "10000") + tuple(flags)
    return broker_factory("--history", "timescale", "--historyURI", uri, *flags)


@pytest.fixture
def tcli(broker_factory, pg_uri):
    c = Client(ts_broker(broker_factory, pg_uri), fresh_tenant())
    yield c
    c.close()


def tget(c, eid, **params):
    """GET /temporal/entities/{id} by modifiedAt (instances without observedAt
    are not selected by the default timeproperty, 4.11)."""
    params.setdefault("timeproperty", "modifiedAt")
    return c.get("/temporal/entities/" + eid, params=params)


def speeds(r):
    body = r.json()
    inst = body.get("speed", [])
    if isinstance(inst, dict):
        inst = [inst]
    return [i["value"] for i in inst]


# ---------------------------------------------------------------- start

def run_broker(*flags, timeout=15):
    """Starts a broker that is expected to refuse to start; returns (rc, log)."""
    cmd = [binary_path(), "-fg", "--port", str(free_port()), "--bind", "127.0.0.1"] + list(flags)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def test_start_without_uri_is_refused():
    rc, log = run_broker("--history", "timescale")
    assert rc != 0
    assert "--historyURI" in log


def test_start_with_unreachable_postgres_is_refused(tmp_path):
    rc, log = run_broker("--history", "timescale", "--historyURI",
                         "postgresql://coraine@/postgres?host=%s&port=1" % tmp_path)
    assert rc != 0
    assert "PostgreSQL" in log and "cannot connect" in log


def test_historyuri_from_the_environment(pg_server):
    """CORAINE_HISTORYURI is --historyURI (every flag has its environment twin)."""
    import os
    db = pg_server.new_database()
    port = free_port()
    env = dict(os.environ, CORAINE_HISTORYURI=pg_server.uri(db), CORAINE_HISTORY="timescale")
    p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = "http://127.0.0.1:%d" % port
        for _ in range(200):
            try:
                requests.get(base + "/version", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.05)
        r = requests.post(base + API + "/entities", json=vehicle(uid("Vehicle")))
        assert r.status_code == 201
        r = requests.get(base + API + "/temporal/entities", params={"type": "Vehicle"})
        assert r.status_code == 200 and len(r.json()) == 1
        assert pg_server.psql("SELECT count(*) FROM coraine_instances", db) == "1"
    finally:
        p.terminate()
        p.wait(20)


# ------------------------------------------- plain tables or a hypertable

def indexes(pg_server, db):
    return set(pg_server.psql("SELECT indexname FROM pg_indexes WHERE tablename = 'coraine_instances'",
                              db).split())


def fake_timescaledb(pg_server, db):
    """What the broker's check reads: a pg_extension row named timescaledb
    (written into the catalog of this scratch database; TimescaleDB itself
    is not packaged for Debian 12)."""
    pg_server.psql("INSERT INTO pg_extension (oid, extname, extowner, extnamespace, extrelocatable, extversion)"
                   " VALUES (999999, 'timescaledb', (SELECT oid FROM pg_roles WHERE rolname = current_user),"
                   " (SELECT oid FROM pg_namespace WHERE nspname = 'public'), false, '2.99.0')", db)


def test_plain_postgres_gets_plain_tables_with_btree_and_brin(broker_factory, pg_server):
    """Without timescaledb in pg_extension: plain tables, the series and iid
    btrees and a BRIN index on modified_at (doc/history.md)."""
    db = pg_server.new_database()
    b = ts_broker(broker_factory, pg_server.uri(db), "--logLevel", "info")
    assert "plain tables" in b.read_log()
    assert indexes(pg_server, db) == {"coraine_instances_series", "coraine_instances_iid", "coraine_instances_brin"}
    assert pg_server.psql("SELECT relkind FROM pg_class WHERE relname = 'coraine_instances'", db) == "r"


def test_timescaledb_in_pg_extension_takes_the_hypertable_path(pg_server):
    """With timescaledb in pg_extension the broker makes coraine_instances a
    hypertable: create_hypertable(coraine_instances, modified_at, one day of
    µs per chunk) and no BRIN index. Here create_hypertable does not exist
    (the extension's row is faked): the start is refused, saying so."""
    db = pg_server.new_database()
    fake_timescaledb(pg_server, db)
    rc, log = run_broker("--history", "timescale", "--historyURI", pg_server.uri(db))
    assert rc != 0
    assert "timescaledb extension is installed" in log and "hypertable failed" in log
    assert "create_hypertable" in log
    # the schema's transaction was rolled back: nothing half made
    assert pg_server.psql("SELECT count(*) FROM pg_class WHERE relname = 'coraine_instances'", db) == "0"


def test_hypertable_call_and_its_arguments(broker_factory, pg_server):
    """The same path up to and through the create_hypertable call, with a
    stand-in function of TimescaleDB's signature that records its arguments:
    the broker starts, calls it once with the instance table, modified_at and
    a chunk interval of 86,400,000,000 µs (a day), makes no BRIN index, and
    writes and reads history on the table."""
    db = pg_server.new_database()
    fake_timescaledb(pg_server, db)
    pg_server.psql("CREATE TABLE ht_calls (rel text, col text, chunk bigint, if_not_exists boolean, migrate boolean);"
                   "CREATE FUNCTION create_hypertable(relation regclass, time_column_name name,"
                   " chunk_time_interval anyelement, if_not_exists boolean, migrate_data boolean)"
                   " RETURNS TABLE (hypertable_id integer, schema_name name, table_name name, created boolean)"
                   " LANGUAGE sql AS $$ INSERT INTO ht_calls VALUES (relation::text, time_column_name,"
                   " chunk_time_interval::bigint, if_not_exists, migrate_data);"
                   " SELECT 1, 'public'::name, relation::text::name, true $$", db)
    b = ts_broker(broker_factory, pg_server.uri(db), "--logLevel", "info")
    assert "a TimescaleDB hypertable" in b.read_log()
    assert pg_server.psql("SELECT * FROM ht_calls", db) == "coraine_instances|modified_at|86400000000|t|t"
    assert indexes(pg_server, db) == {"coraine_instances_series", "coraine_instances_iid"}
    c = Client(b, fresh_tenant())
    eid = uid("Vehicle")
    c.create(vehicle(eid, 5))
    assert speeds(tget(c, eid)) == [5]
    c.close()


# ---------------------------------------------------------------- the rows

def test_rows_with_tenant_column(tcli, pg_server, pg_uri):
    """One set of tables for every tenant; the tenant is a column (doc/history.md)."""
    eid = uid("Vehicle")
    tcli.create(vehicle(eid, 10, brand={"type": "Property", "value": "Audi"}))
    r = tcli.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 11.5}})
    assert r.status_code == 204
    # a temporal read sees every write answered before it (read-your-writes)
    r = tget(tcli, eid)
    assert r.status_code == 200, r.text
    assert speeds(r) == [10, 11.5]
    db = pg_uri.split("?")[0].split("/")[-1]
    rows = pg_server.psql("SELECT tenant, attr, kind, value, num FROM coraine_instances"
                          " WHERE entity_id = '%s' ORDER BY iid" % eid, db).splitlines()
    assert rows[0] == "%s|%s|1|10|10" % (tcli.tenant, SPEED)
    assert rows[-1] == "%s|%s|1|11.5|11.5" % (tcli.tenant, SPEED)
    assert len(rows) == 3                     # speed twice, brand once
    ent = pg_server.psql("SELECT tenant, types FROM coraine_entities WHERE entity_id = '%s'" % eid, db)
    assert ent == "%s|{https://uri.etsi.org/ngsi-ld/default-context/Vehicle}" % tcli.tenant


def test_tenants_are_isolated(broker_factory, pg_uri, make_client):
    b = ts_broker(broker_factory, pg_uri)
    a, c = make_client(b), make_client(b)
    eid = uid("Vehicle")
    a.create(vehicle(eid, 1))
    c.create(vehicle(eid, 2))
    assert speeds(tget(a, eid)) == [1]
    assert speeds(tget(c, eid)) == [2]
    a.delete("/temporal/entities/" + eid)
    assert tget(a, eid).status_code == 404
    assert speeds(tget(c, eid)) == [2]


def test_values_round_trip(tcli):
    """What goes into PostgreSQL comes back the same: every kind, unitCode,
    datasetId, sub-attributes (codec.h's encoding), JSON verbatim, text with
    tabs, newlines and backslashes (COPY's escapes)."""
    eid = uid("Vehicle")
    e = {
        "id": eid, "type": "Vehicle",
        "speed": {"type": "Property", "value": 3, "unitCode": "KMH", "observedAt": "2024-01-01T00:00:00Z",
                  "accuracy": {"type": "Property", "value": 0.25,
                               "source": {"type": "Relationship", "object": "urn:ngsi-ld:S:1"}}},
        "note": {"type": "Property", "value": "tab\there\nnewline \\ backslash \"quote\" ünï"},
        "loc": {"type": "GeoProperty", "value": {"type": "Point", "coordinates": [1.5, -2.25]}},
        "owner": {"type": "Relationship", "object": "urn:ngsi-ld:Person:1", "datasetId": "urn:ds:1"},
        "cfg": {"type": "JsonProperty", "json": {"b": 1, "a": [True, None, "x"]}},
        "name": {"type": "LanguageProperty", "languageMap": {"en": "car", "fr": "voiture"}},
        "items": {"type": "ListProperty", "valueList": [1, "two", 3.5]},
    }
    tcli.create(e)
    got = tget(tcli, eid).json()

    def one(name):
        v = got[name]
        return v[0] if isinstance(v, list) else v
    sp = one("speed")
    assert sp["value"] == 3 and sp["unitCode"] == "KMH"
    assert sp["accuracy"]["value"] == 0.25
    assert sp["accuracy"]["source"]["object"] == "urn:ngsi-ld:S:1"
    assert one("note")["value"] == e["note"]["value"]
    assert one("loc")["value"] == e["loc"]["value"]
    assert one("owner")["object"] == "urn:ngsi-ld:Person:1" and one("owner")["datasetId"] == "urn:ds:1"
    assert one("cfg")["json"] == e["cfg"]["json"]
    assert one("name")["languageMap"] == e["name"]["languageMap"]
    assert one("items")["valueList"] == e["items"]["valueList"]


def test_delete_not_overtaken_by_queued_instances(tcli):
    """A temporal delete waits for the queue: instances written just before it
    cannot land after it and bring the entity's history back."""
    eid = uid("Vehicle")
    tcli.create(vehicle(eid, 0))
    for v in range(1, 30):
        assert tcli.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": v}}).status_code == 204
    assert tcli.delete("/entities/" + eid).status_code == 204
    r = tcli.delete("/temporal/entities/" + eid)
    assert r.status_code == 204, r.text
    time.sleep(0.3)
    assert tget(tcli, eid).status_code == 404


def test_history_survives_a_broker_restart(pg_server):
    from conftest import Broker
    db = pg_server.new_database()
    flags = ["--history", "timescale", "--historyURI", pg_server.uri(db)]
    import tempfile
    logdir = tempfile.mkdtemp()
    eid = uid("Vehicle")
    b = Broker(flags, logdir)
    try:
        c = Client(b)
        c.create(vehicle(eid, 1))
        c.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 2}})
        first = tget(c, eid).json()["speed"]
    finally:
        b.stop()
    b = Broker(flags, logdir)
    try:
        c = Client(b)
        # the entity is gone from corDB in RAM; its history is in PostgreSQL
        assert c.get("/entities/" + eid).status_code == 404
        r = tget(c, eid)
        assert r.status_code == 200, r.text
        assert r.json()["speed"] == first
        c.create(vehicle(eid, 3))
        ids = [i["instanceId"] for i in tget(c, eid).json()["speed"]]
        assert len(ids) == 3 and len(set(ids)) == 3       # instance ids never reused
    finally:
        b.stop()


# ---------------------------------------------------------------- the queue

@pytest.fixture
def own_pg():
    """A PostgreSQL of this test alone (it is stopped and started again)."""
    s = PgServer()
    yield s
    s.close()


def test_full_queue_answers_503_with_nothing_applied(own_pg, tmp_path):
    """With PostgreSQL down the queue fills; the next write waits
    --historyQueueTimeout, then gets 503 and changes nothing. When PostgreSQL
    is back every queued write reaches the history, in order."""
    from conftest import Broker
    db = own_pg.new_database()
    b = Broker(["--history", "timescale", "--historyURI", own_pg.uri(db), "--historyQueueSize", "4",
                "--historyQueueTimeout", "300"], str(tmp_path))
    try:
        c = Client(b, fresh_tenant())
        eid = uid("Vehicle")
        c.create(vehicle(eid, 0))
        assert speeds(tget(c, eid)) == [0]
        own_pg.stop()
        for v in (1, 2, 3, 4):             # queued (the writer retries in the background)
            r = c.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": v}})
            assert r.status_code == 204, r.text
        t0 = time.time()
        r = c.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 99}})
        waited = time.time() - t0
        assert r.status_code == 503, r.text
        assert r.headers["Content-Type"].startswith("application/json")
        assert "nothing of this write was applied" in r.json()["detail"]
        assert 0.25 <= waited < 5
        assert c.entity(eid)["speed"]["value"] == 4              # not 99
        # a create and a batch are refused the same way, and create nothing
        other = uid("Vehicle")
        assert c.post("/entities", vehicle(other)).status_code == 503
        assert c.get("/entities/" + other).status_code == 404
        r = c.post("/entityOperations/create", [vehicle(uid("Vehicle")), vehicle(uid("Vehicle"))])
        assert r.status_code == 503
        assert c.delete("/entities/" + eid).status_code == 503
        assert c.entity(eid)["speed"]["value"] == 4
        # PostgreSQL back: the queued writes land, writes are taken again
        own_pg.start()
        deadline = time.time() + 20
        while time.time() < deadline:
            r = c.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 5}})
            if r.status_code == 204:
                break
            time.sleep(0.2)
        assert r.status_code == 204, r.text
        assert speeds(tget(c, eid)) == [0, 1, 2, 3, 4, 5]
    finally:
        b.stop()
    log = b.read_log()
    assert "retrying" in log


def history_queued(b):
    r = requests.get(b.base + "/metrics", timeout=10)
    for line in r.text.splitlines():
        if line.startswith("coraine_history_queued "):
            return int(float(line.split()[1]))
    raise AssertionError("no coraine_history_queued in /metrics")


def test_queue_bound_is_exact_with_held_writes_under_dbsync_always(own_pg, tmp_path):
    """--dbDir --dbSync always: a write's answer is held until its fsync and
    its history is appended after its call returned (on the store's syncer).
    Its queue room is kept until then (and given back if the write is
    undone), so 16 concurrent PATCHes through a queue of 4 with PostgreSQL
    stopped and a slow disk (the fault shim's fsyncdelay) get exactly 4
    answers 204, the others 503 with nothing applied; the queue never holds
    more than 4. (Before: the room came back when the call returned, and
    every PATCH whose fsync was in flight was queued beyond the bound.)"""
    import concurrent.futures
    from test_cordb_disk import DiskBroker
    faults = tmp_path / "faults"
    faults.mkdir()
    db = own_pg.new_database()
    dbdir = tmp_path / "db"
    dbdir.mkdir()
    b = DiskBroker(str(dbdir), str(tmp_path),
                   ["--dbSync", "always", "--history", "timescale", "--historyURI", own_pg.uri(db),
                    "--historyQueueSize", "4", "--historyQueueTimeout", "300"], fault_dir=str(faults))
    try:
        c = Client(b, fresh_tenant())
        ids = [uid("Vehicle") for _ in range(16)]
        for e in ids:
            assert c.post("/entities", vehicle(e, 0)).status_code == 201
        deadline = time.time() + 20
        while history_queued(b) and time.time() < deadline:  # the creates are in PostgreSQL
            time.sleep(0.05)
        assert history_queued(b) == 0
        own_pg.stop()
        (faults / "fsyncdelay").write_text("150")          # every write's fsync in flight together

        def patch(e):
            w = Client(b, c.tenant)
            try:
                return w.patch("/entities/%s/attrs" % e, {"speed": {"type": "Property", "value": 7}}).status_code
            finally:
                w.close()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(patch, ids))
        (faults / "fsyncdelay").unlink()
        assert sorted(set(codes)) <= [204, 503], codes
        assert codes.count(204) == 4, codes
        assert history_queued(b) == 4
        for e, code in zip(ids, codes):                     # a 503 applied nothing
            assert c.entity(e)["speed"]["value"] == (7 if code == 204 else 0)
        own_pg.start()
        for e, code in zip(ids, codes):                     # and every 204 is in the history
            assert speeds(tget(c, e)) == ([0, 7] if code == 204 else [0])
    finally:
        b.stop()


def test_purge_with_postgres_down_loses_nothing(own_pg, tmp_path):
    """DELETE /entities?type= (a purge, in chunks of 256) is not admitted
    chunk by chunk: with PostgreSQL down its history is queued beyond the
    bound rather than waited for (no stalled worker) or lost; it lands when
    PostgreSQL is back."""
    from conftest import Broker
    db = own_pg.new_database()
    b = Broker(["--history", "timescale", "--historyURI", own_pg.uri(db), "--historyQueueSize", "300",
                "--historyQueueTimeout", "2000"], str(tmp_path))
    try:
        c = Client(b, fresh_tenant())
        ents = [vehicle("urn:ngsi-ld:Vehicle:p%d" % i) for i in range(600)]
        for k in range(0, 600, 200):
            c.batch_create(ents[k:k + 200])
        c.get("/temporal/entities", params={"type": "Vehicle", "limit": 1})   # written
        own_pg.stop()
        t0 = time.time()
        r = c.delete("/entities", params={"type": "Vehicle"})
        assert r.status_code in (200, 204), r.text
        # not stalled by the history (a corDB purge is one step; mongoc on FerretDB deletes entity by entity)
        assert time.time() - t0 < (60 if MONGOC else 5)
        left = c.get("/entities", params={"type": "Vehicle", "count": "true", "limit": 0})
        assert left.headers["NGSILD-Results-Count"] == "0"
        own_pg.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            r = c.get("/temporal/entities", params={"type": "Vehicle", "timeproperty": "deletedAt",
                                                    "timerel": "after", "timeAt": "2000-01-01T00:00:00Z",
                                                    "count": "true", "limit": 1})
            if r.status_code == 200 and r.headers.get("NGSILD-Results-Count") == "600":
                break
            time.sleep(0.3)
        assert r.status_code == 200, r.text
        assert r.headers.get("NGSILD-Results-Count") == "600"
    finally:
        b.stop()


def test_concurrent_writers_through_a_small_queue_lose_nothing(broker_factory, pg_server, make_client):
    """8 writers through a queue of 16: they wait for room in turn; every
    acknowledged PATCH has exactly one instance, in commit order per entity."""
    import threading
    db = pg_server.new_database()
    b = ts_broker(broker_factory, pg_server.uri(db), "--historyQueueSize", "16")
    c = make_client(b)
    ids = [uid("Vehicle") for _ in range(8)]
    c.batch_create([vehicle(e, 0) for e in ids])
    ok = [0] * len(ids)

    def run(k):
        w = Client(b, c.tenant)
        for v in range(1, 61):
            r = w.patch("/entities/%s/attrs" % ids[k], {"speed": {"type": "Property", "value": v}})
            assert r.status_code == 204, r.text
            ok[k] += 1
        w.close()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ok == [60] * len(ids)
    for e in ids:
        assert speeds(tget(c, e, lastN=1000)) == list(range(0, 61))
    assert pg_server.psql("SELECT count(*) FROM coraine_instances", db) == str(8 * 61)


class CommitCutter:
    """A Unix-socket proxy in front of PostgreSQL that, once armed, forwards
    the writer's next COMMIT to the server and then cuts that connection
    before the server's answer reaches the broker: the batch is committed,
    and the broker cannot know it (what a lost network does)."""

    def __init__(self, pg):
        import socket
        import tempfile
        import threading
        self.dir = tempfile.mkdtemp(prefix="coraine-pgproxy-")
        self.port = pg.port
        self.target = os.path.join(pg.dir, ".s.PGSQL.%d" % pg.port)
        self.armed = threading.Event()
        self.cut = threading.Event()
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(os.path.join(self.dir, ".s.PGSQL.%d" % self.port))
        self.ls.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def uri(self, db):
        return "postgresql://%s@/%s?host=%s&port=%d" % (PgServer.USER, db, self.dir, self.port)

    def _accept(self):
        import socket
        import threading
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.target)
            state = {"copy": False, "cut": False}
            threading.Thread(target=self._pipe, args=(c, s, True, state), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, False, state), daemon=True).start()

    def _pipe(self, src, dst, upstream, state):
        try:
            while True:
                d = src.recv(65536)
                if not d:
                    break
                if upstream and b"COPY coraine_instances" in d:
                    state["copy"] = True          # the writer's batch transaction
                if upstream and self.armed.is_set() and state["copy"] and b"COMMIT\x00" in d:
                    self.armed.clear()
                    state["cut"] = True           # the answer is dropped from now on
                    dst.sendall(d)
                    time.sleep(0.5)               # the server commits; its answer is never relayed
                    self.cut.set()
                    return
                if not upstream and state["cut"]:
                    return
                dst.sendall(d)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.close()
                except OSError:
                    pass


def test_a_batch_committed_before_a_lost_answer_is_not_written_twice(broker_factory, pg_server):
    """Exactly once: the connection is cut after PostgreSQL committed a batch
    and before its answer arrived; the retry finds the batch's number in
    coraine_writers and writes nothing, so no instance is doubled."""
    db = pg_server.new_database()
    proxy = CommitCutter(pg_server)
    c = Client(ts_broker(broker_factory, proxy.uri(db)), fresh_tenant())
    eid = uid("Vehicle")
    assert c.create(vehicle(eid, speed=1)).status_code == 201
    assert tget(c, eid).status_code == 200          # flushed: the create's batch is written
    proxy.armed.set()
    r = c.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 2}})
    assert r.status_code == 204, r.text
    assert proxy.cut.wait(10), "no batch COMMIT went through the proxy"
    r = tget(c, eid)                                 # waits for the queue: the retry is done
    assert r.status_code == 200, r.text
    assert speeds(r) == [1, 2], r.text
    assert pg_server.psql("SELECT count(*) FROM coraine_instances WHERE attr LIKE '%speed'", db) == "2"
    c.close()

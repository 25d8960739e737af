"""--database mongoc: what the broker finds out about the server at start
(src/store/mongoc/conn.c probe, watch.c; doc/mongodb.md "What FerretDB
lacks") and that it falls back cleanly where the server lacks it. FerretDB
has no 2dsphere index, no working wildcard index and no change streams: the
probe tries each for real (an index, a document, a query) and says so in the
log, the geo-queries of every georel then answer as corDB's for the same
entities (the box prefilter, judged in the broker), and a change stream
forced on (CORAINE_MONGOC_WATCH=1, as if the server were a replica set)
fails to open, is logged, and the version document is polled instead: a
subscription still reaches the other process within --syncInterval.
Spherical geo-filters forced on (CORAINE_MONGOC_GEO2D=1, as if the server
had passed the probe and then refused $geoWithin at query time: a geometry
it finds invalid, an index it lost) are refused by the server; each such
query runs again on the box prefilter alone and answers as corDB's, never a
500 (query.c geo_fallback; clause 4.10, the geo-query). The
2dsphere and change-stream paths themselves (what real MongoDB runs) are
checked as BSON by test/unit/test_mgc_filter.c and test_mongoc.c."""

import time

import pytest

from conftest import Broker, Client
from ferret import ferret, mongo_flags, new_prefix  # noqa: F401 (fixture)
from ngsi import uid
from test_mongo import stop


def geo(v):
    return {"type": "GeoProperty", "value": v}


def point(x, y):
    return {"type": "Point", "coordinates": [x, y]}


# Points near the edges of the query boxes below (where great circles and
# GEOS's planar edges disagree), several instances, a line and a polygon.
ENTS = [
    ("urn:ngsi-ld:G:paris", {"location": geo(point(2.35, 48.85))}),
    ("urn:ngsi-ld:G:berlin", {"location": geo(point(13.4, 52.5))}),
    ("urn:ngsi-ld:G:edge-n", {"location": geo(point(5, 49.999))}),      # inside, near the north edge
    ("urn:ngsi-ld:G:edge-s", {"location": geo(point(5, 40.001))}),      # inside, near the south edge
    ("urn:ngsi-ld:G:out-n", {"location": geo(point(5, 50.02))}),        # outside, above the north edge
    ("urn:ngsi-ld:G:alt", {"location": geo({"type": "Point", "coordinates": [2.36, 48.86, 35.0]})}),
    ("urn:ngsi-ld:G:two", {"location": [geo(point(100, 10)),
                                        dict(geo(point(2.34, 48.84)), datasetId="urn:d:2")]}),
    ("urn:ngsi-ld:G:line", {"location": geo({"type": "LineString", "coordinates": [[0, 45], [10, 45]]})}),
    ("urn:ngsi-ld:G:poly", {"location": geo({"type": "Polygon",
                                             "coordinates": [[[1, 48], [4, 48], [4, 50], [1, 50], [1, 48]]]})}),
    ("urn:ngsi-ld:G:far", {"location": geo(point(-170, -60))}),
    ("urn:ngsi-ld:G:east", {"location": geo(point(179.99, 0))}),
    ("urn:ngsi-ld:G:none", {"name": {"type": "Property", "value": "no location"}}),
]

BOX = "[[[0,40],[10,40],[10,50],[0,50],[0,40]]]"
QUERIES = [
    {"georel": "near;maxDistance==10000", "geometry": "Point", "coordinates": "[2.36,48.86]"},
    {"georel": "near;maxDistance==2000000", "geometry": "Point", "coordinates": "[2.36,48.86]"},
    {"georel": "near;minDistance==1000000", "geometry": "Point", "coordinates": "[2.36,48.86]"},
    {"georel": "near;maxDistance==5000", "geometry": "Point", "coordinates": "[-179.99,0]"},
    {"georel": "within", "geometry": "Polygon", "coordinates": BOX},
    {"georel": "intersects", "geometry": "Polygon", "coordinates": BOX},
    {"georel": "disjoint", "geometry": "Polygon", "coordinates": BOX},
    {"georel": "overlaps", "geometry": "Polygon", "coordinates": "[[[3,47],[5,47],[5,49],[3,49],[3,47]]]"},
    {"georel": "contains", "geometry": "Point", "coordinates": "[2,49]"},
    {"georel": "equals", "geometry": "Point", "coordinates": "[13.4,52.5]"},
    {"georel": "intersects", "geometry": "LineString", "coordinates": "[[5,44],[5,46]]"},
    {"georel": "within", "geometry": "Polygon", "coordinates": "[[[-175,-80],[175,-80],[175,80],[-175,80],[-175,-80]]]"},
]


def ids(c, params):
    r = c.get("/entities", params=dict({"type": "G", "limit": 1000}, **params))
    assert r.status_code == 200, (params, r.text)
    return sorted(e["id"] for e in r.json())


@pytest.fixture
def stores(ferret, tmp_path):
    cor = Broker(["--database", "corDB"], str(tmp_path))
    mon = Broker(mongo_flags(ferret, new_prefix(), "--logLevel", "info"), str(tmp_path))
    yield cor, mon
    stop(cor, mon)


def test_mongoc_probe_says_what_ferretdb_lacks_and_geo_queries_answer_as_cordb(stores):
    cor, mon = stores
    log = mon.read_log()
    assert "has no 2dsphere index or $geoWithin" in log, log
    assert "has no working wildcard index" in log, log
    assert "geo box prefilter" in log, log
    cc, cm = Client(cor), Client(mon)
    for eid, attrs in ENTS:
        for c in (cc, cm):
            c.create(dict({"id": eid, "type": "G"}, **attrs))
    for q in QUERIES:
        assert ids(cm, q) == ids(cc, q), q
    # the probe's scratch collections are gone, the broker is healthy
    assert "dropping the probe's collection" not in mon.read_log()


def test_mongoc_a_change_stream_the_server_refuses_falls_back_to_polling(ferret, tmp_path, monkeypatch):
    monkeypatch.setenv("CORAINE_MONGOC_WATCH", "1")
    prefix = new_prefix()
    a = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200"), str(tmp_path))
    b = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200"), str(tmp_path))
    try:
        deadline = time.time() + 10
        while "change stream on" not in b.read_log() and time.time() < deadline:
            time.sleep(0.05)
        log = b.read_log()
        assert "the change stream on %s.meta cannot be opened" % prefix in log, log
        assert "the version document is polled every --syncInterval" in log, log
        ca, cb = Client(a), Client(b)
        ca.create({"id": uid("Seed"), "type": "Seed"})
        r = ca.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                       "notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}}})
        assert r.status_code == 201, r.text
        path = "/subscriptions/" + r.headers["Location"].rsplit("/", 1)[1]
        deadline = time.time() + 10
        while cb.get(path).status_code != 200 and time.time() < deadline:
            time.sleep(0.05)
        assert cb.get(path).status_code == 200
        assert cb.delete(path).status_code == 204
        deadline = time.time() + 10
        while ca.get(path).status_code != 404 and time.time() < deadline:
            time.sleep(0.05)
        assert ca.get(path).status_code == 404
    finally:
        stop(a, b)


def test_mongoc_a_geo_filter_the_server_refuses_at_query_time_falls_back_to_the_box(ferret, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("CORAINE_MONGOC_GEO2D", "1")
    cor = Broker(["--database", "corDB"], str(tmp_path))
    mon = Broker(mongo_flags(ferret, new_prefix(), "--logLevel", "info"), str(tmp_path))
    try:
        assert "CORAINE_MONGOC_GEO2D=1" in mon.read_log()
        cc, cm = Client(cor), Client(mon)
        for eid, attrs in ENTS:
            for c in (cc, cm):
                assert c.create(dict({"id": eid, "type": "G"}, **attrs)).status_code == 201
        for q in QUERIES:
            assert ids(cm, q) == ids(cc, q), q
            # the count and a page past the server's (query_run's exact path)
            for extra in ({"count": "true", "limit": 2}, {"count": "true", "limit": 0},
                          {"orderBy": "id", "limit": 3, "offset": 1}):
                rm = cm.get("/entities", params=dict({"type": "G"}, **q, **extra))
                rc = cc.get("/entities", params=dict({"type": "G"}, **q, **extra))
                assert rm.status_code == rc.status_code == 200, (q, extra, rm.text)
                assert rm.headers.get("NGSILD-Results-Count") == rc.headers.get("NGSILD-Results-Count"), (q, extra)
                if "orderBy" in extra:
                    assert [e["id"] for e in rm.json()] == [e["id"] for e in rc.json()], (q, extra)
        log = mon.read_log()
        assert "refused a spherical geo-filter" in log, log
        assert "runs on the box prefilter" in log
        assert " 500 " not in log
    finally:
        stop(cor, mon)

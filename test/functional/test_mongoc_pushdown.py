"""--database mongoc: the query pushdown (src/store/mongoc/filter.c,
doc/mongodb.md "Queries"). Every kind of query the server narrows (idPattern
as $regex, q on numbers, strings, booleans, date-times, patterns, existence,
paths, scopeQ, the entity selectors of POST /entityOperations/query, and
offset/limit/count when the translation is exact) answers exactly what
corDB answers for the same entities, including the entities that only the
broker can judge (several instances, compound values, long strings, typed
values) and documents written before the pushdown's fields existed."""

import pytest

from conftest import Broker, Client
from ferret import ferret, mongo_flags, new_prefix  # noqa: F401 (fixture)
from test_mongo import stop


def prop(v, **kw):
    return dict({"type": "Property", "value": v}, **kw)


def rel(o):
    return {"type": "Relationship", "object": o}


ENTS = [
    ("urn:ngsi-ld:Car:001", {"name": prop("alpha"), "speed": prop(60), "on": prop(True),
                             "at": prop("2020-01-01T10:00:00Z"), "owner": rel("urn:ngsi-ld:P:1"),
                             "scope": "/Madrid/Gardens"}),
    ("urn:ngsi-ld:Car:002", {"name": prop("beta"), "speed": prop(10.5), "on": prop(False),
                             "at": prop("2020-01-01T12:00:00+01:00"), "owner": rel("urn:ngsi-ld:P:2"),
                             "scope": ["/Madrid", "/CompanyA"]}),
    ("urn:ngsi-ld:Car:010", {"name": prop("gamma\nline"), "speed": prop("60"),
                             "at": prop({"@type": "DateTime", "@value": "2021-06-01T00:00:00Z"}),
                             "scope": "/Madrid/Districts/Centro"}),
    ("urn:ngsi-ld:Car:011", {"name": [prop("alpha"), prop("delta", datasetId="urn:d:1")],
                             "speed": prop([60, 70]), "at": prop("2019-12-31"),
                             "scope": "/Madrid/Gardens/ElRetiro"}),
    ("urn:ngsi-ld:Bus:001", {"name": prop("x" * 300), "speed": prop(60, accuracy=prop(0.5)),
                             "address": prop({"city": "Paris", "zip": "75001"}), "scope": "/CompanyB"}),
    ("urn:ngsi-ld:Bus:002", {"name": prop("Alpha"), "on": prop(True),
                             "address": prop({"city": "Lyon"})}),
    ("urn:other:003", {"other": prop(1), "name": prop("alpha")}),
]

QUERIES = [
    {"idPattern": "^urn:ngsi-ld:Car:0[0-9]{2}$"},
    {"idPattern": "Bus"},
    {"idPattern": "^urn:ngsi-ld:(?:Car|Bus):00[12]"},
    {"idPattern": "(?=urn:ngsi-ld:B)"},                         # lookahead: not sent, the broker's
    {"idPattern": "^urn:ngsi-ld:car", "type": "T"},
    {"q": 'name=="alpha"'}, {"q": 'name=="alpha","beta"'}, {"q": 'name>"b"'}, {"q": 'name=="a".."c"'},
    {"q": 'name!="alpha"'}, {"q": "name~=^al"}, {"q": "name~=a$"}, {"q": "name~=(?i)^alpha"},
    {"q": "name!~=^al"}, {"q": "name~=line"},
    {"q": "speed==60"}, {"q": "speed>50"}, {"q": 'speed=="60"'}, {"q": "speed==10..61"},
    {"q": "on==true"}, {"q": "on==false"}, {"q": "on!=true"},
    {"q": "at>2020-01-01T10:30:00Z"}, {"q": "at<2020-01-01T11:30:00Z"},
    {"q": "at==2019-12-31T00:00:00Z..2020-01-01T10:00:00Z"}, {"q": "at>2020-06-01"},
    {"q": 'at=="2020-01-01T10:00:00Z"'},
    {"q": "owner==urn:ngsi-ld:P:1"}, {"q": "owner==urn:ngsi-ld:P:1,urn:ngsi-ld:P:2"},
    {"q": "speed.accuracy==0.5"}, {"q": 'address[city]=="Paris"'}, {"q": "address"},
    {"q": "!on"}, {"q": "on;!owner"}, {"q": 'name=="alpha"|on==true'}, {"q": 'name=="alpha";speed==60'},
    {"scopeQ": "/Madrid"}, {"scopeQ": "/Madrid/#"}, {"scopeQ": "/Madrid/+"}, {"scopeQ": "/#"},
    {"scopeQ": "/Madrid;/CompanyA"}, {"scopeQ": "/CompanyA,/CompanyB"}, {"scopeQ": "/Madrid/+/#"},
    {"scopeQ": "/Madrid/#", "q": "speed==60"},
]


def load(c):
    for eid, attrs in ENTS:
        c.create(dict({"id": eid, "type": "T" if "Car" in eid else "U"}, **attrs))


def ids(c, params):
    p = dict({"type": "T,U", "limit": 1000}, **params)
    r = c.get("/entities", params=p)
    assert r.status_code == 200, (params, r.text)
    return [e["id"] for e in r.json()]


def page(c, params):
    r = c.get("/entities", params=dict({"type": "T,U", "count": "true"}, **params))
    assert r.status_code == 200, (params, r.text)
    return r.headers.get("NGSILD-Results-Count"), [e["id"] for e in r.json()]


def select(c, entities, extra=None):
    body = {"type": "Query", "entities": entities}
    body.update(extra or {})
    r = c.post("/entityOperations/query", body, params={"limit": 1000})
    assert r.status_code == 200, (entities, r.text)
    return [e["id"] for e in r.json()]


SELECTORS = [
    [{"id": "urn:ngsi-ld:Car:001", "type": "T"}, {"idPattern": "^urn:ngsi-ld:Bus", "type": "U"}],
    [{"type": "T"}],
    [{"idPattern": "0[01]$", "type": "T"}],
    [{"id": "urn:ngsi-ld:Bus:002", "type": "T"}],                # the id is not of that type
    [{"idPattern": "(?<=Car:)01", "type": "T"}],                 # lookbehind: the broker's
    [{"type": "T;U"}],                                           # an expression: the broker's
    [{"id": "urn:ngsi-ld:Car:010", "type": "T"}, {"type": "U"}],
]


@pytest.fixture
def stores(ferret, tmp_path):
    cor = Broker(["--database", "corDB"], str(tmp_path))
    mon = Broker(mongo_flags(ferret, new_prefix()), str(tmp_path))
    a, b = Client(cor, None), Client(mon, None)
    load(a)
    load(b)
    yield a, b, mon
    stop(cor, mon)


def test_mongoc_pushdown_queries_answer_as_cordb(stores):
    """4.9, 4.19, 6.4.3.2: each pushed-down query kind gives corDB's answer,
    in corDB's order."""
    cor, mon, _ = stores
    for q in QUERIES:
        assert ids(mon, q) == ids(cor, q), q


def test_mongoc_pushdown_pages_and_counts_answer_as_cordb(stores):
    """Offset, limit and the count (sent to the server when the translation
    is exact, else counted in the broker) answer as corDB does."""
    cor, mon, _ = stores
    for q in ({"idPattern": "^urn:ngsi-ld:"}, {"idPattern": "Car"}, {"q": "on"}, {"q": "!on"},
              {"q": 'name=="alpha"'}, {"scopeQ": "/Madrid/#"}, {"idPattern": "(?=urn)"}, {}):
        for off, lim in ((0, 2), (1, 2), (2, 1), (5, 10), (0, 0)):
            p = dict(q, offset=off, limit=lim)
            assert page(mon, p) == page(cor, p), p


def test_mongoc_pushdown_entity_selectors_answer_as_cordb(stores):
    """5.2.8 / 6.23: POST /entityOperations/query with several selectors is
    one $or of (id, idPattern, type) on the server, with corDB's answer."""
    cor, mon, _ = stores
    for sel in SELECTORS:
        assert select(mon, sel) == select(cor, sel), sel
        assert select(mon, sel, {"q": "speed==60"}) == select(cor, sel, {"q": "speed==60"}), sel


def test_mongoc_pushdown_keeps_documents_written_before_its_fields(stores, ferret):
    """A document without q/qx/d/s (written by an older coraine) still
    reaches the broker's evaluation: every query answers as before."""
    pymongo = pytest.importorskip("pymongo")
    cor, mon, broker = stores
    want = {i: ids(cor, q) for i, q in enumerate(QUERIES)}
    dbname = broker.flags[broker.flags.index("--dbName") + 1]      # the default tenant's database
    cl = pymongo.MongoClient(ferret.uri, serverSelectionTimeoutMS=5000)
    try:
        coll = cl[dbname]["entities"]
        r = coll.update_many({}, {"$unset": {"q": "", "qx": "", "d": "", "s": ""}})
        assert r.matched_count == len(ENTS)
        for i, q in enumerate(QUERIES):
            assert ids(mon, q) == want[i], q
    finally:
        cl.close()


def scanned(c):
    st = c.get("/statistics").json()["store"]
    return st["scannedDocuments"], st["scannedMatched"]


def test_mongoc_pushdown_the_server_sends_only_candidates(stores):
    """/statistics counts the documents the server sent to the broker's
    scans: an exact translation sends the matches only; a prefilter sends
    the matches and the entities only the broker can judge (here: the one
    with two instances of name, the one whose name is longer than 256 bytes)."""
    _, mon, _ = stores
    for params, docs in (({"idPattern": "^urn:ngsi-ld:Bus"}, 2), ({"q": 'name=="alpha"'}, 4),
                         ({"scopeQ": "/Madrid/#"}, 4), ({"q": "owner==urn:ngsi-ld:P:1"}, 1),
                         ({"q": "at>2020-06-01"}, 1)):
        d0, m0 = scanned(mon)
        got = ids(mon, params)
        d1, m1 = scanned(mon)
        assert (d1 - d0, m1 - m0) == (docs, len(got)), params
    d0, m0 = scanned(mon)
    got = select(mon, SELECTORS[0])
    d1, m1 = scanned(mon)
    assert (d1 - d0, m1 - m0, len(got)) == (3, 3, 3)

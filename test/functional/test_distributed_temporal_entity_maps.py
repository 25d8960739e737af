"""Entity maps of distributed temporal queries (4.3.6.7, 4.5.25, 5.14.5,
Table 6.18.3.2-1 and 6.24's entityMap, 6.35 /temporal/entityMaps): a map made
by a temporal query at the hub holds the matching entities of every source
(an HTTP one and a cor:// one here, both coraine with --history corDB) with
the registrations each came from; paging the query through the map asks
each source once per page, for the ids the map gives it on that page only,
and no source when the page holds none of its entities. The HTTP source is
seen through a recording proxy, the cor:// one through the hub's
/statistics."""

import http.server
import threading

import pytest
import requests

from conftest import Client
from ngsi import free_port, uid

from test_distributed_temporal import client, hub, obs, src  # noqa: F401 (fixtures: coraine with history)
from test_distributed_temporal_read import T, put, register, vals


class Proxy:
    """Forwards every request to target and records (method, path)."""

    def __init__(self, target):
        self.seen = []
        me = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else None
                me.seen.append((self.command, self.path))
                hdr = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                r = requests.request(self.command, target + self.path, headers=hdr, data=data, timeout=10)
                body = r.content
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _any

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.base = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def temporal_asks(self):
        """The ids asked of the source by each temporal query so far (None: no id parameter), then cleared."""
        out = []
        for method, path in self.seen:
            if method == "GET" and "/temporal/entities" in path:
                q = requests.utils.urlparse(path).query
                prm = dict(x.split("=", 1) for x in q.split("&") if "=" in x)
                ids = prm.get("id")
                out.append(sorted(requests.utils.unquote(ids).split(",")) if ids else None)
        self.seen.clear()
        return out

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def cor_src(broker_factory):
    port = free_port()
    c = client(broker_factory, "src-tmc", "--corPort", str(port))
    c.cor_port = port
    yield c
    c.close()


def cor_sent(hub):
    return Client(hub.broker).get("/statistics").json()["distributed"]["cor"]["requestsSent"]


def test_4_3_6_7_temporal_query_map_holds_every_source_and_pages_ask_each_for_its_ids(hub, src, cor_src):
    typ = "Vehicle"
    here, shared = uid("Vehicle"), uid("Vehicle")
    at_http = [uid("Vehicle"), uid("Vehicle")]
    at_cor = [uid("Vehicle"), uid("Vehicle")]
    put(hub, here, speed=[obs(1, T[0])])
    put(hub, shared, speed=[obs(2, T[1])])
    put(src, shared, speed=[obs(3, T[2])])
    for i, e in enumerate(at_http):
        put(src, e, speed=[obs(10 + i, T[3])])
    for i, e in enumerate(at_cor):
        put(cor_src, e, speed=[obs(20 + i, T[4])])
    proxy = Proxy(src.broker.base)
    try:
        r_http = register(hub, proxy.base, src.tenant)
        r_cor = register(hub, "cor://127.0.0.1:%d" % cor_src.cor_port, cor_src.tenant)
        c0 = cor_sent(hub)
        r = hub.get("/temporal/entities", params={"type": typ, "entityMap": "true", "limit": "2", "count": "true"})
        assert r.status_code == 200, r.text
        mid = r.headers["NGSILD-EntityMap"]
        assert r.headers["NGSILD-Results-Count"] == "6"
        # each source asked once, for the whole result (no id list)
        assert proxy.temporal_asks() == [None] and cor_sent(hub) == c0 + 1
        m = hub.get("/entityMaps/" + mid).json()["entityMap"]
        assert m[here] == ["@none"] and sorted(m[shared]) == sorted(["@none", r_http])
        assert all(m[e] == [r_http] for e in at_http) and all(m[e] == [r_cor] for e in at_cor)
        order = list(m)
        got = {e["id"]: vals(e, "speed") for e in r.json()}
        h = {"NGSILD-EntityMap": mid}
        for off in (2, 4):
            c1 = cor_sent(hub)
            r = hub.get("/temporal/entities", params={"type": typ, "limit": "2", "offset": str(off)}, headers=h)
            assert r.status_code == 200 and r.headers["NGSILD-EntityMap"] == mid, r.text
            page = order[off:off + 2]
            assert [e["id"] for e in r.json()] == page
            got.update({e["id"]: vals(e, "speed") for e in r.json()})
            # the HTTP source asked only for its ids of the page (and not at all when it has none)
            mine = sorted(i for i in page if r_http in m[i])
            assert proxy.temporal_asks() == ([mine] if mine else [])
            assert cor_sent(hub) == c1 + (1 if any(r_cor in m[i] for i in page) else 0)
        # the instances of an entity held by two brokers, merged
        assert got == {here: [1], shared: [2, 3], at_http[0]: [10], at_http[1]: [11], at_cor[0]: [20],
                       at_cor[1]: [21]}
        # 6.24: the POST form through the same map
        body = {"type": "Query", "entities": [{"type": typ}], "temporalQ": {"timerel": "after", "timeAt": T[0]}}
        r = hub.post("/temporal/entityOperations/query", body, params={"limit": "6"}, headers=h)
        assert r.status_code == 200 and [e["id"] for e in r.json()] == order, r.text
        assert proxy.temporal_asks() == [sorted(i for i in order if r_http in m[i])]
    finally:
        proxy.close()


def test_6_35_temporal_entity_map_holds_the_sources_entities(hub, src, cor_src):
    a, b, c = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
    put(hub, a, speed=[obs(1, T[0])])
    put(src, b, speed=[obs(2, T[1])])
    put(cor_src, c, speed=[obs(3, T[2])])
    r_http = register(hub, src.broker.base, src.tenant)
    r_cor = register(hub, "cor://127.0.0.1:%d" % cor_src.cor_port, cor_src.tenant)
    tq = {"timerel": "after", "timeAt": T[0]}
    r = hub.get("/temporal/entityMaps", params=dict(tq, type="Vehicle"))
    assert r.status_code == 201, r.text
    assert r.json()["entityMap"] == {a: ["@none"], b: [r_http], c: [r_cor]}
    r = hub.post("/temporal/entityMaps", {"type": "Query", "entities": [{"type": "Vehicle"}], "temporalQ": tq})
    assert r.status_code == 201, r.text
    mid = r.headers["NGSILD-EntityMap"]
    assert r.json()["entityMap"] == {a: ["@none"], b: [r_http], c: [r_cor]}
    # the map made by /temporal/entityMaps pages the temporal query
    r = hub.get("/temporal/entities", params=dict(tq, type="Vehicle", limit="3"), headers={"NGSILD-EntityMap": mid})
    assert r.status_code == 200 and [e["id"] for e in r.json()] == [a, b, c], r.text
    # local=true through the map: the sources' entries are not asked, and stay in the map
    r = hub.get("/temporal/entities", params=dict(tq, type="Vehicle", limit="3", local="true"),
                headers={"NGSILD-EntityMap": mid})
    assert r.status_code == 200 and [e["id"] for e in r.json()] == [a], r.text
    assert hub.get("/entityMaps/" + mid).json()["entityMap"] == {a: ["@none"], b: [r_http], c: [r_cor]}

"""cor://, the broker-to-broker protocol (doc/cor-protocol.md): distributed
retrieve and query (4.3.6, 5.7.1, 5.7.2, 4.5.5) forwarded to registrations
whose endpoint is cor://host:port, between coraine processes on loopback;
a peer that dies and comes back, a peer that never answers, and garbage on
the --corPort listener. The frames of the raw tests are written by a small
codec here, from the document (a second implementation of its layout)."""

import concurrent.futures
import socket
import struct
import threading
import time

import pytest

from conftest import Client, fresh_tenant
from ngsi import VEHICLE_CTX, assert_problem, entity, free_port, prop, uid

COR_MAGIC = 0x434F5231
HELLO, REQUEST, RESPONSE, GOAWAY = 1, 2, 3, 4
OP_RETRIEVE, OP_QUERY = 1, 2
F_TARGET, F_QUERY, F_TENANT, F_ACCEPT, F_CONTENT_TYPE, F_WARNING = 1, 2, 4, 7, 8, 9


# ---------------------------------------------------------------- the codec (doc/cor-protocol.md, "Frames")

def frame(ftype, fid, payload):
    return struct.pack(">IBBHI", 8 + len(payload), ftype, 0, 0, fid) + payload


def hello(alias=b"pytest", window=16, max_frame=1 << 20, version=1):
    return frame(HELLO, 0, struct.pack(">IHHIH", COR_MAGIC, version, window, max_frame, len(alias)) + alias)


def fields(items):
    out = b""
    for code, value in items:
        if isinstance(code, bytes):       # a named header
            out += struct.pack(">BB", 0, len(code)) + code
        else:
            out += struct.pack(">B", code)
        out += struct.pack(">H", len(value)) + value
    return out


def request(fid, op, items, body=b""):
    return frame(REQUEST, fid, struct.pack(">BBH", op, 1 if body else 0, len(items)) + fields(items) + body)


def read_exact(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += chunk
    return b


def read_frame(s):
    """(type, id, status, fields {code or name: value}, body) of the next frame."""
    (n,) = struct.unpack(">I", read_exact(s, 4))
    rest = read_exact(s, n)
    ftype, _flags, _res, fid = struct.unpack(">BBHI", rest[:8])
    p = rest[8:]
    if ftype == HELLO:
        magic, version, window, max_frame, alen = struct.unpack(">IHHIH", p[:14])
        assert magic == COR_MAGIC
        return ftype, fid, version, {"window": window, "max_frame": max_frame}, p[14:14 + alen]
    status, _enc, _r, nf = struct.unpack(">HBBH", p[:6])
    p = p[6:]
    fl = {}
    for _ in range(nf):
        code = p[0]
        p = p[1:]
        if code == 0:
            name, p = p[1:1 + p[0]], p[1 + p[0]:]
            code = name.decode()
        (ln,) = struct.unpack(">H", p[:2])
        fl[code], p = p[2:2 + ln], p[2 + ln:]
    return ftype, fid, status, fl, p


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(hello())
    t, _, version, info, alias = read_frame(s)
    assert t == HELLO and version == 1 and info["window"] >= 1 and alias
    return s


def closed(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------- brokers

COR_PORTS = {name: free_port() for name in ("hub", "s1", "s2", "a", "b", "c", "restart", "strict")}


def cor_broker(broker_factory, name):
    return broker_factory("--brokerAlias", "cor-" + name, "--corPort", str(COR_PORTS[name]))


def client(broker_factory, name, seed=True):
    c = Client(cor_broker(broker_factory, name), fresh_tenant())
    if seed:
        c.ensure_tenant()
    return c


def register(at, name, tenant, info=None, **members):
    body = {"type": "ContextSourceRegistration",
            "information": info or [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": "cor://127.0.0.1:%d" % COR_PORTS[name], "tenant": tenant}
    body.update(members)
    r = at.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def ids(resp):
    assert resp.status_code == 200, resp.text
    return sorted(e["id"] for e in resp.json())


@pytest.fixture
def trio(broker_factory):
    cs = [client(broker_factory, n) for n in ("hub", "s1", "s2")]
    yield cs
    for c in cs:
        c.close()


# ---------------------------------------------------------------- distributed operations over cor://

def test_5_7_2_query_hub_and_two_sources_over_cor(trio):
    hub, s1, s2 = trio
    a, b, c = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle", speed=prop(1)))
    s1.create(entity(b, "Vehicle", speed=prop(2)))
    s2.create(entity(c, "Vehicle", speed=prop(3)))
    s2.create(entity(uid("Boat"), "Boat", speed=prop(3)))
    register(hub, "s1", s1.tenant)
    rid = register(hub, "s2", s2.tenant)
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == sorted([a, b, c])
    assert ids(hub.get("/entities", params={"type": "Vehicle", "q": "speed>1"})) == sorted([b, c])
    r = hub.get("/entities", params={"type": "Vehicle", "limit": 2, "count": "true"})
    assert len(r.json()) == 2 and r.headers["NGSILD-Results-Count"] == "3"
    reg = hub.get("/csourceRegistrations/" + rid).json()
    assert reg["timesSent"] == 3 and reg["timesFailed"] == 0 and reg["status"] == "ok"
    st = hub.get("/statistics").json()["distributed"]["cor"]
    assert st["requestsSent"] >= 6 and st["connectionsMade"] >= 2
    assert Client(s1.broker).get("/statistics").json()["distributed"]["cor"]["requestsServed"] >= 3


def test_many_queries_in_flight_share_one_connection_per_peer(trio):
    """Concurrent forwards are multiplexed: every answer complete and right, no new connection."""
    hub, s1, s2 = trio
    mine = {}
    for src, n in ((s1, 5), (s2, 7)):
        for _ in range(n):
            eid = uid("Vehicle")
            src.create(entity(eid, "Vehicle", speed=prop(n)))
            mine[eid] = n
    register(hub, "s1", s1.tenant)
    register(hub, "s2", s2.tenant)
    assert ids(hub.get("/entities", params={"type": "Vehicle", "limit": 100})) == sorted(mine)
    made = cor_stats(hub)["connectionsMade"]

    def one(i):
        c = Client(hub.broker, hub.tenant)
        try:
            if i % 2:
                r = c.get("/entities", params={"type": "Vehicle", "limit": 100})
                return sorted(e["id"] for e in r.json()) == sorted(mine) and "NGSILD-Warning" not in r.headers
            eid = list(mine)[i % len(mine)]
            return c.entity(eid)["speed"]["value"] == mine[eid]
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        assert all(ex.map(one, range(120)))
    assert cor_stats(hub)["connectionsMade"] == made


def test_5_7_1_retrieve_merged_and_404_over_cor(trio):
    hub, s1, s2 = trio
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", brand=prop("hub")))
    s1.create(entity(eid, "Vehicle", speed=prop(7, observedAt="2021-01-01T00:00:00Z")))
    s2.create(entity(eid, "Vehicle", speed=prop(6, observedAt="2020-01-01T00:00:00Z"), color=prop("red")))
    register(hub, "s1", s1.tenant)
    register(hub, "s2", s2.tenant)
    e = hub.entity(eid)
    assert e["brand"]["value"] == "hub" and e["speed"]["value"] == 7 and e["color"]["value"] == "red"
    r = hub.get("/entities/" + uid("Vehicle"))
    assert_problem(r, 404, "ResourceNotFound")
    assert "NGSILD-Warning" not in r.headers       # 404 from a source is not a failure


def test_4_3_6_2_local_data_over_an_auxiliary_source_over_cor(trio):
    hub, s1, _ = trio
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1, observedAt="2020-01-01T00:00:00Z")))
    s1.create(entity(eid, "Vehicle", speed=prop(2, observedAt="2021-01-01T00:00:00Z"), brand=prop("aux")))
    register(hub, "s1", s1.tenant, mode="auxiliary", operations=["retrieveOps"])
    e = hub.entity(eid)
    assert e["speed"]["value"] == 1 and e["brand"]["value"] == "aux"


def test_6_3_17_loop_with_a_redirect_registration_is_508_over_cor(trio):
    hub, s1, _ = trio
    register(hub, "s1", s1.tenant, mode="redirect")
    r = hub.get("/entities", params={"type": "Vehicle"}, headers={"Via": "1.1 somebody, 1.1 cor-hub"})
    assert r.status_code == 508, r.text
    assert hub.get("/entities", params={"type": "Vehicle"}).status_code == 200


def test_5_6_distributed_writes_over_cor(trio):
    """Writes forwarded by fwd_write.c go over cor:// like reads (4.3.6.3, 5.6.2, 5.6.3, 5.6.5, 5.6.6):
    an exclusive registration's attribute is written only at its source; a create, a PATCH of
    the attribute and a delete of the entity all reach it."""
    hub, s1, _ = trio
    eid = uid("Vehicle")
    register(hub, "s1", s1.tenant, mode="exclusive", operations=["redirectionOps"],
             information=[{"entities": [{"id": eid, "type": "Vehicle"}], "propertyNames": ["speed"]}])
    r = hub.post("/entities", entity(eid, "Vehicle", speed=prop(5), brand=prop("hub")))
    assert r.status_code == 201, r.text
    assert s1.entity(eid)["speed"]["value"] == 5
    assert "speed" not in hub.get("/entities/" + eid, params={"local": "true"}).json()
    r = hub.patch("/entities/%s/attrs/speed" % eid, {"type": "Property", "value": 9})
    assert r.status_code == 204, r.text
    assert s1.entity(eid)["speed"]["value"] == 9
    assert hub.entity(eid)["speed"]["value"] == 9       # read back through cor:// too
    r = hub.delete("/entities/" + eid)
    assert r.status_code == 204, r.text
    assert s1.get("/entities/" + eid).status_code == 404
    assert cor_stats(hub)["requestsFailed"] == 0


def test_5_6_7_batch_upsert_split_over_cor(trio):
    """A batch is split per source (5.6.7-5.6.10): the inclusive source's entities get one batch
    request over cor://, the local copies are written here."""
    hub, s1, _ = trio
    register(hub, "s1", s1.tenant, operations=["federationOps", "upsertBatch", "createBatch"])
    es = [entity(uid("Vehicle"), "Vehicle", speed=prop(i)) for i in range(3)]
    r = hub.post("/entityOperations/upsert", es)
    assert r.status_code in (201, 204), r.text
    for e in es:
        assert s1.entity(e["id"])["speed"]["value"] == e["speed"]["value"]
        assert hub.get("/entities/" + e["id"], params={"local": "true"}).status_code == 200


def test_4_3_6_registered_attributes_and_tenant_over_cor(trio):
    hub, s1, _ = trio
    eid = uid("Vehicle")
    s1.create(entity(eid, "Vehicle", speed=prop(5), brand=prop("secret")))
    register(hub, "s1", s1.tenant, info=[{"entities": [{"type": "Vehicle"}], "propertyNames": ["speed"]}])
    e = hub.entity(eid)
    assert e["speed"]["value"] == 5 and "brand" not in e
    # a registration naming another tenant finds nothing there
    hub2 = Client(hub.broker, fresh_tenant())
    hub2.ensure_tenant()
    register(hub2, "s1", fresh_tenant())
    assert_problem(hub2.get("/entities/" + eid), 404, "ResourceNotFound")
    hub2.close()


def test_remote_context_downloaded_by_the_source_over_cor(trio, ctxserver):
    """A request whose @context the source has not cached waits for it there
    (the request is deferred, as over HTTP) and is answered with its terms."""
    hub, s1, _ = trio
    url = ctxserver.unique(VEHICLE_CTX, delay=0.3)
    eid = uid("Vehicle")
    s1.create(entity(eid, "https://example.org/Vehicle", **{"https://example.org/speed": prop(9)}))
    register(hub, "s1", s1.tenant, info=[{"entities": [{"type": "https://example.org/Vehicle"}]}])
    r = hub.get("/entities", params={"type": "Vehicle"}, link=url)
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == [eid] and r.json()[0]["speed"]["value"] == 9
    assert "NGSILD-Warning" not in r.headers
    assert ctxserver.count(url) == 2          # the hub and the source each downloaded it once


def test_4_20_query_batch_only_source_over_cor(trio):
    """operations [queryBatch]: queries and retrieves go as POST /entityOperations/query (operation 3, a body)."""
    hub, s1, _ = trio
    eid = uid("Vehicle")
    s1.create(entity(eid, "Vehicle", speed=prop(3)))
    register(hub, "s1", s1.tenant, operations=["queryBatch"])
    assert ids(hub.get("/entities", params={"type": "Vehicle", "id": eid})) == [eid]
    assert hub.entity(eid)["speed"]["value"] == 3
    assert_problem(hub.get("/entities/" + uid("Vehicle")), 404, "ResourceNotFound")


def test_ids_with_reserved_characters_over_cor(trio):
    """The target of a retrieve is the id itself: "/", "?", "&", "%" survive the trip."""
    hub, s1, _ = trio
    eid = "urn:ngsi-ld:Vehicle:a/b?c=1&d%2F" + uid("X").rsplit(":", 1)[1]
    s1.create(entity(eid, "Vehicle", speed=prop(8)))
    register(hub, "s1", s1.tenant)
    assert hub.entity(eid)["speed"]["value"] == 8
    assert ids(hub.get("/entities", params={"type": "Vehicle", "id": eid})) == [eid]


def test_6_3_18_brokers_registered_to_each_other_over_cor(trio):
    hub, s1, _ = trio
    a, b = uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle"))
    s1.create(entity(b, "Vehicle"))
    register(hub, "s1", s1.tenant)
    register(s1, "hub", hub.tenant)
    t = time.time()
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == sorted([a, b])
    assert ids(s1.get("/entities", params={"type": "Vehicle"})) == sorted([a, b])
    assert time.time() - t < 5


def test_three_broker_chain_over_cor(broker_factory):
    a, b, c = (client(broker_factory, n) for n in ("a", "b", "c"))
    try:
        ea, eb, ec = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
        a.create(entity(ea, "Vehicle", speed=prop(1)))
        b.create(entity(eb, "Vehicle", speed=prop(2)))
        c.create(entity(ec, "Vehicle", speed=prop(3)))
        register(a, "b", b.tenant)
        register(b, "c", c.tenant)
        assert ids(a.get("/entities", params={"type": "Vehicle"})) == sorted([ea, eb, ec])
        assert a.entity(ec)["speed"]["value"] == 3
        # the Via of the last hop names both brokers before it
        assert ids(c.get("/entities", params={"type": "Vehicle"}, headers={"Via": "1.1 cor-a, 1.1 cor-b"})) == [ec]
    finally:
        for x in (a, b, c):
            x.close()


def test_peer_killed_and_restarted_reconnects(broker_factory):
    hub = client(broker_factory, "hub")
    src = client(broker_factory, "restart")
    try:
        eid = uid("Vehicle")
        src.create(entity(eid, "Vehicle", speed=prop(1)))
        register(hub, "restart", src.tenant)
        assert hub.entity(eid)["speed"]["value"] == 1
        src.broker.proc.kill()
        src.broker.proc.wait()
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert r.status_code == 200 and r.json() == [] and r.headers["NGSILD-Warning"].startswith("199")
        src.broker.start()                  # same --corPort (in RAM an empty store; on mongoc the database keeps it)
        src.ensure_tenant()
        r = src.post("/entityOperations/upsert", [entity(eid, "Vehicle", speed=prop(2))])
        assert r.status_code in (201, 204), r.text
        deadline = time.time() + 10         # the backoff is at most 2 s
        while True:
            r = hub.get("/entities/" + eid)
            if r.status_code == 200:
                break
            assert time.time() < deadline, "no reconnection: %d %s" % (r.status_code, r.text)
            time.sleep(0.2)
        assert r.json()["speed"]["value"] == 2
    finally:
        hub.close()
        src.close()


class SilentPeer:
    """A TCP server that accepts and reads, and never answers (not even the HELLO)."""

    def __init__(self, answer_hello=False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.answer_hello = answer_hello
        self.conns = []
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.answer_hello:
                threading.Thread(target=self.hello, args=(c,), daemon=True).start()

    def hello(self, c):
        try:
            read_frame(c)
            c.sendall(hello(b"silent"))
            while c.recv(65536):
                pass
        except (OSError, EOFError):
            pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("answer_hello", [False, True])
def test_6_3_17_source_that_never_answers_times_out_over_cor(broker_factory, answer_hello):
    hub = client(broker_factory, "hub")
    peer = SilentPeer(answer_hello)
    try:
        a = uid("Vehicle")
        hub.create(entity(a, "Vehicle"))
        r = hub.post("/csourceRegistrations", {
            "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": "cor://127.0.0.1:%d" % peer.port, "management": {"timeout": 300}})
        assert r.status_code == 201, r.text
        t = time.time()
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert ids(r) == [a]
        assert r.headers["NGSILD-Warning"].startswith("199")
        assert time.time() - t < 2
    finally:
        peer.close()
        hub.close()


@pytest.mark.parametrize("endpoint,flags", [
    ("cor://no-such-host.invalid:1234", ()),                     # no address
    ("cor://127.0.0.1:%d" % free_port(), ()),                      # nobody listens
    ("cor://127.0.0.1:1", ("--egressDeny", "127.0.0.1/32")),       # the egress policy refuses it
])
def test_unreachable_cor_sources_warn(broker_factory, endpoint, flags):
    hub = Client(broker_factory("--brokerAlias", "cor-unreachable", *flags), fresh_tenant())
    try:
        a = uid("Vehicle")
        hub.create(entity(a, "Vehicle"))
        r = hub.post("/csourceRegistrations", {
            "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": endpoint})
        assert r.status_code == 201, r.text
        for _ in range(2):              # the second one is in the backoff: refused at once as well
            t = time.time()
            r = hub.get("/entities", params={"type": "Vehicle"})
            assert ids(r) == [a] and time.time() - t < 3
            code = "299" if flags else "199"
            assert r.headers["NGSILD-Warning"].startswith(code), r.headers["NGSILD-Warning"]
    finally:
        hub.close()


# ---------------------------------------------------------------- the listener: frames in, frames out

def test_cor_requests_answered_out_of_order(broker_factory):
    """A slow request (forwarded to a peer that never answers, 1 s timeout)
    does not hold back a quick one sent after it on the same connection."""
    s1 = client(broker_factory, "s1")
    peer = SilentPeer(True)
    try:
        slow_type = "Slow" + uid("T").rsplit(":", 1)[-1][:8]
        r = s1.post("/csourceRegistrations", {
            "type": "ContextSourceRegistration", "information": [{"entities": [{"type": slow_type}]}],
            "endpoint": "cor://127.0.0.1:%d" % peer.port, "management": {"timeout": 1000}})
        assert r.status_code == 201, r.text
        eid = uid("Vehicle")
        s1.create(entity(eid, "Vehicle", speed=prop(4)))
        s = connect(COR_PORTS["s1"])
        tenant = s1.tenant.encode()
        s.sendall(request(7, OP_QUERY, [(F_QUERY, b"type=" + slow_type.encode()), (F_TENANT, tenant)]) +
                  request(8, OP_QUERY, [(F_QUERY, b"type=Vehicle"), (F_TENANT, tenant)]))
        t, fid, status, fl, body = read_frame(s)
        assert (t, fid, status) == (RESPONSE, 8, 200) and eid.encode() in body
        assert fl[F_CONTENT_TYPE] == b"application/json"
        t, fid, status, fl, body = read_frame(s)
        assert (t, fid, status) == (RESPONSE, 7, 200) and body == b"[]"
        assert fl[F_WARNING].startswith(b"199")
        # an unknown id is a ProblemDetails answer, the connection goes on (local: the silent peer is not asked)
        s.sendall(request(9, OP_RETRIEVE, [(F_TARGET, b"urn:ngsi-ld:Vehicle:none"), (F_QUERY, b"local=true"),
                                           (F_TENANT, tenant)]))
        t, fid, status, fl, body = read_frame(s)
        assert (t, fid, status) == (RESPONSE, 9, 404) and b"ResourceNotFound" in body
        s.close()
    finally:
        peer.close()
        s1.close()


GARBAGE = [
    ("http request", b"GET /ngsi-ld/v1/entities HTTP/1.1\r\nHost: x\r\n\r\n", "larger than"),
    ("request before hello", request(1, OP_QUERY, []), "first frame must be a HELLO"),
    ("bad magic", frame(HELLO, 0, struct.pack(">IHHIH", 0x12345678, 1, 1, 1 << 20, 0)), "magic"),
    ("short frame", struct.pack(">I", 3) + b"abc", "shorter than its header"),
]


@pytest.mark.parametrize("name,data,detail", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_cor_garbage_before_the_handshake(broker_factory, name, data, detail):
    b = cor_broker(broker_factory, "s2")
    errors = Client(b).get("/statistics").json()["distributed"]["cor"]["protocolErrors"]
    s = socket.create_connection(("127.0.0.1", COR_PORTS["s2"]), timeout=10)
    s.sendall(data)
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (GOAWAY, 0, 400)
    assert b"BadRequestData" in body and detail.encode() in body, body
    assert closed(s)
    s.close()
    assert Client(b).get("/statistics").json()["distributed"]["cor"]["protocolErrors"] == errors + 1


GARBAGE_AFTER = [
    ("unknown op", request(1, 99, []), "unknown operation code"),
    ("unknown frame type", frame(9, 1, b""), "unknown frame type"),
    ("request id 0", request(0, OP_QUERY, []), "request id"),
    ("field cut short", frame(REQUEST, 1, struct.pack(">BBH", OP_QUERY, 0, 1) + b"\x02\x00\x10ab"), "cut short"),
    ("control character", request(1, OP_QUERY, [(F_QUERY, b"type=A\r\nX: y")]), "control character"),
    ("field twice", request(1, OP_QUERY, [(F_QUERY, b"type=A"), (F_QUERY, b"type=B")]), "given twice"),
    ("frame too large", struct.pack(">I", 0x7fffffff) + b"\x02", "larger than"),
    ("a second hello", hello(), "REQUEST frames only"),
]


@pytest.mark.parametrize("name,data,detail", GARBAGE_AFTER, ids=[g[0] for g in GARBAGE_AFTER])
def test_cor_garbage_after_the_handshake(broker_factory, name, data, detail):
    b = cor_broker(broker_factory, "s2")
    s = connect(COR_PORTS["s2"])
    s.sendall(data)
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (GOAWAY, 0, 400) and detail.encode() in body, body
    assert closed(s)
    s.close()
    assert Client(b).get("/version").status_code == 200


@pytest.fixture
def slow(broker_factory):
    """A tenant of s2 where a query of type Slow waits 300 ms for a peer that never answers."""
    c = client(broker_factory, "s2")
    peer = SilentPeer(True)
    r = c.post("/csourceRegistrations", {
        "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Slow"}]}],
        "endpoint": "cor://127.0.0.1:%d" % peer.port, "management": {"timeout": 300}})
    assert r.status_code == 201, r.text
    yield [(F_QUERY, b"type=Slow"), (F_TENANT, c.tenant.encode())]
    peer.close()
    c.close()


@pytest.mark.parametrize("case", ["duplicate id", "window exceeded"])
def test_cor_flow_control_errors(broker_factory, slow, case):
    b = cor_broker(broker_factory, "s2")
    s = connect(COR_PORTS["s2"])
    if case == "duplicate id":
        s.sendall(request(5, OP_QUERY, slow) * 2)
        detail = b"request id 5 is already in flight"
    else:            # the window of the HELLO is 64: the 65th request in flight breaks it
        s.sendall(b"".join(request(i, OP_QUERY, slow) for i in range(1, 80)))
        detail = b"more than 64 requests in flight"
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (GOAWAY, 0, 400) and detail in body, body
    assert closed(s)
    s.close()
    # the requests queued behind the error are dropped, not run: the broker answers at once
    t = time.time()
    s = connect(COR_PORTS["s2"])
    s.sendall(request(1, OP_QUERY, [(F_QUERY, b"type=Vehicle")]))
    assert read_frame(s)[:3] == (RESPONSE, 1, 200)
    assert time.time() - t < 1.5
    s.close()
    assert Client(b).get("/version").status_code == 200


def strict_broker(broker_factory):
    return broker_factory("--brokerAlias", "cor-strict", "--corPort", str(COR_PORTS["strict"]),
                          "--headerTimeout", "1", "--bodyTimeout", "1", "--requestTimeout", "1")


def cor_stats(c):
    return Client(c.broker).get("/statistics").json()["distributed"]["cor"]


def test_idle_peer_closed_and_reconnected(broker_factory):
    """The client closes a connection idle for --requestTimeout and makes a new one when needed."""
    hub = Client(strict_broker(broker_factory), fresh_tenant())
    src = client(broker_factory, "s1")
    try:
        hub.ensure_tenant()
        eid = uid("Vehicle")
        src.create(entity(eid, "Vehicle"))
        register(hub, "s1", src.tenant)
        assert hub.entity(eid)["id"] == eid
        made = cor_stats(hub)["connectionsMade"]
        assert hub.entity(eid)["id"] == eid
        assert cor_stats(hub)["connectionsMade"] == made          # the same connection
        time.sleep(1.6)
        assert hub.entity(eid)["id"] == eid
        assert cor_stats(hub)["connectionsMade"] == made + 1
    finally:
        hub.close()
        src.close()


def test_a_window_of_unanswered_requests_drops_the_connection(broker_factory):
    """A peer that answers the HELLO and nothing else: once its whole window is
    taken by requests past their deadline, the connection is dropped and a new one made."""
    hub = client(broker_factory, "hub")
    peer = SilentPeer(True)               # its HELLO announces a window of 16
    try:
        r = hub.post("/csourceRegistrations", {
            "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": "cor://127.0.0.1:%d" % peer.port, "management": {"timeout": 50}})
        assert r.status_code == 201, r.text
        made = cor_stats(hub)["connectionsMade"]
        for _ in range(20):
            r = hub.get("/entities", params={"type": "Vehicle"})
            assert r.status_code == 200 and r.headers["NGSILD-Warning"].startswith("199")
        assert cor_stats(hub)["connectionsMade"] >= made + 2
    finally:
        peer.close()
        hub.close()


@pytest.mark.parametrize("case", ["no hello", "frame never completed"])
def test_cor_slow_peers_are_cut(broker_factory, case):
    """--headerTimeout for the HELLO, --bodyTimeout for a frame begun: a GOAWAY 408, as HTTP answers 408."""
    b = strict_broker(broker_factory)
    if case == "no hello":
        s = socket.create_connection(("127.0.0.1", COR_PORTS["strict"]), timeout=10)
        s.sendall(hello()[:5])
        detail = b"no HELLO within --headerTimeout"
    else:
        s = connect(COR_PORTS["strict"])
        time.sleep(1.3)                      # an idle connection after its handshake is kept
        s.sendall(request(1, OP_QUERY, [(F_QUERY, b"type=Vehicle")])[:10])
        detail = b"not complete within --bodyTimeout"
    t0 = time.time()
    t, fid, status, fl, body = read_frame(s)
    assert (t, status) == (GOAWAY, 408) and detail in body, body
    assert 0.3 < time.time() - t0 < 3
    assert closed(s)
    s.close()
    assert Client(b).get("/version").status_code == 200


def test_cor_http_operation_and_bad_target(broker_factory):
    b = cor_broker(broker_factory, "s2")
    s = connect(COR_PORTS["s2"])
    # any resource through the HTTP operation: GET /ngsi-ld/v1/types
    s.sendall(frame(REQUEST, 3, struct.pack(">BBH", 255, 0, 2) + fields([(3, b"GET"), (F_TARGET, b"/ngsi-ld/v1/types")])))
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (RESPONSE, 3, 200) and body.startswith(b"{")
    # HEAD: the answer of GET without its body
    s.sendall(frame(REQUEST, 6, struct.pack(">BBH", 255, 0, 2) + fields([(3, b"HEAD"), (F_TARGET, b"/ngsi-ld/v1/types")])))
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status, body) == (RESPONSE, 6, 200, b"") and fl[F_CONTENT_TYPE] == b"application/json"
    # a retrieve without its target is a 400 answer, not a protocol error
    s.sendall(request(4, OP_RETRIEVE, []))
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (RESPONSE, 4, 400) and b"BadRequestData" in body
    # an unknown path: 404 as over HTTP
    s.sendall(frame(REQUEST, 5, struct.pack(">BBH", 255, 0, 2) + fields([(3, b"GET"), (F_TARGET, b"/nothing")])))
    t, fid, status, fl, body = read_frame(s)
    assert (t, fid, status) == (RESPONSE, 5, 404)
    s.close()
    assert Client(b).get("/version").status_code == 200

"""management.cacheDuration (5.2.34, 6.3.17): within a registration's
cacheDuration the same forwarded GET of /entities or /entities/{id} is not
sent again; the kept answer is used and the response carries NGSILD-Warning
110 "Response is Stale". A hub and a source (coraine processes), over HTTP
and over cor://."""

import time

import pytest

from conftest import Client, fresh_tenant
from ngsi import entity, free_port, prop, uid

COR_PORTS = {name: free_port() for name in ("hub", "src")}


def _broker(broker_factory, name, transport, *extra):
    flags = ["--brokerAlias", "cd-%s-%s" % (transport, name)] + list(extra)
    if transport == "cor":
        flags += ["--corPort", str(COR_PORTS[name])]
    return broker_factory(*flags)


@pytest.fixture(params=["http", "cor"])
def pair(request, broker_factory):
    t = request.param
    hub = Client(_broker(broker_factory, "hub", t), fresh_tenant())
    src = Client(_broker(broker_factory, "src", t), fresh_tenant())
    hub.ensure_tenant()
    src.ensure_tenant()
    hub.transport = t
    yield hub, src
    hub.close()
    src.close()


def register(hub, src, **mgmt):
    ep = src.broker.base if hub.transport == "http" else "cor://127.0.0.1:%d" % COR_PORTS["src"]
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": ep, "tenant": src.tenant}
    if mgmt:
        body["management"] = mgmt
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def sent(hub, rid):
    return hub.get("/csourceRegistrations/" + rid).json().get("timesSent", 0)


def speed(resp, eid):
    return [e for e in resp.json() if e["id"] == eid][0]["speed"]["value"]


def test_5_2_34_query_answered_from_the_cache_with_warning_110(pair):
    hub, src = pair
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(1)))
    rid = register(hub, src, cacheDuration="PT1.5S")
    r = hub.get("/entities", params={"type": "Vehicle"})
    assert r.status_code == 200 and speed(r, eid) == 1
    assert "NGSILD-Warning" not in r.headers
    n = sent(hub, rid)
    assert src.patch("/entities/%s/attrs" % eid, {"speed": prop(2)}).status_code == 204
    r = hub.get("/entities", params={"type": "Vehicle"})
    assert speed(r, eid) == 1                                         # the kept answer
    w = r.headers["NGSILD-Warning"]
    assert w.startswith("110 ") and rid in w and "Response is Stale" in w
    assert sent(hub, rid) == n                                        # nothing was sent
    # another request (other parameters) is not the same one
    r = hub.get("/entities", params={"type": "Vehicle", "q": "speed>0"})
    assert speed(r, eid) == 2 and "NGSILD-Warning" not in r.headers
    time.sleep(1.7)
    r = hub.get("/entities", params={"type": "Vehicle"})
    assert speed(r, eid) == 2 and "NGSILD-Warning" not in r.headers    # expired: asked again
    assert sent(hub, rid) == n + 2


def test_5_2_34_retrieve_answered_from_the_cache(pair):
    hub, src = pair
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(1)))
    register(hub, src, cacheDuration="PT30S")
    assert hub.get("/entities/" + eid).json()["speed"]["value"] == 1
    src.patch("/entities/%s/attrs" % eid, {"speed": prop(3)})
    r = hub.get("/entities/" + eid)
    assert r.json()["speed"]["value"] == 1 and r.headers["NGSILD-Warning"].startswith("110 ")
    # another request (attrs) is not the same one
    r = hub.get("/entities/" + eid, params={"attrs": "speed"})
    assert r.status_code == 200 and "NGSILD-Warning" not in r.headers and r.json()["speed"]["value"] == 3


def test_5_2_34_without_cache_duration_every_request_is_sent(pair):
    hub, src = pair
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(1)))
    rid = register(hub, src)
    hub.get("/entities", params={"type": "Vehicle"})
    src.patch("/entities/%s/attrs" % eid, {"speed": prop(2)})
    r = hub.get("/entities", params={"type": "Vehicle"})
    assert speed(r, eid) == 2 and "NGSILD-Warning" not in r.headers
    assert sent(hub, rid) == 2


def test_5_2_34_forward_cache_size_0_keeps_nothing(broker_factory):
    hub = Client(broker_factory("--brokerAlias", "cd-off", "--forwardCacheSize", "0"), fresh_tenant())
    src = Client(broker_factory("--brokerAlias", "cd-off-src"), fresh_tenant())
    try:
        eid = uid("Vehicle")
        src.create(entity(eid, "Vehicle", speed=prop(1)))
        r = hub.post("/csourceRegistrations", {
            "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": src.broker.base, "tenant": src.tenant, "management": {"cacheDuration": "PT30S"}})
        assert r.status_code == 201, r.text
        hub.get("/entities", params={"type": "Vehicle"})
        src.patch("/entities/%s/attrs" % eid, {"speed": prop(2)})
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert speed(r, eid) == 2 and "NGSILD-Warning" not in r.headers
    finally:
        hub.close()
        src.close()

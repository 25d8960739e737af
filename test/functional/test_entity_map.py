"""Entity maps (4.3.6.7, 4.5.25, 5.2.39, 5.5.14, 5.14, 6.4.3.2, 6.32, 6.34):
a paged distributed query with entityMap=true builds, from its first page,
the map of which entity lives where (here: "@none", or the registrations
whose sources returned it); the pages that name it in NGSILD-EntityMap ask
only the sources of their own entities, for those ids; the map can be read,
its expiry changed and deleted at /entityMaps/{id}; it expires. A hub and
two sources (coraine processes on loopback), over HTTP and over cor://."""

import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import assert_problem, entity, free_port, prop, uid

COR_PORTS = {name: free_port() for name in ("hub", "s1", "s2")}


def _broker(broker_factory, name, transport):
    # a generous timeout: under a sanitizer on a loaded machine a source must not drop out of a map
    flags = ["--brokerAlias", "em-%s-%s" % (transport, name), "--forwardTimeout", "15000"]
    if transport == "cor":
        flags += ["--corPort", str(COR_PORTS[name])]
    return broker_factory(*flags)


@pytest.fixture(params=["http", "cor"])
def trio(request, broker_factory):
    transport = request.param
    cs = []
    for name in ("hub", "s1", "s2"):
        c = Client(_broker(broker_factory, name, transport), fresh_tenant())
        c.ensure_tenant()
        cs.append(c)
    cs[0].transport = transport
    yield cs
    for c in cs:
        c.close()


def register(hub, src, name, etype="Vehicle"):
    ep = src.broker.base if hub.transport == "http" else "cor://127.0.0.1:%d" % COR_PORTS[name]
    r = hub.post("/csourceRegistrations", {
        "type": "ContextSourceRegistration", "information": [{"entities": [{"type": etype}]}],
        "endpoint": ep, "tenant": src.tenant})
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def sent(hub, rid):
    return hub.get("/csourceRegistrations/" + rid).json().get("timesSent", 0)


def fill(trio, etype="Vehicle", n_hub=2, n_src=5):
    hub, s1, s2 = trio
    made = {"hub": [], "s1": [], "s2": []}
    for c, key, n in ((hub, "hub", n_hub), (s1, "s1", n_src), (s2, "s2", n_src)):
        for i in range(n):
            eid = uid(etype)
            c.create(entity(eid, etype, speed=prop(i)))
            made[key].append(eid)
    r1 = register(hub, s1, "s1", etype)
    r2 = register(hub, s2, "s2", etype)
    return made, r1, r2


def page(hub, map_id=None, **params):
    headers = {"NGSILD-EntityMap": map_id} if map_id else None
    return hub.get("/entities", params=params, headers=headers)


# ---------------------------------------------------------------- paging (4.3.6.7, 5.5.14)

def test_4_3_6_7_paging_with_an_entity_map_asks_only_the_sources_of_each_page(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio)
    every = made["hub"] + made["s1"] + made["s2"]
    before = (sent(hub, r1), sent(hub, r2))
    r = page(hub, type="Vehicle", limit=4, entityMap="true", count="true")
    assert r.status_code == 201, r.text                      # Table 6.4.3.2-3: the map was created
    assert "NGSILD-Warning" not in r.headers, r.headers["NGSILD-Warning"]
    map_id = r.headers["NGSILD-EntityMap"]
    assert map_id.startswith("urn:ngsi-ld:EntityMap:")
    assert r.headers["NGSILD-Results-Count"] == "12"
    got = [e["id"] for e in r.json()]
    assert (sent(hub, r1), sent(hub, r2)) == (before[0] + 1, before[1] + 1)   # each source asked once
    # the map: local first, then the sources in registration order
    order = made["hub"] + made["s1"] + made["s2"]
    assert got == order[:4]
    calls = []
    for off in (4, 8):
        b = (sent(hub, r1), sent(hub, r2))
        r = page(hub, map_id, type="Vehicle", limit=4, offset=off, count="true")
        assert r.status_code == 200, r.text
        assert r.headers["NGSILD-EntityMap"] == map_id
        assert r.headers["NGSILD-Results-Count"] == "12"
        got += [e["id"] for e in r.json()]
        calls.append((sent(hub, r1) - b[0], sent(hub, r2) - b[1]))
    assert got == order and sorted(got) == sorted(every)
    # page 2 holds s1's last three and s2's first: both asked; page 3 only s2's: s1 not asked
    assert calls == [(1, 1), (0, 1)]
    # the entities are whole: the attributes came from the sources
    r = page(hub, map_id, type="Vehicle", limit=2, offset=2)
    assert [e["speed"]["value"] for e in r.json()] == [0, 1]


def test_4_3_6_7_without_an_entity_map_every_page_asks_every_source(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio)
    b = (sent(hub, r1), sent(hub, r2))
    for off in (0, 4, 8):
        assert page(hub, type="Vehicle", limit=4, offset=off).status_code == 200
    assert (sent(hub, r1) - b[0], sent(hub, r2) - b[1]) == (3, 3)


def test_4_3_6_7_an_entity_no_longer_matching_is_removed_from_the_map(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio)
    r = page(hub, type="Vehicle", q="speed<100", limit=4, entityMap="true")
    map_id = r.headers["NGSILD-EntityMap"]
    gone = made["s1"][3]                        # on the second page
    assert s1.patch("/entities/%s/attrs" % gone, {"speed": prop(500)}).status_code == 204
    r = page(hub, map_id, type="Vehicle", q="speed<100", limit=4, offset=4, count="true")
    assert r.status_code == 200, r.text
    ids = [e["id"] for e in r.json()]
    assert gone not in ids and len(ids) == 3    # positions are stable: the page is one short
    assert r.headers["NGSILD-Results-Count"] == "11"
    m = hub.get("/entityMaps/" + map_id).json()
    assert gone not in m["entityMap"] and len(m["entityMap"]) == 11
    # the next page is where it was
    r = page(hub, map_id, type="Vehicle", q="speed<100", limit=4, offset=8)
    assert [e["id"] for e in r.json()] == made["s2"][1:]


def test_5_2_39_the_map_names_where_each_entity_lives(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_src=2)
    split = made["s1"][0]                        # also held at the hub: a split entity
    hub.create(entity(split, "Vehicle", brand=prop("b")))
    r = page(hub, type="Vehicle", entityMap="true")
    assert r.status_code == 201, r.text
    merged = [e for e in r.json() if e["id"] == split][0]
    assert merged["brand"]["value"] == "b" and merged["speed"]["value"] == 0
    m = hub.get("/entityMaps/" + r.headers["NGSILD-EntityMap"])
    assert m.status_code == 200, m.text
    doc = m.json()
    assert doc["type"] == "EntityMap" and doc["id"] == r.headers["NGSILD-EntityMap"]
    assert doc["expiresAt"].endswith("Z")
    em = doc["entityMap"]
    assert em[made["hub"][0]] == ["@none"]
    assert em[split] == ["@none", r1]
    assert em[made["s2"][1]] == [r2]
    assert len(em) == 6
    # a later page through the map fetches the split entity from both places
    r = page(hub, r.headers["NGSILD-EntityMap"], type="Vehicle", limit=1, offset=0)
    assert r.json()[0]["id"] == made["hub"][0]


# ---------------------------------------------------------------- the resource (5.14.1-5.14.3, 6.32)

def test_6_32_patch_delete_and_errors(trio):
    hub, s1, s2 = trio
    fill(trio, n_src=1)
    r = page(hub, type="Vehicle", entityMap="true")
    map_id = r.headers["NGSILD-EntityMap"]
    r = hub.patch("/entityMaps/" + map_id, {"expiresAt": "2099-01-01T00:00:00Z"})
    assert r.status_code == 204, r.text
    exp = hub.get("/entityMaps/" + map_id).json()["expiresAt"]
    assert exp < "2099" and exp > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())   # at most 24 h on
    r = hub.patch("/entityMaps/" + map_id, {"expiresAt": "2030-01-01T00:00:00Z", "entityMap": {"x": []},
                                            "linkedMaps": {}, "type": "EntityMap"})
    assert r.status_code == 204, r.text        # output-only members ignored (5.14.2.4)
    assert_problem(hub.patch("/entityMaps/" + map_id, {"expiresAt": 5}), 400, "BadRequestData")
    assert_problem(hub.patch("/entityMaps/" + map_id, {"expiresAt": "tomorrow"}), 400, "BadRequestData")
    assert_problem(hub.patch("/entityMaps/" + map_id, {"colour": "red"}), 400, "BadRequestData")
    assert_problem(hub.patch("/entityMaps/" + map_id, {}), 400, "BadRequestData")
    assert_problem(hub.patch("/entityMaps/" + map_id, {"type": "Entity", "expiresAt": "2030-01-01T00:00:00Z"}),
                   400, "BadRequestData")
    assert_problem(hub.request("PATCH", "/entityMaps/" + map_id, data=b"[1",
                               ctype="application/json"), 400, "InvalidRequest")
    unknown = "urn:ngsi-ld:EntityMap:nosuch"
    assert_problem(hub.get("/entityMaps/" + unknown), 404, "ResourceNotFound")
    assert_problem(hub.patch("/entityMaps/" + unknown, {"expiresAt": "2030-01-01T00:00:00Z"}), 404,
                   "ResourceNotFound")
    assert_problem(hub.delete("/entityMaps/" + unknown), 404, "ResourceNotFound")
    assert_problem(hub.get("/entityMaps/not%20a%20uri"), 400, "BadRequestData")
    # another tenant does not see it
    assert_problem(hub.get("/entityMaps/" + map_id, tenant=fresh_tenant()), 404, "ResourceNotFound")
    assert hub.delete("/entityMaps/" + map_id).status_code == 204
    assert_problem(hub.get("/entityMaps/" + map_id), 404, "ResourceNotFound")
    # a query naming a deleted map makes a new one (5.5.14)
    r = page(hub, map_id, type="Vehicle")
    assert r.status_code == 201 and r.headers["NGSILD-EntityMap"] != map_id


def test_5_5_14_the_map_expires(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_src=1)
    r = page(hub, type="Vehicle", entityMap="true", entityMapLifetime="PT1S")
    map_id = r.headers["NGSILD-EntityMap"]
    assert hub.get("/entityMaps/" + map_id).status_code == 200
    time.sleep(1.3)
    assert_problem(hub.get("/entityMaps/" + map_id), 404, "ResourceNotFound")
    b = (sent(hub, r1), sent(hub, r2))
    r = page(hub, map_id, type="Vehicle", limit=1, offset=1)
    assert r.status_code == 201 and r.headers["NGSILD-EntityMap"] != map_id   # made anew: sources asked again
    assert (sent(hub, r1) - b[0], sent(hub, r2) - b[1]) == (1, 1)


def test_6_4_3_2_bad_entity_map_parameters(trio):
    hub = trio[0]
    assert_problem(page(hub, type="Vehicle", entityMap="maybe"), 400, "BadRequestData")
    assert_problem(page(hub, type="Vehicle", entityMap="true", entityMapLifetime="soon"), 400, "BadRequestData")
    assert_problem(page(hub, type="Vehicle", entityMap="true", entityMapLifetime="PT0S"), 400, "BadRequestData")


def test_6_34_create_entity_map_for_query_entities(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_src=2)
    r = hub.get("/entityMaps", params={"type": "Vehicle", "limit": 1})     # limit ignored (5.14.4.3)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert r.headers["NGSILD-EntityMap"] == doc["id"] and doc["type"] == "EntityMap"
    assert sorted(doc["entityMap"]) == sorted(made["hub"] + made["s1"] + made["s2"])
    r = hub.post("/entityMaps", {"type": "Query", "entities": [{"type": "Vehicle"}], "q": "speed==1"})
    assert r.status_code == 201, r.text
    assert sorted(r.json()["entityMap"]) == sorted([made["hub"][1], made["s1"][1], made["s2"][1]])
    # the map is usable by a query
    r2_ = page(hub, r.json()["id"], type="Vehicle", q="speed==1")
    assert r2_.status_code == 200 and len(r2_.json()) == 3
    assert_problem(hub.get("/entityMaps"), 400, "BadRequestData")          # too wide (5.14.4.4)


# ---------------------------------------------------------------- what is sent (HTTP only: a mock source)

def test_4_3_6_7_a_later_page_asks_the_source_for_its_ids_only(broker_factory):
    ents = [entity(uid("Vehicle"), "Vehicle", speed=prop(i)) for i in range(3)]
    m = MockSource(200, json.dumps(ents).encode())
    hub = Client(broker_factory("--brokerAlias", "em-mock"), fresh_tenant())
    try:
        r = hub.post("/csourceRegistrations", {"type": "ContextSourceRegistration",
                                               "information": [{"entities": [{"type": "Vehicle"}]}],
                                               "endpoint": m.base})
        assert r.status_code == 201, r.text
        r = page(hub, type="Vehicle", limit=1, entityMap="true")
        assert r.status_code == 201, r.text
        map_id = r.headers["NGSILD-EntityMap"]
        r = page(hub, map_id, type="Vehicle", limit=2, offset=1)
        assert [e["id"] for e in r.json()] == [ents[1]["id"], ents[2]["id"]]
        assert len(m.requests) == 2
        q = parse_qs(urlsplit(m.requests[1][1]).query)
        assert q["id"] == ["%s,%s" % (ents[1]["id"], ents[2]["id"])] and q["type"] == ["Vehicle"]
        assert "offset" not in q
    finally:
        hub.close()
        m.close()


# ---------------------------------------------------------------- local, bounds

def test_5_5_14_a_local_query_with_an_entity_map(broker_factory):
    c = Client(broker_factory(), fresh_tenant())
    ids = [uid("Boat") for _ in range(5)]
    for i, eid in enumerate(ids):
        c.create(entity(eid, "Boat", speed=prop(i)))
    r = c.get("/entities", params={"type": "Boat", "limit": 2, "entityMap": "true", "count": "true"})
    assert r.status_code == 201, r.text
    map_id = r.headers["NGSILD-EntityMap"]
    got = [e["id"] for e in r.json()]
    for off in (2, 4):
        r = c.get("/entities", params={"type": "Boat", "limit": 2, "offset": off},
                  headers={"NGSILD-EntityMap": map_id})
        assert r.status_code == 200 and r.headers["NGSILD-EntityMap"] == map_id
        got += [e["id"] for e in r.json()]
    assert sorted(got) == sorted(ids) and len(got) == 5
    # an entity created since is not in the map: the map fixes the entities (5.5.14)
    c.create(entity(uid("Boat"), "Boat"))
    r = c.get("/entities", params={"type": "Boat", "limit": 10, "count": "true"},
              headers={"NGSILD-EntityMap": "/ngsi-ld/v1/entityMaps/" + map_id})      # its location works too
    assert len(r.json()) == 5 and r.headers["NGSILD-Results-Count"] == "5"
    doc = c.get("/entityMaps/" + map_id).json()
    assert all(v == ["@none"] for v in doc["entityMap"].values())


def test_entity_map_bounds(broker_factory):
    c = Client(broker_factory("--entityMapMax", "2", "--entityMapEntries", "7"), fresh_tenant())
    for i in range(3):
        c.create(entity(uid("Boat"), "Boat", speed=prop(i)))
    maps = [c.get("/entities", params={"type": "Boat", "entityMap": "true"}).headers["NGSILD-EntityMap"]
            for _ in range(2)]
    assert all(c.get("/entityMaps/" + m).status_code == 200 for m in maps)
    third = c.get("/entities", params={"type": "Boat", "entityMap": "true"}).headers["NGSILD-EntityMap"]
    # at most two maps and seven ids: the soonest to expire went
    assert c.get("/entityMaps/" + maps[0]).status_code == 404
    assert c.get("/entityMaps/" + third).status_code == 200
    for _ in range(5):
        c.create(entity(uid("Boat"), "Boat"))
    r = c.get("/entities", params={"type": "Boat", "entityMap": "true"})     # eight: too many to hold
    assert r.status_code == 200 and "NGSILD-EntityMap" not in r.headers and len(r.json()) == 8
    assert_problem(c.get("/entityMaps", params={"type": "Boat"}), 403, "TooManyResults")


# ---------------------------------------------------------------- the sources' own maps (5.14.4.4, linkedMaps)

def test_5_14_4_4_the_sources_maps_are_linked_and_follow_patch_and_delete(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_src=2)
    r = page(hub, type="Vehicle", entityMap="true", entityMapLifetime="PT60S")
    map_id = r.headers["NGSILD-EntityMap"]
    linked = hub.get("/entityMaps/" + map_id).json()["linkedMaps"]
    assert sorted(linked) == sorted([r1, r2])
    at_s1 = s1.get("/entityMaps/" + linked[r1])
    assert at_s1.status_code == 200, at_s1.text
    assert sorted(at_s1.json()["entityMap"]) == sorted(made["s1"])
    assert hub.patch("/entityMaps/" + map_id, {"expiresAt": "2030-01-01T00:00:00Z"}).status_code == 204
    assert s1.get("/entityMaps/" + linked[r1]).json()["expiresAt"] == hub.get("/entityMaps/" + map_id).json()["expiresAt"]
    assert hub.delete("/entityMaps/" + map_id).status_code == 204
    assert s1.get("/entityMaps/" + linked[r1]).status_code == 404
    assert s2.get("/entityMaps/" + linked[r2]).status_code == 404


def test_5_14_4_4_a_registration_without_the_map_operations_is_not_asked_for_a_map(trio):
    hub, s1, s2 = trio
    eid = uid("Bus")
    s1.create(entity(eid, "Bus", speed=prop(1)))
    ep = s1.broker.base if hub.transport == "http" else "cor://127.0.0.1:%d" % COR_PORTS["s1"]
    r = hub.post("/csourceRegistrations", {"type": "ContextSourceRegistration", "operations": ["retrieveOps"],
                                           "information": [{"entities": [{"type": "Bus"}]}],
                                           "endpoint": ep, "tenant": s1.tenant})
    assert r.status_code == 201, r.text
    r = page(hub, type="Bus", entityMap="true")
    assert r.status_code == 201 and [e["id"] for e in r.json()] == [eid]
    doc = hub.get("/entityMaps/" + r.headers["NGSILD-EntityMap"]).json()
    assert doc["linkedMaps"] == {} and len(doc["entityMap"][eid]) == 1


def test_5_5_14_a_source_that_refuses_entity_map_is_asked_again_without(broker_factory):
    import http.server
    import threading
    ents = [entity(uid("Vehicle"), "Vehicle", speed=prop(i)) for i in range(2)]
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.path)
            refuse = "entityMap" in self.path
            body = json.dumps({"type": "https://uri.etsi.org/ngsi-ld/errors/BadRequestData", "title": "no",
                               "detail": "unknown parameter"} if refuse else ents).encode()
            self.send_response(400 if refuse else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    hub = Client(broker_factory("--brokerAlias", "em-strict"), fresh_tenant())
    try:
        r = hub.post("/csourceRegistrations", {"type": "ContextSourceRegistration",
                                               "information": [{"entities": [{"type": "Vehicle"}]}],
                                               "endpoint": "http://127.0.0.1:%d" % srv.server_address[1]})
        assert r.status_code == 201, r.text
        r = page(hub, type="Vehicle", entityMap="true")
        assert r.status_code == 201, r.text
        assert sorted(e["id"] for e in r.json()) == sorted(e["id"] for e in ents)
        assert "NGSILD-Warning" not in r.headers
        assert len(seen) == 2 and "entityMap=true" in seen[0] and "entityMap" not in seen[1]
    finally:
        hub.close()
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------- retrieve through a map (5.7.1.4, Table 6.5.3.1-2)

def test_5_7_1_4_a_retrieve_with_an_entity_map_asks_only_the_sources_it_lists(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_hub=1, n_src=2)
    r = page(hub, type="Vehicle", limit=10, entityMap="true")
    assert r.status_code == 201, r.text
    map_id = r.headers["NGSILD-EntityMap"]
    eid = made["s1"][0]
    before = (sent(hub, r1), sent(hub, r2))
    r = hub.get("/entities/" + eid, headers={"NGSILD-EntityMap": map_id})
    assert r.status_code == 200, r.text
    assert r.json()["speed"]["value"] == 0
    assert r.headers["NGSILD-EntityMap"] == map_id
    assert (sent(hub, r1), sent(hub, r2)) == (before[0] + 1, before[1])     # s2 is not asked
    # an entity the map lists here only: nobody is asked
    before = (sent(hub, r1), sent(hub, r2))
    r = hub.get("/entities/" + made["hub"][0], headers={"NGSILD-EntityMap": "/ngsi-ld/v1/entityMaps/" + map_id})
    assert r.status_code == 200, r.text
    assert (sent(hub, r1), sent(hub, r2)) == before
    # an entity the map does not list: no source holds it for this map
    other = uid("Vehicle")
    s2.create(entity(other, "Vehicle", speed=prop(9)))
    assert hub.get("/entities/" + other, headers={"NGSILD-EntityMap": map_id}).status_code == 404
    assert hub.get("/entities/" + other).status_code == 200                  # without the map: found at s2


def test_5_7_1_4_a_retrieve_with_entity_map_true_makes_a_map_of_the_entity(trio):
    hub, s1, s2 = trio
    made, r1, r2 = fill(trio, n_hub=0, n_src=1)
    eid = made["s2"][0]
    r = hub.get("/entities/" + eid, params={"entityMap": "true", "entityMapLifetime": "PT60S"})
    assert r.status_code == 200, r.text
    map_id = r.headers["NGSILD-EntityMap"]
    m = hub.get("/entityMaps/" + map_id).json()
    assert m["entityMap"] == {eid: [r2]}
    # an unknown (or expired) map named: a new one is made (5.7.1.4)
    r = hub.get("/entities/" + eid, headers={"NGSILD-EntityMap": "urn:ngsi-ld:EntityMap:gone"})
    assert r.status_code == 200, r.text
    assert r.headers["NGSILD-EntityMap"] not in ("urn:ngsi-ld:EntityMap:gone", map_id)
    assert_problem(hub.get("/entities/" + eid, params={"entityMap": "maybe"}), 400, "BadRequestData")


# ---------------------------------------------------------------- kept over a restart (corDB on disk)

def test_5_2_39_entity_maps_survive_a_killed_hub_on_db_dir(broker_factory, tmp_path):
    hub = Client(broker_factory("--brokerAlias", "em-disk-hub", "--dbDir", str(tmp_path / "hub")), fresh_tenant())
    hub.ensure_tenant()
    hub.transport = "http"
    s1 = Client(_broker(broker_factory, "s1", "http"), fresh_tenant())
    s2 = Client(_broker(broker_factory, "s2", "http"), fresh_tenant())
    s1.ensure_tenant()
    s2.ensure_tenant()
    made, r1, r2 = fill((hub, s1, s2), n_hub=1, n_src=2)
    r = page(hub, type="Vehicle", limit=2, entityMap="true", entityMapLifetime="PT600S")
    assert r.status_code == 201, r.text
    map_id = r.headers["NGSILD-EntityMap"]
    before = hub.get("/entityMaps/" + map_id).json()
    short = page(hub, type="Vehicle", limit=2, entityMap="true", entityMapLifetime="PT1S").headers["NGSILD-EntityMap"]
    gone = page(hub, type="Vehicle", limit=2, entityMap="true").headers["NGSILD-EntityMap"]
    assert hub.delete("/entityMaps/" + gone).status_code == 204
    time.sleep(0.5)                                  # the log reaches the file (--dbSync interval)
    hub.broker.proc.kill()                           # SIGKILL: no shutdown
    hub.broker.proc.wait()
    time.sleep(1.0)                                  # `short` expires meanwhile
    hub.broker.start()
    after = hub.get("/entityMaps/" + map_id)
    assert after.status_code == 200, after.text
    assert after.json() == before
    assert hub.get("/entityMaps/" + short).status_code == 404
    assert hub.get("/entityMaps/" + gone).status_code == 404
    # the map still pages: only the sources of the page's entities are asked
    b = (sent(hub, r1), sent(hub, r2))
    r = page(hub, map_id, type="Vehicle", limit=2, offset=3)
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == made["s2"]
    assert (sent(hub, r1) - b[0], sent(hub, r2) - b[1]) == (0, 1)
    # and a retrieve through it
    r = hub.get("/entities/" + made["s1"][1], headers={"NGSILD-EntityMap": map_id})
    assert r.status_code == 200 and r.headers["NGSILD-EntityMap"] == map_id
    for c in (hub, s1, s2):
        c.close()

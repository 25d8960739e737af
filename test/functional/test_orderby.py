"""Entity ordering (4.23; orderBy, collation, orderFrom, orderGeometry of
Table 6.4.3.2-1 and 5.7.2.4; the Query member ordering, OrderingParams of
5.2.43), as GET /entities and POST /entityOperations/query."""

import time

from ngsi import assert_problem, entity, point, prop, uid


def ids(r):
    assert r.status_code == 200, r.text
    return [e["id"] for e in r.json()]


def buildings(cli):
    """ETSI 019_19's shape: created in the order 2, 1, 3."""
    pre = uid("x")[-6:]
    b = {i: "urn:ngsi-ld:Building:%s-%d" % (pre, i) for i in (1, 2, 3)}
    for i in (2, 1, 3):
        cli.create(entity(b[i], "Building", name=prop("ABC"[i - 1], subProperty=prop(i))))
        time.sleep(0.002)
    return b


def q(cli, order, **kw):
    return ids(cli.get("/entities", params=dict({"type": "Building", "orderBy": order}, **kw)))


def test_4_23_3_order_by_attribute_member_and_direction(cli):
    b = buildings(cli)
    asc, desc, created = [b[1], b[2], b[3]], [b[3], b[2], b[1]], [b[2], b[1], b[3]]
    assert q(cli, "name") == asc
    assert q(cli, "id") == asc
    assert q(cli, "createdAt") == created
    assert q(cli, "name.createdAt") == created
    assert q(cli, "name.subProperty") == asc
    assert q(cli, "name;asc") == asc
    assert q(cli, "name;desc") == desc
    assert q(cli, "type,name") == asc
    assert q(cli, "type;asc,name.subProperty;desc,name;asc") == desc
    assert q(cli, "modifiedAt;desc") == [b[3], b[1], b[2]]


def test_4_23_3_several_terms_in_sequence(cli):
    for i, (n, age) in enumerate([("b", 2), ("a", 9), ("b", 1), ("a", 3)]):
        cli.create(entity("urn:ngsi-ld:P:%d" % i, "P", name=prop(n), age=prop(age)))
    got = ids(cli.get("/entities", params={"type": "P", "orderBy": "name,age;desc"}))
    assert got == ["urn:ngsi-ld:P:1", "urn:ngsi-ld:P:3", "urn:ngsi-ld:P:0", "urn:ngsi-ld:P:2"]


def test_4_23_2_mixed_data_types_and_absent_last(cli):
    vals = {"num": prop(5), "str": prop("x"), "obj": prop({"a": 1}), "arr": prop([1, 2]), "bool": prop(True),
            "time": prop({"@type": "Time", "@value": "10:00:00Z"}),
            "date": prop({"@type": "Date", "@value": "2020-01-01"}),
            "dt": prop({"@type": "DateTime", "@value": "2020-01-01T00:00:00Z"})}
    order = ["num", "str", "obj", "arr", "bool", "time", "date", "dt"]
    for k in reversed(order):
        cli.create(entity("urn:ngsi-ld:M:" + k, "M", v=vals[k]))
    cli.create(entity("urn:ngsi-ld:M:none", "M", other=prop(1)))
    got = ids(cli.get("/entities", params={"type": "M", "orderBy": "v"}))
    assert got == ["urn:ngsi-ld:M:" + k for k in order] + ["urn:ngsi-ld:M:none"]
    got = ids(cli.get("/entities", params={"type": "M", "orderBy": "v;desc"}))
    assert got == ["urn:ngsi-ld:M:" + k for k in reversed(order)] + ["urn:ngsi-ld:M:none"]


def test_4_23_3_trailing_path_into_a_compound_value(cli):
    for i, city in enumerate(["Madrid", "Berlin", "Oslo"]):
        cli.create(entity("urn:ngsi-ld:A:%d" % i, "A", address=prop({"city": city, "n": 3 - i})))
    assert ids(cli.get("/entities", params={"type": "A", "orderBy": "address[city]"})) == \
        ["urn:ngsi-ld:A:1", "urn:ngsi-ld:A:0", "urn:ngsi-ld:A:2"]
    assert ids(cli.get("/entities", params={"type": "A", "orderBy": "address[n]"})) == \
        ["urn:ngsi-ld:A:2", "urn:ngsi-ld:A:1", "urn:ngsi-ld:A:0"]


def test_4_23_1_collation_root_by_default_and_as_asked(cli):
    for i, n in enumerate(["b", "B", "a", "Ä", "z"]):
        cli.create(entity("urn:ngsi-ld:C:%d" % i, "C", name=prop(n)))
    root = [e["name"]["value"] for e in cli.get("/entities", params={"type": "C", "orderBy": "name"}).json()]
    assert root == ["a", "Ä", "b", "B", "z"]          # ICU root: not code point order
    r = cli.get("/entities", params={"type": "C", "orderBy": "name", "collation": "de-u-co-phonebk"})
    assert r.status_code == 200, r.text
    assert_problem(cli.get("/entities", params={"type": "C", "orderBy": "name", "collation": "not a tag!"}),
                   400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "C", "collation": "und"}), 400, "BadRequestData")


def test_4_23_1_order_by_distance(cli):
    cli.create(entity("urn:ngsi-ld:G:far", "G", location=point(10, 50)))
    cli.create(entity("urn:ngsi-ld:G:near", "G", location=point(8.1, 40.1)))
    cli.create(entity("urn:ngsi-ld:G:mid", "G", location=point(9, 45)))
    cli.create(entity("urn:ngsi-ld:G:none", "G", name=prop("x")))
    got = ids(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-asc", "orderFrom": "[8,40]"}))
    assert got == ["urn:ngsi-ld:G:near", "urn:ngsi-ld:G:mid", "urn:ngsi-ld:G:far", "urn:ngsi-ld:G:none"]
    got = ids(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-desc", "orderFrom": "[8,40]"}))
    assert got == ["urn:ngsi-ld:G:far", "urn:ngsi-ld:G:mid", "urn:ngsi-ld:G:near", "urn:ngsi-ld:G:none"]
    got = ids(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-asc",
                                           "orderFrom": "[[10,50],[10,51]]", "orderGeometry": "LineString"}))
    assert got[0] == "urn:ngsi-ld:G:far"
    # 5.7.2.4: by distance without a location
    assert_problem(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-asc"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-asc", "orderFrom": "[8]"}),
                   400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "G", "orderBy": "location;dist-asc", "orderFrom": "[8,40]",
                                                "orderGeometry": "GeometryCollection"}), 400, "BadRequestData")


def test_4_23_3_syntax_errors_are_400(cli):
    buildings(cli)
    for bad in ("", "name;up", "name;", ",name", "name,", "a==1", "name{x}", "id;dist-asc", "a b"):
        assert_problem(cli.get("/entities", params={"type": "Building", "orderBy": bad}), 400, "BadRequestData")


def test_4_23_pagination_and_count_follow_the_order(cli):
    ents = [entity("urn:ngsi-ld:N:%03d" % i, "N", v=prop((i * 37) % 100)) for i in range(100)]
    cli.batch_create(ents)
    expect = [e["id"] for e in sorted(ents, key=lambda e: (-e["v"]["value"], e["id"]))]
    got, offset = [], 0
    while True:
        r = cli.get("/entities", params={"type": "N", "orderBy": "v;desc", "limit": 7, "offset": offset,
                                         "count": "true"})
        assert r.headers["NGSILD-Results-Count"] == "100"
        page = ids(r)
        got += page
        if "next" not in r.headers.get("Link", ""):
            break
        offset += 7
    assert got == expect
    r = cli.get("/entities", params={"type": "N", "orderBy": "v", "limit": 0, "count": "true"})
    assert r.status_code == 200 and r.json() == [] and r.headers["NGSILD-Results-Count"] == "100"
    assert ids(cli.get("/entities", params={"type": "N", "orderBy": "v", "offset": 98})) == [expect[1], expect[0]]


def test_5_2_43_query_member_ordering(cli):
    b = buildings(cli)
    body = {"type": "Query", "entities": [{"type": "Building"}], "ordering": {"orderBy": ["name;desc"]}}
    assert ids(cli.post("/entityOperations/query", body)) == [b[3], b[2], b[1]]
    body["ordering"] = {"orderBy": ["type", "name.subProperty"], "collation": "und"}
    assert ids(cli.post("/entityOperations/query", body)) == [b[1], b[2], b[3]]
    body["ordering"] = {"orderBy": ["name"], "color": "red"}
    assert_problem(cli.post("/entityOperations/query", body), 400, "BadRequestData")
    body["ordering"] = {"orderBy": []}
    assert_problem(cli.post("/entityOperations/query", body), 400, "BadRequestData")


def test_5_7_2_4_order_by_is_honoured_without_local_while_nothing_is_forwarded(cli):
    b = buildings(cli)
    assert q(cli, "name;desc", local="true") == [b[3], b[2], b[1]]
    assert q(cli, "name;desc") == [b[3], b[2], b[1]]


def test_4_23_order_by_with_join_and_projection(cli):
    b = buildings(cli)
    r = cli.get("/entities", params={"type": "Building", "orderBy": "name;desc", "pick": "id", "join": "flat"})
    assert r.json() == [{"id": b[3]}, {"id": b[2]}, {"id": b[1]}]


def test_4_23_order_by_while_entities_change(cli):
    """Writers replace and delete entities while ordered queries run: every
    page is sorted, no request fails (the heap holds references across the
    scan's pauses)."""
    import threading
    ents = [entity("urn:ngsi-ld:W:%04d" % i, "W", v=prop(i % 97)) for i in range(600)]
    for k in range(0, 600, 200):
        cli.batch_create(ents[k:k + 200])
    errors = []

    def write():
        from conftest import Client
        c = Client(cli.broker, cli.tenant)
        for i in range(150):
            eid = "urn:ngsi-ld:W:%04d" % ((i * 7) % 600)
            r = c.patch("/entities/" + eid, {"v": prop((i * 13) % 97)})
            if r.status_code not in (204, 404):
                errors.append(r.status_code)
        c.close()

    def read():
        from conftest import Client
        c = Client(cli.broker, cli.tenant)
        for _ in range(40):
            r = c.get("/entities", params={"type": "W", "orderBy": "v;desc,id", "limit": 50, "count": "true"})
            if r.status_code != 200:
                errors.append(r.status_code)
                continue
            vals = [(-e["v"]["value"], e["id"]) for e in r.json()]
            if vals != sorted(vals):
                errors.append("unsorted")
        c.close()

    ts = [threading.Thread(target=write), threading.Thread(target=read), threading.Thread(target=read)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors[:5]

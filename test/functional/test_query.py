"""Query Entities, GET /entities (6.4.3.2, behaviour 5.7.2): type selection
(4.17), id, idPattern, q (4.9), geo-queries (4.10), scopeQ (4.19), lang (4.15),
attrs/pick/omit (4.21), format, count (6.3.13), pagination (4.12, 6.3.10),
local, GeoJSON, parameter errors (6.3.20); Purge Entities, DELETE /entities
(6.4.3.3, behaviour 5.6.21)."""

import pytest

from conftest import Client, fresh_tenant
from ngsi import (assert_json_equal, assert_problem, entity, geo, ids_of, langprop, media_type,
                  point, prop, rel, uid)

V1, V2, V3 = "urn:ngsi-ld:Vehicle:1", "urn:ngsi-ld:Vehicle:2", "urn:ngsi-ld:Vehicle:3"
B1, H1, C1 = "urn:ngsi-ld:Bike:1", "urn:ngsi-ld:House:1", "urn:ngsi-ld:Car:1"
HOUSE = [[[9.9, 49.9], [10.1, 49.9], [10.1, 50.1], [9.9, 50.1], [9.9, 49.9]]]
SMALL = [[[9.95, 49.95], [10.05, 49.95], [10.05, 50.05], [9.95, 50.05], [9.95, 49.95]]]

DATA = [
    entity(V1, "Vehicle",
           speed=prop(80, unitCode="KMH", observedAt="2024-01-01T10:00:00Z", accuracy=prop(0.5)),
           brand=prop("Mercedes"), color=prop(["red", "blue"]), location=point(10, 50),
           isParked=rel("urn:ngsi-ld:Park:1"),
           address=prop({"city": "Berlin", "street": "X", "geo": {"zip": "10115"}}),
           purchased=prop("2024-03-01"), lastSeen=prop("2024-05-01T12:00:00Z"), opens=prop("08:30:00Z"),
           active=prop(True), name=langprop({"en": "Car one", "de": "Auto eins"}),
           scope="/Madrid/Gardens/ParqueNorte"),
    entity(V2, "Vehicle", speed=prop(40), brand=prop("BMW"), color=prop("black"),
           location=point(10.01, 50), parking=point(30, 30),
           address=prop({"city": "Madrid"}), purchased=prop("2023-01-15"),
           lastSeen=prop("2024-05-01T08:00:00Z"), opens=prop("10:00:00Z"), active=prop(False),
           scope="/Madrid/Sights/ParqueNorte"),
    entity(V3, ["Vehicle", "Car"], speed=prop(120), brand=prop("Audi"), location=point(20, 60), scope="/CompanyA"),
    entity(B1, "Bike", speed=prop(20), location=point(10, 50.001)),
    entity(H1, "House", location=geo("Polygon", HOUSE), rooms=prop(3)),
    entity(C1, "Car", speed=prop(100)),
]
ALL = sorted([V1, V2, V3, B1, H1, C1])


@pytest.fixture(scope="module")
def q(broker_factory):
    """A tenant holding DATA, shared read-only by the query tests of this module."""
    c = Client(broker_factory(), fresh_tenant())
    c.batch_create(DATA)
    yield c
    c.close()


def query(c, **params):
    r = c.get("/entities", params=params)
    assert r.status_code == 200, "GET /entities %r: %d %s" % (params, r.status_code, r.text[:300])
    return r.json()


def qids(c, **params):
    return ids_of(query(c, **params))


# ---- 4.17 type selection -----------------------------------------------------------

@pytest.mark.parametrize("sel,expected", [
    ("Vehicle", [V1, V2, V3]),
    ("Bike", [B1]),
    ("Vehicle,Bike", [V1, V2, V3, B1]),
    ("Vehicle|Bike", [V1, V2, V3, B1]),
    ("(Vehicle;Car)", [V3]),
    ("(Vehicle;Car)|Bike", [V3, B1]),
    ("(Vehicle;Car),House", [V3, H1]),
    ("Car", [V3, C1]),
    ("Nothing", []),
    ("https://uri.etsi.org/ngsi-ld/default-context/Bike", [B1]),
])
def test_4_17_type_selection(q, sel, expected):
    assert qids(q, type=sel) == sorted(expected)


def test_4_17_invalid_type_selection_is_400(q):
    for bad in ["(Vehicle;Car", "Vehicle;;Car", "Veh icle", ""]:
        assert_problem(q.get("/entities", params={"type": bad}), 400, "BadRequestData")


# ---- id, idPattern -----------------------------------------------------------------

def test_6_4_3_2_id_list(q):
    assert qids(q, type="Vehicle,Bike", id=V1 + "," + B1) == sorted([V1, B1])
    assert qids(q, type="Bike", id=V1) == []


def test_6_4_3_2_invalid_id_is_400(q):
    assert_problem(q.get("/entities", params={"type": "Vehicle", "id": "not a uri"}), 400, "BadRequestData")


def test_6_4_3_2_id_pattern(q):
    assert qids(q, type="Vehicle", idPattern="Vehicle:[12]$") == [V1, V2]
    assert qids(q, idPattern="^urn:ngsi-ld:(Bike|House)", local="true") == [B1, H1]


def test_6_4_3_2_invalid_id_pattern_is_400(q):
    assert_problem(q.get("/entities", params={"type": "Vehicle", "idPattern": "(["}), 400, "BadRequestData")


# ---- 4.9 q -----------------------------------------------------------------------------

@pytest.mark.parametrize("expr,expected", [
    ("speed>50", [V1, V3]),
    ("speed>=80", [V1, V3]),
    ("speed<80", [V2]),
    ("speed<=40", [V2]),
    ("speed==40", [V2]),
    ("speed!=40", [V1, V3]),
    ("speed==30..90", [V1, V2]),
    ("speed!=30..90", [V3]),
    ("speed==40,120", [V2, V3]),
    ("speed!=40,120", [V1]),
    ("speed==80.0", [V1]),
    ("speed>7.9e1", [V1, V3]),
    ('brand=="Mercedes"', [V1]),
    ('brand!="Mercedes"', [V2, V3]),
    ('brand=="BMW","Audi"', [V2, V3]),
    ('brand>"Audi"', [V1, V2]),
    ('brand=="A".."C"', [V2, V3]),
    ("brand~=^M", [V1]),
    ("brand!~=^M", [V2, V3]),
    ("brand~=(?i)^merc", [V1]),
    ('color=="red"', [V1]),
    ('color=="black","red"', [V1, V2]),
    ('color!="red"', [V2]),
    ('isParked=="urn:ngsi-ld:Park:1"', [V1]),
    ("isParked==urn:ngsi-ld:Park:1", [V1]),
    ("isParked", [V1]),
    ("parking", [V2]),
    ("active==true", [V1]),
    ("active==false", [V2]),
    ("active!=true", [V2]),
    ('speed=="80"', []),          # 4.9: different data types never match
    ("brand>5", []),
    ('isParked>"a"', []),         # 4.9: a Relationship with an order operator never matches
    ("speed.observedAt>=2023-12-31T00:00:00Z", [V1]),
    ("speed.accuracy==0.5", [V1]),
    ("speed.unitCode==\"KMH\"", [V1]),
    ('address[city]=="Berlin"', [V1]),
    ('address[city]!="Berlin"', [V2]),
    ('address[geo.zip]=="10115"', [V1]),
    ("address[geo.nope]", []),
    ("purchased>2024-01-01", [V1]),
    ("purchased==2023-01-01..2023-12-31", [V2]),
    ("lastSeen>2024-05-01T10:00:00Z", [V1]),
    ("lastSeen==2024-05-01T07:00:00Z..2024-05-01T09:00:00Z", [V2]),
    ("opens<09:00:00Z", [V1]),
    ('speed>50;brand=="Mercedes"', [V1]),
    ('speed<50|brand=="Audi"', [V2, V3]),
    ('brand=="BMW"|speed>100;brand=="Audi"', [V2, V3]),        # AND binds tighter than OR
    ('brand=="Mercedes"|speed>100;brand=="BMW"', [V1]),
    ('(brand=="BMW"|brand=="Mercedes");speed>50', [V1]),
    ('((speed>50|speed<30);brand=="Mercedes")', [V1]),
    ('(speed>=20;speed<=40)|speed>=120', [V2, V3]),
    ('name[en]=="Car one"', [V1]),
    ('name[de]=="Car one"', []),
    ('name=="Auto eins"', [V1]),
])
def test_4_9_q(q, expr, expected):
    assert qids(q, type="Vehicle", q=expr) == sorted(expected)


def test_4_9_q_alone_is_enough(q):
    assert qids(q, q="speed>90") == sorted([V3, C1])
    assert qids(q, q="rooms") == [H1]


@pytest.mark.parametrize("bad", ["speed>>5", "speed==", "(speed>5", "speed>5)", "speed>5;", "==5",
                                 "speed=5", 'brand=="unterminated', "sp eed>1", "speed>5||speed<3"])
def test_4_9_invalid_q_is_400(q, bad):
    assert_problem(q.get("/entities", params={"type": "Vehicle", "q": bad}), 400, "BadRequestData")


def test_4_9_q_with_user_context(cli, vctx):
    cli.create(entity("urn:ngsi-ld:Vehicle:ctx", "Vehicle", speed=prop(99)), link=vctx)
    r = cli.get("/entities", params={"type": "Vehicle", "q": "speed>90"}, link=vctx)
    assert ids_of(r.json()) == ["urn:ngsi-ld:Vehicle:ctx"]
    r = cli.get("/entities", params={"q": "speed>90"})
    assert r.json() == []


# ---- 4.10 geo ------------------------------------------------------------------------

def geoq(c, georel, geometry, coordinates, **kw):
    return qids(c, georel=georel, geometry=geometry, coordinates=coordinates, **kw)


def test_4_10_near_max_distance(q):
    assert geoq(q, "near;maxDistance==1000", "Point", "[10,50]", type="Vehicle,Bike") == sorted([V1, V2, B1])
    assert geoq(q, "near;maxDistance==500", "Point", "[10,50]", type="Vehicle,Bike") == sorted([V1, B1])
    assert geoq(q, "near;maxDistance==50", "Point", "[10,50]", type="Vehicle,Bike") == [V1]


def test_4_10_near_min_distance(q):
    assert geoq(q, "near;minDistance==500", "Point", "[10,50]", type="Vehicle,Bike") == sorted([V2, V3])


def test_4_10_geo_alone_is_enough(q):
    assert geoq(q, "near;maxDistance==200", "Point", "[10,50]") == sorted([V1, B1, H1])


def test_4_10_within(q):
    assert geoq(q, "within", "Polygon", str(SMALL).replace(" ", "")) == sorted([V1, V2, B1])


def test_4_10_contains(q):
    assert geoq(q, "contains", "Point", "[10,50]", type="House") == [H1]
    assert geoq(q, "contains", "Point", "[30,30]", type="House") == []


def test_4_10_intersects(q):
    assert geoq(q, "intersects", "Polygon", str(SMALL).replace(" ", ""), type="House,Vehicle") == sorted([V1, V2, H1])
    assert geoq(q, "intersects", "LineString", "[[9,49],[11,51]]", type="House") == [H1]


def test_4_10_overlaps(q):
    over = [[[10.05, 50.05], [10.2, 50.05], [10.2, 50.2], [10.05, 50.2], [10.05, 50.05]]]
    assert geoq(q, "overlaps", "Polygon", str(over).replace(" ", ""), type="House,Vehicle") == [H1]


def test_4_10_equals(q):
    assert geoq(q, "equals", "Point", "[10,50]", type="Vehicle,Bike") == [V1]
    assert geoq(q, "equals", "Polygon", str(HOUSE).replace(" ", ""), type="House") == [H1]


def test_4_10_disjoint(q):
    assert geoq(q, "disjoint", "Polygon", str(SMALL).replace(" ", ""), type="Vehicle,House,Bike") == [V3]


def test_4_10_geoproperty(q):
    assert geoq(q, "near;maxDistance==100", "Point", "[30,30]", geoproperty="parking") == [V2]
    assert geoq(q, "near;maxDistance==100", "Point", "[30,30]") == []


@pytest.mark.parametrize("params", [
    {"georel": "near", "geometry": "Point", "coordinates": "[10,50]"},
    {"georel": "near;maxDistance==0", "geometry": "Point", "coordinates": "[10,50]"},
    {"georel": "near;maxDistance==-5", "geometry": "Point", "coordinates": "[10,50]"},
    {"georel": "nearby;maxDistance==5", "geometry": "Point", "coordinates": "[10,50]"},
    {"georel": "within", "geometry": "Circle", "coordinates": "[10,50]"},
    {"georel": "within", "geometry": "GeometryCollection", "coordinates": "[10,50]"},
    {"georel": "within", "geometry": "Polygon", "coordinates": "[10,50]"},
    {"georel": "within", "geometry": "Point", "coordinates": "ten,fifty"},
    {"georel": "within", "geometry": "Point"},
    {"georel": "within", "coordinates": "[10,50]"},
    {"geometry": "Point", "coordinates": "[10,50]"},
])
def test_4_10_invalid_geoquery_is_400(q, params):
    assert_problem(q.get("/entities", params=dict(params, type="Vehicle")), 400, "BadRequestData")


# ---- 4.19 scopeQ --------------------------------------------------------------------

@pytest.mark.parametrize("sq,expected", [
    ("/Madrid/Gardens/ParqueNorte", [V1]),
    ("/Madrid/#", [V1, V2]),
    ("/Madrid/+/ParqueNorte", [V1, V2]),
    ("/Madrid", []),
    ("/CompanyA", [V3]),
    ("/#", [V1, V2, V3]),
    ("/CompanyA,/Madrid/Sights/ParqueNorte", [V2, V3]),
    ("/CompanyA|/Madrid/Sights/#", [V2, V3]),
    ("(/CompanyA;/Madrid/#)", []),
])
def test_4_19_scope_q(q, sq, expected):
    assert qids(q, type="Vehicle", scopeQ=sq) == sorted(expected)


@pytest.mark.parametrize("bad", ["/Ma drid", "(/A;/B", "/A//B", "/A/#/B"])
def test_4_19_invalid_scope_q_is_400(q, bad):
    # (a scope without its leading '/' is left out: the ABNF requires it, but
    # example 5 of 4.19 writes "CompanyB" without it)
    assert_problem(q.get("/entities", params={"type": "Vehicle", "scopeQ": bad}), 400, "BadRequestData")


# ---- projection, format, lang ------------------------------------------------------

def test_6_4_3_2_attrs_matches_and_projects(q):
    got = query(q, type="Vehicle,Bike", attrs="brand")
    assert_json_equal(sorted(got, key=lambda e: e["id"]), [
        entity(V1, "Vehicle", brand=prop("Mercedes")),
        entity(V2, "Vehicle", brand=prop("BMW")),
        entity(V3, ["Vehicle", "Car"], brand=prop("Audi")),
    ], unordered=True)
    assert qids(q, attrs="rooms") == [H1]


def test_4_21_pick_and_omit_on_query(q):
    got = query(q, type="Bike", pick="id,speed")
    assert_json_equal(got, [{"id": B1, "speed": prop(20)}])
    got = query(q, type="Bike", omit="location,type")
    assert_json_equal(got, [{"id": B1, "speed": prop(20)}])


def test_4_5_4_key_values_on_query(q):
    assert_json_equal(query(q, type="Bike", format="keyValues"),
                      [{"id": B1, "type": "Bike", "speed": 20, "location": {"type": "Point", "coordinates": [10, 50.001]}}])


def test_4_15_lang_on_query(q):
    got = query(q, type="Vehicle", id=V1, lang="de", pick="name")
    assert_json_equal(got, [{"name": {"type": "Property", "value": "Auto eins", "lang": "de"}}])


def test_6_3_15_geojson_feature_collection(q):
    r = q.get("/entities", params={"type": "Bike,House"}, accept="application/geo+json")
    assert r.status_code == 200
    assert media_type(r) == "application/geo+json"
    fc = r.json()
    assert fc["type"] == "FeatureCollection"
    feats = {f["id"]: f for f in fc["features"]}
    assert sorted(feats) == [B1, H1]
    assert feats[B1]["type"] == "Feature"
    assert feats[B1]["geometry"] == {"type": "Point", "coordinates": [10, 50.001]}
    assert feats[H1]["geometry"] == {"type": "Polygon", "coordinates": HOUSE}
    assert feats[H1]["properties"]["rooms"] == prop(3)


# ---- 6.3.13 count, 4.12 / 6.3.10 pagination -----------------------------------------

def test_6_3_13_count(q):
    r = q.get("/entities", params={"type": "Vehicle", "count": "true"})
    assert r.headers.get("NGSILD-Results-Count") == "3"
    r = q.get("/entities", params={"type": "Vehicle", "count": "true", "limit": "1"})
    assert len(r.json()) == 1
    assert r.headers.get("NGSILD-Results-Count") == "3"
    r = q.get("/entities", params={"type": "Vehicle"})
    assert "NGSILD-Results-Count" not in r.headers


def test_6_3_13_limit_zero_with_count(q):
    r = q.get("/entities", params={"type": "Vehicle", "count": "true", "limit": "0"})
    assert r.status_code == 200
    assert r.json() == []
    assert r.headers.get("NGSILD-Results-Count") == "3"


def test_6_3_13_limit_zero_without_count_is_400(q):
    assert_problem(q.get("/entities", params={"type": "Vehicle", "limit": "0"}), 400, "BadRequestData")


@pytest.mark.parametrize("params", [{"limit": "-1"}, {"limit": "abc"}, {"offset": "-1"}, {"offset": "x"},
                                    {"count": "maybe"}, {"local": "perhaps"}])
def test_6_3_10_invalid_paging_values_are_400(q, params):
    assert_problem(q.get("/entities", params=dict(params, type="Vehicle")), 400, "BadRequestData")


def test_4_12_limit_above_maximum_is_too_many_results(q):
    """4.12 suggests TooManyResults for queries beyond the hard limit; 6.3.2 maps it to 403."""
    assert_problem(q.get("/entities", params={"type": "Vehicle", "limit": "1001"}), 403, "TooManyResults")
    assert q.get("/entities", params={"type": "Vehicle", "limit": "1000"}).status_code == 200


def test_4_12_max_limit_flag(broker_factory, make_client):
    c = make_client(broker_factory("--maxLimit", "5"))
    c.ensure_tenant()
    assert c.get("/entities", params={"type": "Seed", "limit": "5"}).status_code == 200
    assert_problem(c.get("/entities", params={"type": "Seed", "limit": "6"}), 403, "TooManyResults")


def page_links(r):
    return {k: v["url"] for k, v in r.links.items()}, r.headers.get("Link", "")


def test_6_3_10_pagination_links(q):
    sel = {"type": "Vehicle,Bike,House,Car"}
    r = q.get("/entities", params=dict(sel, limit="2"))
    first = ids_of(r.json())
    assert len(first) == 2
    links, raw = page_links(r)
    assert "next" in links and "prev" not in links, raw
    assert 'type="application/json"' in raw.replace(" ", "") or "type=application/json" in raw.replace(" ", "")
    seen = list(first)
    url = links["next"]
    pages = 1
    while url:
        r = q.get(url if url.startswith("http") else url)
        assert r.status_code == 200, r.text
        ids = ids_of(r.json())
        seen += ids
        links, raw = page_links(r)
        assert "prev" in links, raw
        url = links.get("next")
        pages += 1
        assert pages < 10
    assert pages == 3
    assert sorted(seen) == ALL


def test_6_3_10_offset(q):
    everything = [e["id"] for e in query(q, type="Vehicle,Bike,House,Car")]
    assert sorted(everything) == ALL
    assert [e["id"] for e in query(q, type="Vehicle,Bike,House,Car", offset="2", limit="2")] == everything[2:4]
    r = q.get("/entities", params={"type": "Vehicle,Bike,House,Car", "offset": "2", "limit": "2"})
    links, raw = page_links(r)
    assert "next" in links and "prev" in links, raw
    r = q.get("/entities", params={"type": "Vehicle,Bike,House,Car", "offset": "4", "limit": "2"})
    links, raw = page_links(r)
    assert "next" not in links and "prev" in links, raw


def test_5_5_9_default_limit_is_20(cli):
    cli.batch_create([entity("urn:ngsi-ld:Many:%02d" % i, "Many") for i in range(25)])
    r = cli.get("/entities", params={"type": "Many", "count": "true"})
    assert len(r.json()) == 20
    assert r.headers.get("NGSILD-Results-Count") == "25"
    assert "next" in r.links


# ---- too wide, local, unknown parameters ----------------------------------------------

def test_5_7_2_4_query_without_filter_is_400(q):
    assert_problem(q.get("/entities"), 400, "BadRequestData")


def test_5_7_2_4_id_alone_is_too_wide(q):
    """Table 6.4.3.2-1 read literally: id is not one of type/attrs/q/geo."""
    assert_problem(q.get("/entities", params={"id": V1}), 400, "BadRequestData")


def test_5_5_13_local_true_allows_a_query_without_filter(q):
    assert qids(q, local="true") == ALL


def test_6_4_3_2_type_star_lists_all(q):
    assert qids(q, type="*") == ALL


def test_6_3_20_unknown_parameter_is_400(q):
    """6.3.20: parameters incompatible with the operation -> InvalidRequest."""
    assert_problem(q.get("/entities", params={"type": "Vehicle", "bogus": "1"}), 400, "InvalidRequest")
    assert_problem(q.get("/entities", params={"type": "Vehicle", "options": "bogus"}), 400, "InvalidRequest")


def test_5_7_2_4_geometry_property_without_geojson_is_400(q):
    assert_problem(q.get("/entities", params={"type": "Vehicle", "geometryProperty": "location"}),
                   400, "BadRequestData")


# ---- 6.4.3.3 purge ------------------------------------------------------------------------

def test_6_4_3_3_purge_by_type(cli):
    cli.batch_create([entity("urn:ngsi-ld:P:%d" % i, "P", a=prop(i)) for i in range(5)]
                     + [entity("urn:ngsi-ld:K:1", "K")])
    r = cli.delete("/entities", params={"type": "P"})
    assert r.status_code == 204, r.text
    assert cli.get("/entities", params={"type": "P"}).json() == []
    assert ids_of(cli.get("/entities", params={"type": "K"}).json()) == ["urn:ngsi-ld:K:1"]


def test_6_4_3_3_purge_with_q(cli):
    cli.batch_create([entity("urn:ngsi-ld:P:%d" % i, "P", a=prop(i)) for i in range(5)])
    assert cli.delete("/entities", params={"type": "P", "q": "a>=3"}).status_code == 204
    assert ids_of(cli.get("/entities", params={"type": "P"}).json()) == ["urn:ngsi-ld:P:0", "urn:ngsi-ld:P:1",
                                                                         "urn:ngsi-ld:P:2"]


def test_6_4_3_3_purge_drop_and_keep(cli):
    cli.batch_create([entity("urn:ngsi-ld:P:1", "P", a=prop(1), b=prop(2), c=prop(3)),
                      entity("urn:ngsi-ld:Q:1", "Q", a=prop(1), b=prop(2), c=prop(3))])
    assert cli.delete("/entities", params={"type": "P", "drop": "a"}).status_code == 204
    assert_json_equal(cli.entity("urn:ngsi-ld:P:1"), entity("urn:ngsi-ld:P:1", "P", b=prop(2), c=prop(3)))
    assert cli.delete("/entities", params={"type": "Q", "keep": "a"}).status_code == 204
    assert_json_equal(cli.entity("urn:ngsi-ld:Q:1"), entity("urn:ngsi-ld:Q:1", "Q", a=prop(1)))


def test_5_6_21_purge_without_filter_is_400(cli):
    cli.ensure_tenant()
    assert_problem(cli.delete("/entities"), 400, "BadRequestData")
    assert_problem(cli.delete("/entities", params={"type": "P", "q": "a>>1"}), 400, "BadRequestData")


def test_4_10_degenerate_line_query_is_evaluated_and_entity_line_is_safe(cli):
    """4.10, 5.7.2.4: a query LineString whose points are all equal is
    syntactically valid: it is evaluated (on its made-valid copy, a point); an
    entity holding one still answers near-queries (found by fuzz_geo: GEOS's
    prepared nearest points crashed on it)."""
    eid = uid()
    cli.create(entity(eid, "Deg", location={"type": "GeoProperty",
                                           "value": {"type": "LineString", "coordinates": [[1, 1], [1, 1]]}}))
    r = cli.get("/entities", params={"type": "Deg", "georel": "near;maxDistance==100000", "geometry": "LineString",
                                     "coordinates": "[[1,1.5],[2,2]]"})
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == [eid]
    for dist, found in (("1000", []), ("100000", [eid])):
        r = cli.get("/entities", params={"type": "Deg", "georel": "near;maxDistance==" + dist,
                                         "geometry": "LineString", "coordinates": "[[1,1.5],[1,1.5]]"})
        assert r.status_code == 200, r.text
        assert [e["id"] for e in r.json()] == found

"""Geo-queries across the antimeridian (4.10, RFC 7946 3.1.9): an edge whose
ends are more than 180 degrees of longitude apart takes the shorter way, across
+-180; such reference and entity geometries are evaluated cut there, and near
measures great-circle distances across it. The GeoJSON stays as stored."""

import json

import pytest

from conftest import Client, fresh_tenant
from ngsi import entity, geo, ids_of, point

E_EAST = "urn:ngsi-ld:Ship:east"        # 179.5, 0: just west of the antimeridian
E_WEST = "urn:ngsi-ld:Ship:west"        # -179.5, 0: just east of it
E_FAR = "urn:ngsi-ld:Ship:far"          # 0, 0: the other side of the globe
E_ZONE = "urn:ngsi-ld:Zone:fiji"        # a polygon across the antimeridian
E_CUT = "urn:ngsi-ld:Zone:cut"          # the same zone, stored cut at +-180 (RFC 7946 3.1.9)
E_LINE = "urn:ngsi-ld:Route:dateline"   # a line across it

ACROSS = [[[179, 10], [-179, 10], [-179, -10], [179, -10], [179, 10]]]
CUT = [[[[179, 10], [180, 10], [180, -10], [179, -10], [179, 10]]],
       [[[-180, 10], [-179, 10], [-179, -10], [-180, -10], [-180, 10]]]]
DATA = [
    entity(E_EAST, "Ship", location=point(179.5, 0)),
    entity(E_WEST, "Ship", location=point(-179.5, 0)),
    entity(E_FAR, "Ship", location=point(0, 0)),
    entity(E_ZONE, "Zone", location=geo("Polygon", ACROSS)),
    entity(E_CUT, "Zone", location=geo("MultiPolygon", CUT)),
    entity(E_LINE, "Route", location=geo("LineString", [[178, 5], [-178, 5]])),
]


@pytest.fixture(scope="module")
def am(broker_factory):
    c = Client(broker_factory(), fresh_tenant())
    c.batch_create(DATA)
    yield c
    c.close()


def gq(c, georel, geometry, coordinates, type_="Ship,Zone,Route"):
    r = c.get("/entities", params={"type": type_, "georel": georel, "geometry": geometry,
                                   "coordinates": json.dumps(coordinates)})
    assert r.status_code == 200, r.text[:300]
    return ids_of(r.json())


def test_4_10_within_reference_across_antimeridian(am):
    assert gq(am, "within", "Polygon", ACROSS, "Ship") == sorted([E_EAST, E_WEST])


def test_4_10_within_cut_reference_is_the_same(am):
    assert gq(am, "within", "MultiPolygon", CUT, "Ship") == sorted([E_EAST, E_WEST])


def test_4_10_intersects_reference_across_antimeridian(am):
    assert gq(am, "intersects", "Polygon", ACROSS) == sorted([E_EAST, E_WEST, E_ZONE, E_CUT, E_LINE])


def test_4_10_intersects_entity_across_antimeridian(am):
    # a small box east of 180 meets the stored zones and the line, no ship
    box = [[[-179.8, 4], [-179.2, 4], [-179.2, 6], [-179.8, 6], [-179.8, 4]]]
    assert gq(am, "intersects", "Polygon", box) == sorted([E_ZONE, E_CUT, E_LINE])


def test_4_10_contains_point_in_entity_across_antimeridian(am):
    assert gq(am, "contains", "Point", [-179.9, 1], "Zone") == sorted([E_ZONE, E_CUT])
    assert gq(am, "contains", "Point", [0, 1], "Zone") == []


def test_4_10_disjoint_across_antimeridian(am):
    assert gq(am, "disjoint", "Polygon", ACROSS) == [E_FAR]


def test_4_10_near_max_distance_across_antimeridian(am):
    # 179.5 and -179.5 on the equator are 1 degree (about 111 km) apart
    assert gq(am, "near;maxDistance==120000", "Point", [179.5, 0], "Ship") == sorted([E_EAST, E_WEST])
    assert gq(am, "near;maxDistance==120000", "Point", [-179.9, 0], "Ship") == sorted([E_EAST, E_WEST])


def test_4_10_near_min_distance_across_antimeridian(am):
    assert gq(am, "near;minDistance==120000", "Point", [179.5, 0], "Ship") == [E_FAR]


def test_4_10_near_polygon_reference_across_antimeridian(am):
    # a polygon just west of 180: the ship at -179.5 is about 55 km away
    box = [[[179, -1], [180, -1], [180, 1], [179, 1], [179, -1]]]
    assert gq(am, "near;maxDistance==60000", "Polygon", box, "Ship") == sorted([E_EAST, E_WEST])
    # a line ending at 179.9: the ship at -179.5 is 0.6 degrees (about 67 km) away
    assert gq(am, "near;maxDistance==70000", "LineString", [[179, 0], [179.9, 0]], "Ship") == \
        sorted([E_EAST, E_WEST])
    assert gq(am, "near;maxDistance==60000", "LineString", [[179, 0], [179.9, 0]], "Ship") == [E_EAST]


def test_4_10_near_entity_line_across_antimeridian(am):
    assert gq(am, "near;maxDistance==20000", "Point", [179.95, 5.1], "Route") == [E_LINE]


def test_4_10_equals_across_antimeridian(am):
    # the polygon across 180 and its cut MultiPolygon are the same geometry
    assert gq(am, "equals", "Polygon", ACROSS, "Zone") == sorted([E_ZONE, E_CUT])
    assert gq(am, "equals", "MultiPolygon", CUT, "Zone") == sorted([E_ZONE, E_CUT])


def test_4_10_exactly_180_apart_is_not_a_crossing(am):
    # an edge from -90 to 90 is taken as written (through 0), not across 180
    band = [[[-90, -1], [90, -1], [90, 1], [-90, 1], [-90, -1]]]
    assert gq(am, "within", "Polygon", band, "Ship") == [E_FAR]


def test_4_10_output_stays_as_stored(am):
    r = am.get("/entities/" + E_ZONE)
    assert r.status_code == 200
    assert r.json()["location"]["value"]["coordinates"] == ACROSS

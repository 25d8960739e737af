"""Requests and their answers (issue 11): how the query string is decoded,
which error each malformed request gets and in which order the checks run
(6.3.20, 6.3.2, 5.5.4), JSON-LD keywords where an IRI is needed, the
@context of a batch (6.3.5), Purge with local=true (5.6.21)."""

import json

import requests

from ngsi import (API, DEFAULT_VOCAB, assert_problem, assert_problem_body, entity, geo, ids_of, langprop, point, prop,
                  rel, uid)


def raw_get(cli, path_and_query, **headers):
    """GET with the query string exactly as written (no re-encoding)."""
    h = {"NGSILD-Tenant": cli.tenant} if cli.tenant else {}
    h.update(headers)
    return requests.get(cli.broker.base + API + path_and_query, headers=h, timeout=10)


# ---- query strings are form-decoded ------------------------------------------

def test_query_string_plus_is_a_space(cli):
    """The query string is application/x-www-form-urlencoded as every client
    library writes it: '+' is a space, %2B a plus."""
    a, b = uid("Plus"), uid("Plus")
    cli.create(entity(a, "T", name=prop("a b")))
    cli.create(entity(b, "T", name=prop("a+b")))
    r = raw_get(cli, '/entities?type=T&q=name=="a+b"')
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == [a]
    r = raw_get(cli, '/entities?type=T&q=name=="a%2Bb"')
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == [b]


def test_query_string_time_offset_needs_2B(cli):
    """4.9 DateTimes with an offset: %2B01:00 is the offset, '+' would be a space."""
    eid = uid("Time")
    cli.create(entity(eid, "T", seen=prop({"@type": "DateTime", "@value": "2024-01-01T10:00:00Z"})))
    r = raw_get(cli, "/entities?type=T&q=seen==2024-01-01T11:00:00%2B01:00")
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == [eid]
    assert_problem(raw_get(cli, "/entities?type=T&q=seen==2024-01-01T11:00:00+01:00"), 400, "BadRequestData")


def test_query_string_next_link_keeps_a_plus(cli):
    """A next link percent-encodes the values again: a plus stays a plus."""
    for _ in range(3):
        cli.create(entity(uid("Lnk"), "T", name=prop("a+b")))
    r = raw_get(cli, '/entities?type=T&q=name=="a%2Bb"&limit=1')
    assert r.status_code == 200 and len(r.json()) == 1, r.text
    nxt = r.links["next"]["url"]
    assert "%2B" in nxt
    r2 = requests.get(cli.broker.base + nxt, headers={"NGSILD-Tenant": cli.tenant}, timeout=10)
    assert r2.status_code == 200 and len(r2.json()) == 1, r2.text


# ---- 6.3.20: unknown parameters first ----------------------------------------

def test_6_3_20_unknown_parameter_before_the_body(cli):
    """An unknown parameter is InvalidRequest before the body is looked at
    (here a JSON string, not an entity: that alone would be BadRequestData)."""
    r = cli.request("POST", "/entities", data=b'"not an entity"', params={"invalidParams": "x"},
                    ctype="application/json")
    assert_problem(r, 400, "InvalidRequest")
    r = cli.request("POST", "/entityOperations/create", data=b'{}', params={"invalidParams": "x"},
                    ctype="application/json")
    assert_problem(r, 400, "InvalidRequest")
    r = cli.request("PATCH", "/entities/%s/attrs" % uid(), data=b'[]', params={"invalidParams": "x"},
                    ctype="application/json")
    assert_problem(r, 400, "InvalidRequest")


def test_6_3_20_unknown_parameter_before_the_too_wide_query_rule(cli):
    """GET /entities without type/attrs/q/geo is BadRequestData; with an
    unknown parameter it is InvalidRequest first."""
    assert_problem(cli.get("/entities"), 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"invalidParams": "x"}), 400, "InvalidRequest")
    assert_problem(cli.get("/entities", params={"invalidParams": "x", "type": "T"}), 400, "InvalidRequest")


def test_6_3_20_unknown_parameter_on_purge(cli):
    """DELETE /entities without a selection is BadRequestData; an unknown
    parameter is InvalidRequest first, and nothing is purged."""
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.delete("/entities", params={"invalidParams": "x"}), 400, "InvalidRequest")
    assert_problem(cli.delete("/entities", params={"invalidParams": "x", "type": "T"}), 400, "InvalidRequest")
    assert cli.get("/entities/" + eid).status_code == 200


def test_6_3_20_unknown_parameter_on_every_entity_operation(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    bad = {"bogus": "1"}
    body = {"a": prop(2)}
    for method, path, b in [("GET", "/entities/" + eid, None), ("DELETE", "/entities/" + eid, None),
                            ("PATCH", "/entities/" + eid, body), ("PUT", "/entities/" + eid, entity(eid, "T")),
                            ("POST", "/entities/%s/attrs" % eid, body), ("PATCH", "/entities/%s/attrs" % eid, body),
                            ("PATCH", "/entities/%s/attrs/a" % eid, prop(3)), ("PUT", "/entities/%s/attrs/a" % eid, prop(3)),
                            ("DELETE", "/entities/%s/attrs/a" % eid, None),
                            ("POST", "/entityOperations/upsert", [entity(eid, "T")]),
                            ("POST", "/entityOperations/delete", [eid]),
                            ("POST", "/entityOperations/query", {"type": "Query", "entities": [{"type": "T"}]})]:
        assert_problem(cli.request(method, path, json_body=b, params=bad), 400, "InvalidRequest")
    assert cli.entity(eid)["a"]["value"] == 1


def test_6_3_7_unsupported_format_is_invalid_request(cli):
    """An unsupported format value is refused like an unsupported options value (6.3.20)."""
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.get("/entities/" + eid, params={"format": "invalidFormat"}), 400, "InvalidRequest")
    assert_problem(cli.get("/entities", params={"type": "T", "format": "x"}), 400, "InvalidRequest")
    assert_problem(cli.patch("/entities/" + eid, {"a": prop(1)}, params={"format": "x"}), 400, "InvalidRequest")


# ---- 6.3.2: an empty entity id in a path ------------------------------------------

def test_6_3_2_empty_entity_id_in_path_is_bad_request_data(cli):
    """/entities//attrs/x names the attribute of an entity with an empty id:
    a bad id (BadRequestData), not an unknown resource."""
    assert_problem(cli.delete("/entities//attrs/name"), 400, "BadRequestData")
    assert_problem(cli.patch("/entities//attrs/name", prop(1)), 400, "BadRequestData")
    assert_problem(cli.patch("/entities//attrs", {"name": prop(1)}), 400, "BadRequestData")
    assert_problem(cli.post("/entities//attrs", {"name": prop(1)}), 400, "BadRequestData")
    # a literal segment is never empty: an unknown path
    assert_problem(cli.get(API + "//entities?type=T"), 404, "ResourceNotFound")


def test_6_3_2_patch_put_on_entities_collection_is_405(cli):
    """PATCH /entities/ (a merge without an id) is a wrong verb on the
    collection: 405 with Allow (6.3.2), as ../shared/etsi/DISPUTED.md decides."""
    for m in ("PATCH", "PUT"):
        r = cli.request(m, API + "/entities/", json_body={"name": prop(1)})
        assert r.status_code == 405, r.text
        assert set(x.strip() for x in r.headers["Allow"].split(",")) == {"GET", "POST", "DELETE"}


# ---- 4.6.2: a type or attribute name that expands to a JSON-LD keyword ----------------

def test_4_6_2_type_expanding_to_keyword_is_400(cli):
    """"type": "type" expands to @type with the core @context: no IRI, no entity type."""
    eid = uid()
    body = entity(eid, "type")
    body["@context"] = ["https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]
    assert_problem(cli.post("/entities", body, ctype="application/ld+json"), 400, "BadRequestData")
    assert_problem(cli.post("/entities", entity(eid, ["T", "id"])), 400, "BadRequestData")
    assert cli.get("/entities/" + eid).status_code == 404


def test_4_6_2_attribute_name_expanding_to_keyword_is_400(cli):
    """A user @context that maps a term to a keyword: not an attribute name."""
    eid = uid()
    body = entity(eid, "T", alias=prop(1))
    body["@context"] = [{"alias": "@value"},
                        "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]
    assert_problem(cli.post("/entities", body, ctype="application/ld+json"), 400, "BadRequestData")
    body = entity(eid, "T")
    body["@context"] = [{"Kw": "@graph"}, "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]
    body["type"] = "Kw"
    assert_problem(cli.post("/entities", body, ctype="application/ld+json"), 400, "BadRequestData")


# ---- 6.3.5: the @context of a batch -------------------------------------------------

CORE = "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"


def test_6_3_5_batch_with_two_contexts_is_400(cli, vctx):
    """application/ld+json with a JSON-LD Link header: the request as a whole
    is malformed (6.3.5), not each of its entities; nothing is written."""
    ents = [dict(entity(uid(), "Vehicle"), **{"@context": CORE}) for _ in range(2)]
    for op in ("create", "upsert", "update", "merge"):
        r = cli.post("/entityOperations/" + op, ents, ctype="application/ld+json", link=vctx)
        assert_problem(r, 400, "BadRequestData")
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "T"}], "@context": CORE},
                 ctype="application/ld+json", link=vctx)
    assert_problem(r, 400, "BadRequestData")
    for e in ents:
        assert cli.get("/entities/" + e["id"]).status_code == 404


def test_6_3_5_batch_whose_context_cannot_be_had_is_207(cli, ctxserver):
    """A Link to a @context that cannot be downloaded: each entity fails with
    LdContextNotAvailable, in a 207 BatchOperationResult."""
    url = ctxserver.url("/missing-%s.jsonld" % uid("C").split(":")[-1])
    ids = [uid(), uid()]
    r = cli.post("/entityOperations/create", [entity(i, "Vehicle") for i in ids], link=url)
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["success"] == []
    assert sorted(e["entityId"] for e in body["errors"]) == sorted(ids)
    for e in body["errors"]:
        assert_problem_body(e["error"], "LdContextNotAvailable")
    # ld+json: each entity its own @context; only the one that cannot be had fails
    good, bad = uid(), uid()
    ents = [dict(entity(good, "Vehicle"), **{"@context": CORE}), dict(entity(bad, "Vehicle"), **{"@context": url})]
    r = cli.post("/entityOperations/create", ents, ctype="application/ld+json")
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["success"] == [good]
    assert [e["entityId"] for e in body["errors"]] == [bad]
    assert_problem_body(body["errors"][0]["error"], "LdContextNotAvailable")


# ---- 5.6.21: Purge Entities ------------------------------------------------------

def test_5_6_21_purge_local_true_removes_the_tenants_entities(cli, make_client, broker):
    """local=true is one of the inputs of 5.6.21.4 (e): alone, it purges every
    entity of the tenant, and only of that tenant."""
    other = make_client(broker)
    keep = uid()
    other.create(entity(keep, "Building"))
    ids = [uid(), uid(), uid()]
    for i, t in zip(ids, ("Building", "Building", "Car")):
        cli.create(entity(i, t, name=prop("x")))
    r = cli.delete("/entities", params={"local": "true"})
    assert r.status_code == 204, r.text
    for i in ids:
        assert cli.get("/entities/" + i).status_code == 404
    assert other.get("/entities/" + keep).status_code == 200
    assert_problem(cli.delete("/entities", params={"local": "false"}), 400, "BadRequestData")
    assert_problem(cli.delete("/entities", params={"type": "*", "local": "false"}), 400, "BadRequestData")


def test_5_6_21_purge_q_with_a_space(cli):
    """q=name=="Eiffel Tower" as a client library writes it (the space a '+')."""
    a, b = uid(), uid()
    cli.create(entity(a, "Building", name=prop("Eiffel Tower")))
    cli.create(entity(b, "Building", name=prop("Big Ben")))
    h = {"NGSILD-Tenant": cli.tenant}
    r = requests.delete(cli.broker.base + API + "/entities", params={"q": 'name=="Eiffel Tower"'}, headers=h,
                        timeout=10)
    assert "+" in r.request.url
    assert r.status_code == 204, r.text
    assert cli.get("/entities/" + a).status_code == 404
    assert cli.get("/entities/" + b).status_code == 200


# ---- 5.7.2.4: every syntactically valid geometry -------------------------------

BOWTIE = [[[0, 0], [2, 2], [2, 0], [0, 2], [0, 0]]]


def geo_count(cli, georel, geometry, coords):
    r = cli.get("/entities", params={"type": "Spot", "georel": georel, "geometry": geometry,
                                    "coordinates": json.dumps(coords), "count": "true"})
    assert r.status_code == 200, r.text
    return sorted(e["id"] for e in r.json())


def test_5_7_2_4_self_intersecting_polygon_is_evaluated(cli):
    """A self-intersecting reference polygon is evaluated on its made-valid
    copy (two triangles here); equals compares exactly (any ring start)."""
    left, right, between, tie = uid("L"), uid("R"), uid("B"), uid("T")
    cli.create(entity(left, "Spot", location=point(0.3, 1)))
    cli.create(entity(right, "Spot", location=point(1.7, 1)))
    cli.create(entity(between, "Spot", location=point(1, 0.3)))
    cli.create(entity(tie, "Spot", location=geo("Polygon", [[[2, 2], [2, 0], [0, 2], [0, 0], [2, 2]]])))
    # the entity's bow-tie too: invalid for GEOS, it is matched on its made-valid copy
    assert geo_count(cli, "within", "Polygon", BOWTIE) == sorted([left, right, tie])
    assert geo_count(cli, "intersects", "Polygon", BOWTIE) == sorted([left, right, tie])
    assert geo_count(cli, "disjoint", "Polygon", BOWTIE) == [between]
    assert geo_count(cli, "equals", "Polygon", BOWTIE) == [tie]
    # the same through POST /entityOperations/query
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Spot"}],
                                             "geoQ": {"georel": "within", "geometry": "Polygon",
                                                      "coordinates": BOWTIE}})
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == sorted([left, right, tie])


# ---- 5.5.7: compact IRIs ------------------------------------------------------------

def test_5_5_7_compaction_writes_a_compact_iri(cli, ctxserver):
    """An attribute created with the core @context (default vocab), read with
    a @context that gives "almostFull" another IRI: the @vocab suffix is
    taken, so the name is the compact IRI ngsi-ld:default-context/almostFull
    (JSON-LD 1.1 IRI compaction), which reads back as the same attribute."""
    url = ctxserver.unique({"@context": {"almostFull": "https://suite.example/ctx#almostFull",
                                         "name": "https://suite.example/ctx#name"}})
    eid = uid()
    cli.create(entity(eid, "Building", almostFull=prop(False), name=prop("x")))
    e = cli.entity(eid, link=url)
    assert "ngsi-ld:default-context/almostFull" in e, e
    assert "ngsi-ld:default-context/name" in e, e
    assert "almostFull" not in e
    # the compact IRI is a name the broker takes back, in attrs and writes
    r = cli.get("/entities", params={"type": "Building", "attrs": "ngsi-ld:default-context/almostFull"},
                link=url)
    assert r.status_code == 200 and ids_of(r.json()) == [eid], r.text
    assert "ngsi-ld:default-context/name" not in r.json()[0]
    r = cli.patch("/entities/%s/attrs" % eid, {"ngsi-ld:default-context/almostFull": prop(True)}, link=url)
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["almostFull"]["value"] is True
    # without the other @context: the plain term
    assert "almostFull" in cli.entity(eid)


# ---- 5.2.6: objectType with several types; 5.6.17.4: merge with lang -------------------

def test_5_2_6_object_type_lists_several_types(cli, vctx):
    """objectType is a String or an array of them (5.2.6): kept, compacted,
    duplicates once, queryable (any of the types)."""
    eid, other = uid(), uid()
    cli.create(entity(eid, "T", owner=rel("urn:ngsi-ld:P:1", objectType=["Person", "Company", "Person"])))
    cli.create(entity(other, "T", owner=rel("urn:ngsi-ld:P:2", objectType="Company")))
    assert cli.entity(eid)["owner"]["objectType"] == ["Person", "Company"]
    assert cli.entity(other)["owner"]["objectType"] == "Company"
    r = cli.get("/entities/" + eid, params={"format": "concise"})
    assert r.json()["owner"]["objectType"] == ["Person", "Company"]
    # a user @context compacts each type
    cli.create(entity(uid(), "Vehicle", isParked=rel("urn:ngsi-ld:P:3", objectType=["Car", "Vehicle"])), link=vctx)
    r = cli.get("/entities", params={"type": "Vehicle"}, link=vctx)
    assert r.json()[0]["isParked"]["objectType"] == ["Car", "Vehicle"]
    r = cli.get("/entities", params={"type": "https://example.org/Vehicle"})
    assert r.json()[0]["https://example.org/isParked"]["objectType"] == ["https://example.org/Car", "https://example.org/Vehicle"]
    # q on the objectType member: any of the types
    r = cli.get("/entities", params={"type": "T", "q": 'owner.objectType=="%sPerson"' % DEFAULT_VOCAB})
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == [eid]
    r = cli.get("/entities", params={"type": "T", "q": 'owner.objectType=="%sCompany"' % DEFAULT_VOCAB})
    assert ids_of(r.json()) == sorted([eid, other])
    # merge replaces the list
    assert cli.patch("/entities/" + eid, {"owner": rel("urn:ngsi-ld:P:1", objectType="Robot")}).status_code == 204
    assert cli.entity(eid)["owner"]["objectType"] == "Robot"
    for bad in ([], ["A", 1], "", ["type"]):
        assert_problem(cli.post("/entities", entity(uid(), "T", owner=rel("urn:ngsi-ld:P:1", objectType=bad))),
                       400, "BadRequestData")


def test_5_6_17_4_merge_lang_with_texts_in_any_representation(cli):
    """With ?lang=, a text given bare, concise or normalized (with
    sub-attributes), or as an array of strings, becomes that language's
    entry: the other languages of the languageMap are kept."""
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Car", "de": "Auto"}), motto=langprop({"en": "Go"})))
    r = cli.patch("/entities/" + eid, {"name": prop("Voiture", observedAt="2024-01-01T00:00:00Z"),
                                       "motto": {"value": ["Allez", "Vas-y"]}}, params={"lang": "fr"})
    assert r.status_code == 204, r.text
    e = cli.entity(eid)
    assert e["name"] == langprop({"en": "Car", "de": "Auto", "fr": "Voiture"}, observedAt="2024-01-01T00:00:00Z")
    assert e["motto"] == langprop({"en": "Go", "fr": ["Allez", "Vas-y"]})
    # keyValues with lang
    r = cli.patch("/entities/" + eid, {"name": "Coche"}, params={"lang": "es", "format": "keyValues"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["name"]["languageMap"]["es"] == "Coche"
    # a number is no text: a Property
    r = cli.patch("/entities/" + eid, {"count": prop(3)}, params={"lang": "fr"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["count"] == prop(3)


# ---- 4.9: expandValues and jsonKeys --------------------------------------------------

def test_4_9_expand_values_and_json_keys(cli, ctxserver):
    """expandValues: the values of the listed attributes are expanded with the
    @context before the query runs (JSON-LD type coercion), whatever their
    kind; jsonKeys: compared as written, never expanded (4.9 examples 11, 12)."""
    url = ctxserver.unique({"@context": {"Male": "http://example.org/Male", "Person": "http://example.org/Person"}})
    a, b = uid(), uid()
    cli.create(entity(a, "Person", gender={"type": "VocabProperty", "vocab": "Male"},
                      label=prop("http://example.org/Male"),
                      tickets={"type": "JsonProperty", "json": {"id": "85a6", "value": "Overstay 60 minutes"}}),
               link=url)
    cli.create(entity(b, "Person", gender={"type": "VocabProperty", "vocab": "Female"}, label=prop("Male")), link=url)

    def q(params, body_extra=None):
        r = cli.get("/entities", params=dict(type="Person", **params), link=url)
        assert r.status_code == 200, r.text
        got = ids_of(r.json())
        body = {"type": "Query", "entities": [{"type": "Person"}], "q": params["q"]}
        for k in ("expandValues", "jsonKeys"):
            if k in params:
                body[k] = params[k]
        r = cli.post("/entityOperations/query", body, link=url)
        assert r.status_code == 200, r.text
        assert ids_of(r.json()) == got, "GET and POST query differ"
        return got

    assert q({"q": "gender==Male"}) == [a]                                   # a VocabProperty: as always
    assert q({"q": "gender==Male", "expandValues": "gender"}) == [a]
    assert q({"q": "gender==Male", "jsonKeys": "gender"}) == []              # compared as written
    assert q({"q": 'label=="Male"'}) == [b]
    assert q({"q": 'label=="Male"', "expandValues": "label"}) == [a]         # http://example.org/Male
    assert q({"q": 'tickets[value]=="Overstay 60 minutes"', "jsonKeys": "tickets"}) == [a]
    assert_problem(cli.get("/entities", params={"type": "Person", "q": "gender==Male", "expandValues": ""}),
                   400, "BadRequestData")
    assert_problem(cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Person"}],
                                                        "jsonKeys": 7}), 400, "BadRequestData")


# ---- 6.3.6, 4.3.6.8: Prefer: ngsi-ld=<version> ---------------------------------------

def rich_entity(eid):
    return {"id": eid, "type": ["Car", "Vehicle"], "scope": "/a",
            "speed": [prop(50, observedAt="2024-01-01T00:00:00Z", unitCode="KMH"),
                      prop(60, datasetId="urn:ngsi-ld:ds:gps")],
            "kind": {"type": "VocabProperty", "vocab": "https://example.org/Sedan"},
            "seats": {"type": "ListProperty", "valueList": [1, 2]},
            "raw": {"type": "JsonProperty", "json": {"a": 1}},
            "label": langprop({"en": "car"}),
            "owner": rel("urn:ngsi-ld:P:1", objectType="Person"),
            "parts": {"type": "ListRelationship", "objectList": [{"object": "urn:ngsi-ld:W:1"},
                                                                   {"object": "urn:ngsi-ld:W:2"}]}}


def test_6_3_6_prefer_ngsi_ld_version(cli):
    """Prefer: ngsi-ld=<version>: the entity amended as Table 4.3.6.8 says,
    and Preference-Applied: ngsi-ld=<the version the payload conforms to>."""
    eid = uid()
    cli.create(rich_entity(eid))
    plain = cli.entity(eid)

    def get(pref):
        r = cli.get("/entities/" + eid, headers={"Prefer": pref})
        assert r.status_code == 200, r.text
        return r.headers.get("Preference-Applied"), r.json()

    assert "Preference-Applied" not in cli.get("/entities/" + eid).headers
    assert get("body=json") == (None, plain)
    assert get("ngsi-ld=1.9") == ("ngsi-ld=1.9", plain)
    assert get("ngsi-ld=2.0") == ("ngsi-ld=1.9", plain)
    assert get('ngsi-ld="1.8"') == ("ngsi-ld=1.8", plain)
    assert get("ngsi-ld=one") == (None, plain)                   # not a version: ignored (RFC 7240)

    pa, e = get("ngsi-ld=1.7")
    assert pa == "ngsi-ld=1.7"
    assert e["kind"] == prop("https://example.org/Sedan")
    assert e["seats"] == prop([1, 2])
    assert e["raw"] == prop({"a": 1})
    assert e["parts"] == rel(["urn:ngsi-ld:W:1", "urn:ngsi-ld:W:2"])
    assert e["owner"] == rel("urn:ngsi-ld:P:1")
    assert e["label"] == langprop({"en": "car"}) and e["scope"] == "/a"

    pa, e = get("respond-async, ngsi-ld=1.3")
    assert pa == "ngsi-ld=1.3"
    assert e["label"] == prop({"en": "car"}) and "scope" not in e
    assert e["speed"] == [prop(50, observedAt="2024-01-01T00:00:00Z", unitCode="KMH"),
                          prop(60, datasetId="urn:ngsi-ld:ds:gps")]

    pa, e = get("ngsi-ld=1.0")
    assert pa == "ngsi-ld=1.0"
    assert e["type"] == "Car"
    assert e["speed"] == prop(50)                                 # one instance, the default one

    # the stored entity is unchanged
    assert cli.entity(eid) == plain
    # queries too, GET and POST
    r = cli.get("/entities", params={"type": "Car"}, headers={"Prefer": "ngsi-ld=1.7"})
    assert r.headers["Preference-Applied"] == "ngsi-ld=1.7" and r.json()[0]["seats"] == prop([1, 2])
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Car"}]},
                 headers={"Prefer": "ngsi-ld=1.7"})
    assert r.headers["Preference-Applied"] == "ngsi-ld=1.7" and r.json()[0]["seats"] == prop([1, 2])
    # keyValues as that version shows it
    r = cli.get("/entities/" + eid, params={"format": "keyValues"}, headers={"Prefer": "ngsi-ld=1.7"})
    assert r.json()["parts"] == ["urn:ngsi-ld:W:1", "urn:ngsi-ld:W:2"]
    # errors carry no Preference-Applied
    r = cli.get("/entities/urn:ngsi-ld:Car:none", headers={"Prefer": "ngsi-ld=1.7"})
    assert r.status_code == 404 and "Preference-Applied" not in r.headers


def test_6_7_3_type_on_attribute_operations(cli):
    """PATCH, PUT and DELETE /entities/{id}/attrs/{attrId} take ?type= (Tables
    6.7.3.1-1 to 6.7.3.3-1): an entity of another type is ResourceNotFound and
    nothing changes."""
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    path = "/entities/%s/attrs/speed" % eid
    assert_problem(cli.patch(path, prop(2), params={"type": "Bike"}), 404, "ResourceNotFound")
    assert_problem(cli.put(path, prop(2), params={"type": "Bike"}), 404, "ResourceNotFound")
    assert_problem(cli.delete(path, params={"type": "Bike"}), 404, "ResourceNotFound")
    assert cli.entity(eid)["speed"]["value"] == 1
    assert cli.patch(path, prop(2), params={"type": "Car"}).status_code == 204
    assert cli.put(path, prop(3), params={"type": "Car"}).status_code == 204
    assert cli.entity(eid)["speed"]["value"] == 3
    assert cli.delete(path, params={"type": "Car"}).status_code == 204
    assert "speed" not in cli.entity(eid)

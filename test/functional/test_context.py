"""JSON-LD @context handling: 6.3.5 (resolution and the errors of mixing),
6.3.6 (the @context of a response), 5.5.7 (expansion and compaction), 4.4
(core context precedence, default @vocab), remote contexts (download once,
cache, LdContextNotAvailable)."""

import concurrent.futures
import time

import pytest

from ngsi import (VEHICLE_CTX, free_port, CORE_CONTEXT_URL, DEFAULT_VOCAB, JSONLD_CONTEXT_REL, assert_json_equal,
                  assert_problem, entity, link_header, media_type, prop, rel, uid)


def context_link_urls(resp):
    """URLs of the Link header entries whose rel is the JSON-LD context one."""
    out = []
    for part in resp.headers.get("Link", "").split(","):
        part = part.strip()
        if not part.startswith("<"):
            continue
        url = part[1:part.index(">")]
        if JSONLD_CONTEXT_REL in part:
            out.append(url)
    return out


def context_values(body):
    c = body.get("@context")
    return c if isinstance(c, list) else [c]


# ---- 6.3.5: where the @context comes from --------------------------------------

def test_6_3_5_link_header_expands_on_post_json(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(80)), link=vctx)
    # read back with the same context: short names
    e = cli.entity(eid, link=vctx)
    assert_json_equal(e, entity(eid, "Vehicle", speed=prop(80)))
    # read back without any context: 5.5.7, no term -> Fully Qualified Names
    e = cli.entity(eid)
    assert_json_equal(e, {"id": eid, "type": "https://example.org/Vehicle",
                          "https://example.org/speed": prop(80)})


def test_6_3_5_inline_context_url_with_ld_json(cli, vctx):
    eid = uid()
    body = entity(eid, "Vehicle", speed=prop(80))
    body["@context"] = vctx
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    assert_json_equal(cli.entity(eid, link=vctx), entity(eid, "Vehicle", speed=prop(80)))
    assert cli.entity(eid)["type"] == "https://example.org/Vehicle"


def test_6_3_5_inline_context_object(cli):
    eid = uid()
    body = entity(eid, "Boat", length=prop(12))
    body["@context"] = {"Boat": "https://example.org/Boat", "length": "https://example.org/length"}
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    e = cli.entity(eid)
    assert_json_equal(e, {"id": eid, "type": "https://example.org/Boat", "https://example.org/length": prop(12)})


def test_6_3_5_inline_context_array_with_core_last(cli, ctxserver, vctx):
    eid = uid()
    body = entity(eid, "Vehicle", speed=prop(1))
    body["@context"] = [vctx, CORE_CONTEXT_URL]
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    assert cli.entity(eid)["type"] == "https://example.org/Vehicle"


def test_6_3_5_array_of_contexts_each_contributes(cli, ctxserver):
    a = ctxserver.unique({"@context": {"Plane": "https://a.example/Plane"}})
    b = ctxserver.unique({"@context": {"altitude": "https://b.example/altitude"}})
    eid = uid()
    body = entity(eid, "Plane", altitude=prop(9000))
    body["@context"] = [a, b, {"wing": "https://c.example/wing"}]
    body["wing"] = prop(2)
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    assert_json_equal(cli.entity(eid), {"id": eid, "type": "https://a.example/Plane",
                                        "https://b.example/altitude": prop(9000),
                                        "https://c.example/wing": prop(2)})


def test_6_3_5_ld_json_with_link_header_is_400(cli, vctx):
    body = entity(uid(), "Vehicle")
    body["@context"] = vctx
    r = cli.post("/entities", body, ctype="application/ld+json", link=vctx)
    assert_problem(r, 400, "BadRequestData")


def test_6_3_5_json_with_context_in_body_is_400(cli, vctx):
    body = entity(uid(), "Vehicle")
    body["@context"] = vctx
    r = cli.post("/entities", body)
    assert_problem(r, 400, "BadRequestData")


def test_6_3_5_ld_json_without_context_is_400(cli):
    r = cli.post("/entities", entity(uid(), "Vehicle"), ctype="application/ld+json")
    assert_problem(r, 400, "BadRequestData")


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_6_3_5_mixing_rules_apply_to_patch_and_put(cli, vctx, method):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(1)), link=vctx)
    path = "/entities/" + eid if method == "PUT" else "/entities/" + eid + "/attrs"
    frag = entity(eid, "Vehicle", speed=prop(2)) if method == "PUT" else {"speed": prop(2)}
    with_ctx = dict(frag, **{"@context": vctx})
    assert_problem(cli.request(method, path, json_body=with_ctx), 400, "BadRequestData")
    assert_problem(cli.request(method, path, json_body=frag, ctype="application/ld+json"), 400, "BadRequestData")
    assert_problem(cli.request(method, path, json_body=with_ctx, ctype="application/ld+json", link=vctx),
                   400, "BadRequestData")
    r = cli.request(method, path, json_body=with_ctx, ctype="application/ld+json")
    assert r.status_code == 204, r.text
    assert cli.entity(eid, link=vctx)["speed"]["value"] == 2


def test_6_3_5_get_uses_link_to_expand_type_and_attrs(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(80)), link=vctx)
    r = cli.get("/entities", params={"type": "Vehicle"}, link=vctx)
    assert r.status_code == 200
    assert [e["id"] for e in r.json()] == [eid]
    # without the Link, "Vehicle" expands with the default @vocab: a different type
    r = cli.get("/entities", params={"type": "Vehicle"})
    assert r.status_code == 200
    assert r.json() == []
    r = cli.get("/entities", params={"type": "https://example.org/Vehicle"})
    assert [e["id"] for e in r.json()] == [eid]


def test_6_3_5_delete_attr_uses_link(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(80)), link=vctx)
    assert cli.delete("/entities/%s/attrs/speed" % eid).status_code == 404
    assert cli.delete("/entities/%s/attrs/speed" % eid, link=vctx).status_code == 204


# ---- 4.4 / 5.5.7: expansion and compaction ---------------------------------------

def test_4_4_default_vocab_for_unknown_terms(cli, ctxserver):
    eid = uid()
    cli.create(entity(eid, "Thing", temperature=prop(21)))
    # a context that names the default-vocab IRIs differently
    c = ctxserver.unique({"@context": {"Ding": DEFAULT_VOCAB + "Thing", "temp": DEFAULT_VOCAB + "temperature"}})
    e = cli.entity(eid, link=c)
    assert_json_equal(e, entity(eid, "Ding", temp=prop(21)))
    # a context that maps the same term elsewhere does not see them
    other = ctxserver.unique({"@context": {"temperature": "https://x.example/temperature"}})
    e = cli.entity(eid, link=other)
    assert "temperature" not in e
    # the @vocab suffix is taken: a compact IRI (JSON-LD 1.1 IRI compaction, 5.5.7)
    assert e["ngsi-ld:default-context/temperature"] == prop(21)


def test_5_5_7_compaction_uses_the_request_context(cli, ctxserver, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(80), isParked=rel("urn:ngsi-ld:Park:1")), link=vctx)
    alias = ctxserver.unique({"@context": {"Auto": "https://example.org/Vehicle",
                                           "velocity": "https://example.org/speed"}})
    e = cli.entity(eid, link=alias)
    assert e["type"] == "Auto"
    assert e["velocity"] == prop(80)
    assert "https://example.org/isParked" in e


def test_4_4_core_context_cannot_be_overridden(cli, ctxserver):
    """4.4 / 5.5.7: the core @context is protected and always takes precedence."""
    c = ctxserver.unique({"@context": {"location": "https://evil.example/location",
                                       "Property": "https://evil.example/Property"}})
    eid = uid()
    r = cli.post("/entities", entity(eid, "T", location={"type": "GeoProperty",
                                                         "value": {"type": "Point", "coordinates": [1, 2]}}),
                 link=c)
    if r.status_code == 400:
        # refusing a context that redefines protected terms is JSON-LD 1.1 behaviour
        assert_problem(r, 400, "BadRequestData")
        return
    assert r.status_code == 201, r.text
    e = cli.entity(eid)
    assert e["location"]["type"] == "GeoProperty"
    assert "https://evil.example/location" not in e


def test_4_4_id_and_type_aliases_accepted_in_requests(cli):
    """4.4: @id and @type may be used in requests; responses use id and type."""
    eid = uid()
    r = cli.post("/entities", {"@id": eid, "@type": "T", "a": prop(1)})
    assert r.status_code == 201, r.text
    e = cli.entity(eid)
    assert e["id"] == eid and e["type"] == "T"
    assert "@id" not in e and "@type" not in e


def test_5_5_7_scoped_context_in_user_context_is_400(cli, ctxserver):
    """5.5.7: a user @context with a scoped context -> BadRequestData."""
    c = {"Vehicle": {"@id": "https://example.org/Vehicle", "@context": {"speed": "https://x.example/s"}}}
    body = entity(uid(), "Vehicle")
    body["@context"] = c
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert_problem(r, 400, "BadRequestData")


def test_5_5_7_embedded_context_in_attribute_is_400(cli):
    """4.5.1 / 5.5.7: attributes shall not contain an embedded @context."""
    body = entity(uid(), "T", a={"type": "Property", "value": 1, "@context": {"x": "https://x.example/x"}})
    r = cli.post("/entities", body)
    assert_problem(r, 400, "BadRequestData")


# ---- 6.3.6: @context in responses ------------------------------------------------

def test_6_3_6_json_response_links_core_context_by_default(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    r = cli.get("/entities/" + eid)
    assert media_type(r) == "application/json"
    assert "@context" not in r.json()
    assert context_link_urls(r) == [CORE_CONTEXT_URL], r.headers.get("Link")


def test_6_3_6_json_response_links_the_request_context(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle"), link=vctx)
    r = cli.get("/entities/" + eid, link=vctx)
    assert context_link_urls(r) == [vctx], r.headers.get("Link")
    r = cli.get("/entities", params={"type": "Vehicle"}, link=vctx)
    assert context_link_urls(r) == [vctx], r.headers.get("Link")


def test_6_3_6_ld_json_response_carries_context_in_body(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(5)), link=vctx)
    r = cli.get("/entities/" + eid, accept="application/ld+json", link=vctx)
    assert r.status_code == 200
    assert media_type(r) == "application/ld+json"
    body = r.json()
    assert vctx in context_values(body), body.get("@context")
    assert body["type"] == "Vehicle"
    # no user context: the core context
    r = cli.get("/entities/" + eid, accept="application/ld+json")
    assert CORE_CONTEXT_URL in context_values(r.json())


def test_6_3_6_ld_json_query_response_has_context_in_each_entity(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle"), link=vctx)
    r = cli.get("/entities", params={"type": "Vehicle"}, accept="application/ld+json", link=vctx)
    assert r.status_code == 200
    assert media_type(r) == "application/ld+json"
    for e in r.json():
        assert vctx in context_values(e)


def test_6_3_6_created_has_no_link_header(cli, vctx):
    r = cli.post("/entities", entity(uid(), "Vehicle"), link=vctx)
    assert r.status_code == 201
    assert context_link_urls(r) == []


# ---- remote contexts ---------------------------------------------------------------

def test_remote_context_fetched_once_and_cached(cli, ctxserver):
    url = ctxserver.unique(VEHICLE_CTX)
    for _ in range(20):
        cli.create(entity(uid(), "Vehicle", speed=prop(1)), link=url)
    for _ in range(5):
        assert cli.get("/entities", params={"type": "Vehicle"}, link=url).status_code == 200
    assert ctxserver.count(url) == 1


def test_remote_context_one_download_for_concurrent_requests(broker, make_client, ctxserver):
    url = ctxserver.unique(VEHICLE_CTX, delay=0.5)
    clients = [make_client(broker, tenant=None) for _ in range(8)]

    def one(c):
        return c.post("/entities", entity(uid(), "Vehicle", speed=prop(1)), link=url).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(one, clients))
    assert codes == [201] * 8
    assert ctxserver.count(url) == 1


def test_remote_context_404_is_503_ld_context_not_available(cli, ctxserver):
    url = ctxserver.url("/missing-%s.jsonld" % uid("x")[-8:])
    r = cli.post("/entities", entity(uid(), "Vehicle"), link=url)
    assert_problem(r, 503, "LdContextNotAvailable")


def test_remote_context_unreachable_host_is_503(cli):
    url = "http://127.0.0.1:%d/ctx.jsonld" % free_port()
    r = cli.post("/entities", entity(uid(), "Vehicle"), link=url)
    assert_problem(r, 503, "LdContextNotAvailable")


def test_remote_context_unreachable_on_get_is_503(cli, ctxserver):
    cli.ensure_tenant()
    url = ctxserver.url("/gone-%s.jsonld" % uid("x")[-8:])
    r = cli.get("/entities", params={"type": "Vehicle"}, link=url)
    assert_problem(r, 503, "LdContextNotAvailable")


def test_inline_context_url_unreachable_is_503(cli, ctxserver):
    body = entity(uid(), "Vehicle")
    body["@context"] = ctxserver.url("/none-%s.jsonld" % uid("x")[-8:])
    r = cli.post("/entities", body, ctype="application/ld+json")
    assert_problem(r, 503, "LdContextNotAvailable")


def test_remote_context_not_a_context_is_503(cli, ctxserver):
    """5.5.2: the context cannot be had and expansion cannot be performed."""
    url = ctxserver.unique(b"this is not json", ctype="text/plain")
    r = cli.post("/entities", entity(uid(), "Vehicle"), link=url)
    assert_problem(r, 503, "LdContextNotAvailable")


def test_remote_context_timeout_is_503(broker_factory, make_client, ctxserver):
    b = broker_factory("--contextTimeout", "300", "--contextRetries", "0")
    c = make_client(b)
    url = ctxserver.unique(VEHICLE_CTX, delay=2.0)
    t0 = time.time()
    r = c.post("/entities", entity(uid(), "Vehicle"), link=url)
    assert_problem(r, 503, "LdContextNotAvailable")
    assert time.time() - t0 < 1.8


def test_failed_context_does_not_poison_the_cache(cli, ctxserver):
    path = "/later-%s.jsonld" % uid("x")[-8:]
    url = ctxserver.url(path)
    r = cli.post("/entities", entity(uid(), "Vehicle"), link=url)
    assert_problem(r, 503, "LdContextNotAvailable")
    ctxserver.serve(path, VEHICLE_CTX)
    eid = uid()
    r = cli.post("/entities", entity(eid, "Vehicle"), link=url)
    assert r.status_code == 201, r.text
    assert cli.entity(eid)["type"] == "https://example.org/Vehicle"



@pytest.mark.parametrize("mapping", ["http://ex.org/a b", "http://ex.org/<a>", ":t(tp//example.org/", "http://x/{y}"])
def test_invalid_iri_mapping_in_user_context_is_400(cli, mapping):
    """JSON-LD 1.1 (invalid IRI mapping) and 4.6.2: a term that maps to something that
    is not an IRI usable as an NGSI-LD name is refused with BadRequestData."""
    body = entity(uid(), "ex:Thing")
    body["@context"] = {"ex": mapping}
    assert_problem(cli.post("/entities", body, ctype="application/ld+json"), 400, "BadRequestData")

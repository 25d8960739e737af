"""HTTP binding rules: routing, 6.3.2 (HTTP-level errors), 6.3.3, 6.3.4
(request preconditions), 6.3.6, body limits and JSON validity (5.5.4, 4.6.1),
and the admin endpoints /version and /statistics."""

import json
import socket

import pytest

from ngsi import (API, assert_no_body, assert_problem, entity, media_type, prop, read_answer, uid)


def raw_request(broker, text, body=b""):
    """Sends bytes as they are (requests always adds Content-Length) and returns
    (status, headers dict lower-cased, body bytes)."""
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        s.sendall(text.encode("latin-1") + body)
        ans = read_answer(s)
        assert ans is not None, "the broker closed the connection without an answer"
        return ans
    finally:
        s.close()


def allow_set(resp):
    return {m.strip().upper() for m in resp.headers.get("Allow", "").split(",") if m.strip()}


# ---- routing -----------------------------------------------------------------

def test_6_2_trailing_slash_is_tolerated_on_collections(cli):
    eid = uid("Slash")
    r = cli.post(API + "/entities/", entity(eid, "T", a=prop(1)))
    assert r.status_code == 201, r.text
    r = cli.get(API + "/entities/" + eid + "/")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == eid


def test_6_2_unknown_path_is_404(cli):
    r = cli.get(API + "/nonsense")
    assert r.status_code == 404
    r = cli.get("/ngsi-ld/v2/entities")
    assert r.status_code == 404
    r = cli.get(API + "/entities/urn:x:1/attrs/a/b/c")
    assert r.status_code == 404


@pytest.mark.parametrize("path,wrong,allowed", [
    ("/entities", "PUT", {"GET", "POST", "DELETE"}),
    ("/entities/urn:ngsi-ld:T:1", "POST", {"GET", "DELETE", "PATCH", "PUT"}),
    ("/entities/urn:ngsi-ld:T:1/attrs", "GET", {"POST", "PATCH"}),
    ("/entities/urn:ngsi-ld:T:1/attrs/a", "POST", {"PATCH", "DELETE", "PUT"}),
    ("/entityOperations/create", "GET", {"POST"}),
    ("/entityOperations/query", "GET", {"POST"}),
    ("/types", "DELETE", {"GET"}),
    ("/types/T", "PATCH", {"GET"}),
    ("/attributes", "POST", {"GET"}),
    ("/attributes/a", "DELETE", {"GET"}),
])
def test_6_3_2_wrong_method_is_405_with_allow(cli, path, wrong, allowed):
    """6.3.2: 405 with the Allow header of RFC 7231 6.5.5 (methods of Table 6.2-1)."""
    body = {"id": "urn:ngsi-ld:T:1", "type": "T"} if wrong in ("POST", "PUT", "PATCH") else None
    r = cli.request(wrong, path, json_body=body)
    assert r.status_code == 405, "%s %s -> %d %s" % (wrong, path, r.status_code, r.text[:200])
    allow = allow_set(r)
    assert allowed <= allow, "Allow %r lacks %r" % (r.headers.get("Allow"), allowed - allow)
    assert wrong not in allow


def test_6_3_2_reason_phrases_are_standard(broker):
    status, _, _ = raw_request(broker, "GET %s/nonsense HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % API)
    assert status == 404
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.sendall(("GET %s/nonsense HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % API).encode())
    first = s.recv(4096).split(b"\r\n", 1)[0]
    s.close()
    assert first == b"HTTP/1.1 404 Not Found", first


# ---- 6.3.4 preconditions -------------------------------------------------------

def test_6_3_4_post_without_content_length_is_411(broker):
    """6.3.4: absence of Content-Length -> just 411 (no body)."""
    status, hdrs, body = raw_request(
        broker,
        "POST %s/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Connection: close\r\n\r\n" % API)
    assert status == 411
    assert body == b""


def test_6_3_4_chunked_post_without_content_length_is_411(broker):
    """6.3.4 read literally: a body sent chunked has no Content-Length -> 411."""
    payload = json.dumps({"id": uid(), "type": "T"}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
    status, _, body = raw_request(
        broker,
        "POST %s/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" % API, chunked)
    assert status == 411
    assert body == b""


@pytest.mark.parametrize("ctype", ["text/plain", "application/xml", "application/geo+json"])
def test_6_3_4_unsupported_content_type_is_415_without_body(cli, ctype):
    r = cli.request("POST", "/entities", data=json.dumps({"id": uid(), "type": "T"}).encode(), ctype=ctype)
    assert r.status_code == 415
    assert_no_body(r)


def test_6_3_4_missing_content_type_is_415(cli):
    r = cli.request("POST", "/entities", data=json.dumps({"id": uid(), "type": "T"}).encode())
    # requests adds no Content-Type for bytes data
    assert "Content-Type" not in r.request.headers
    assert r.status_code == 415
    assert_no_body(r)


def test_6_3_4_merge_patch_json_only_for_patch(cli):
    """6.3.4: application/merge-patch+json is allowed for PATCH only."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.patch("/entities/" + eid, {"a": prop(2)}, ctype="application/merge-patch+json")
    assert r.status_code == 204, r.text
    r = cli.post("/entities", entity(uid(), "T"), ctype="application/merge-patch+json")
    assert r.status_code == 415
    r = cli.put("/entities/" + eid, entity(eid, "T"), ctype="application/merge-patch+json")
    assert r.status_code == 415


def test_6_3_4_content_type_with_charset_parameter_is_accepted(cli):
    r = cli.post("/entities", entity(uid(), "T"), ctype="application/json; charset=utf-8")
    assert r.status_code == 201, r.text


def test_6_3_4_accept_text_html_is_406_listing_representations(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    r = cli.get("/entities/" + eid, accept="text/html")
    assert r.status_code == 406
    assert "application/json" in r.text and "application/ld+json" in r.text, r.text


@pytest.mark.parametrize("accept,expected", [
    (None, "application/json"),
    ("*/*", "application/json"),
    ("application/*", "application/json"),
    ("application/json", "application/json"),
    ("application/ld+json", "application/ld+json"),
    ("text/html, application/ld+json", "application/ld+json"),
    ("application/json;q=0.5, application/ld+json", "application/ld+json"),
    ("application/ld+json;q=0.2, application/json;q=0.9", "application/json"),
])
def test_6_3_4_accept_negotiation(cli, accept, expected):
    eid = uid()
    cli.create(entity(eid, "T"))
    h = {} if accept else {"Accept": None}  # requests sends */* by default; None removes it
    r = cli.get("/entities/" + eid, accept=accept, headers=h)
    assert r.status_code == 200, r.text
    assert media_type(r) == expected


def test_6_3_4_geojson_accepted_for_retrieve_and_query(cli):
    eid = uid()
    cli.create(entity(eid, "T", location={"type": "GeoProperty", "value": {"type": "Point", "coordinates": [1, 2]}}))
    r = cli.get("/entities/" + eid, accept="application/geo+json")
    assert r.status_code == 200, r.text
    assert media_type(r) == "application/geo+json"
    r = cli.get("/entities", params={"type": "T"}, accept="application/geo+json")
    assert r.status_code == 200, r.text
    assert media_type(r) == "application/geo+json"


@pytest.mark.parametrize("path", ["/types", "/attributes"])
def test_6_3_4_geojson_not_acceptable_elsewhere(cli, path):
    """6.3.4: geo+json for any other operation -> 406 with the available representations."""
    cli.ensure_tenant()
    r = cli.get(path, accept="application/geo+json")
    assert r.status_code == 406
    assert "application/json" in r.text


# ---- 6.3.3 / 6.3.6 -----------------------------------------------------------

def test_6_3_6_error_responses_carry_no_link_header(cli):
    cli.ensure_tenant()
    r = cli.get("/entities/urn:ngsi-ld:T:missing")
    assert_problem(r, 404, "ResourceNotFound")
    assert "Link" not in r.headers


def test_6_3_6_error_is_json_even_when_ld_json_accepted(cli):
    cli.ensure_tenant()
    r = cli.get("/entities/urn:ngsi-ld:T:missing", accept="application/ld+json")
    assert_problem(r, 404, "ResourceNotFound")


def test_6_3_6_204_has_no_content_length_or_body(cli):
    """6.3.6: no Content-Length header if the response code is 204."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.patch("/entities/" + eid + "/attrs", {"a": prop(2)})
    assert r.status_code == 204
    assert r.content == b""
    assert "Content-Length" not in r.headers


# ---- body limits and JSON validity --------------------------------------------

def test_6_3_2_body_above_max_body_size_is_413(broker_factory, make_client):
    b = broker_factory("--maxBodySize", "1000")
    c = make_client(b)
    big = entity(uid(), "T", pad=prop("x" * 1500))
    r = c.post("/entities", big)
    assert r.status_code == 413
    # just at the limit is accepted
    e = entity(uid(), "T", pad=prop(""))
    n = len(json.dumps(e).encode())
    e["pad"]["value"] = "y" * (1000 - n)
    assert len(json.dumps(e).encode()) == 1000
    r = c.post("/entities", e)
    assert r.status_code == 201, r.text


def test_5_5_4_invalid_json_is_400_invalid_request(cli):
    """5.5.4: a body that is not valid JSON -> InvalidRequest, with a detail."""
    for bad in [b'{"id": "urn:x:1", "type": ', b'{"id": "urn:x:1",}', b"nope", b'{"a":1} {"b":2}']:
        r = cli.request("POST", "/entities", data=bad, ctype="application/json")
        assert_problem(r, 400, "InvalidRequest")


def test_5_5_4_empty_body_is_400(cli):
    r = cli.request("POST", "/entities", data=b"", ctype="application/json")
    assert_problem(r, 400, "InvalidRequest")


def test_json_nesting_above_max_depth_is_400(cli):
    """--maxJsonDepth (64): a deeper document is refused with a 400 ProblemDetails.
    The spec does not name the type for an implementation limit: 5.5.4 allows
    InvalidRequest (not acceptable JSON) or BadRequestData."""
    deep = "[" * 200 + "]" * 200
    body = ('{"id": "%s", "type": "T", "a": {"type": "Property", "value": %s}}' % (uid(), deep)).encode()
    r = cli.request("POST", "/entities", data=body, ctype="application/json")
    assert r.status_code == 400
    assert r.json()["type"] in ("https://uri.etsi.org/ngsi-ld/errors/InvalidRequest",
                                "https://uri.etsi.org/ngsi-ld/errors/BadRequestData")


def test_json_nesting_within_limit_is_accepted(cli):
    eid = uid()
    deep = "[" * 30 + "1" + "]" * 30
    body = ('{"id": "%s", "type": "T", "a": {"type": "Property", "value": %s}}' % (eid, deep)).encode()
    r = cli.request("POST", "/entities", data=body, ctype="application/json")
    assert r.status_code == 201, r.text
    v = cli.entity(eid)["a"]["value"]
    for _ in range(30):
        v = v[0]
    assert v == 1


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf"])
def test_4_6_1_invalid_utf8_is_400(cli, bad):
    """4.6.1: JSON content is UTF-8; an invalid sequence makes an invalid JSON text."""
    body = b'{"id": "' + uid().encode() + b'", "type": "T", "a": {"type": "Property", "value": "x' + bad + b'"}}'
    r = cli.request("POST", "/entities", data=body, ctype="application/json")
    assert_problem(r, 400, "InvalidRequest")


def test_4_6_1_utf8_round_trips(cli):
    eid = uid()
    text = "Stra\u00dfe \u2603 \U0001F600 \u00e9\u00e8"
    cli.create(entity(eid, "T", name=prop(text)))
    assert cli.entity(eid)["name"]["value"] == text


def test_4_6_4_special_characters_preserved(cli):
    """4.6.4: content with < > " ' = ; ( ) is returned as provided (or refused with BadRequestData)."""
    eid = uid()
    text = "<script>alert(\"x\"='y');</script>"
    r = cli.post("/entities", entity(eid, "T", s=prop(text)))
    if r.status_code == 400:
        assert_problem(r, 400, "BadRequestData")
    else:
        assert r.status_code == 201
        assert cli.entity(eid)["s"]["value"] == text


# ---- admin -----------------------------------------------------------------------

def test_version_endpoint(cli):
    r = cli.get("/version")
    assert r.status_code == 200
    assert media_type(r) == "application/json"
    v = r.json()
    for k in ("version", "gitCommit", "compiler", "cflags", "pgo", "allocator"):
        assert k in v, "missing %s in %r" % (k, v)
    assert isinstance(v["version"], str) and v["version"]


def test_version_says_whether_frozen_entities_are_on_huge_pages(broker_factory, make_client):
    """--hugePages (blockpool.c): on by default, the store's entities in the block pool (an
    AddressSanitizer build keeps them malloc'd, so that it sees every access); off, malloc'd.
    Either way an entity is created, read, patched, replaced and deleted alike."""
    for flags, want in (((), None), (("--hugePages=false",), False)):
        cli = make_client(broker_factory(*flags))
        v = cli.get("/version").json()
        if want is None:
            want = v["allocator"] != "asan"
        assert v["hugePages"] is want, v
        eid = uid("Vehicle")
        assert cli.post(API + "/entities", entity(eid, "Vehicle", speed=prop(1))).status_code == 201
        for i in range(50):     # a new block each time, the old one freed
            assert cli.patch(API + "/entities/%s/attrs" % eid, {"speed": prop(i), "note": prop("x" * i * 40)}).status_code == 204
        got = cli.entity(eid)
        assert got["speed"]["value"] == 49 and got["note"]["value"] == "x" * 49 * 40
        assert cli.put(API + "/entities/%s" % eid, {"type": "Vehicle", "speed": prop(7)}).status_code == 204
        assert cli.entity(eid)["speed"]["value"] == 7
        assert cli.delete(API + "/entities/%s" % eid).status_code == 204
        assert cli.get(API + "/entities/%s" % eid).status_code == 404


def test_statistics_endpoint_counts_requests(cli):
    r = cli.get("/statistics")
    assert r.status_code == 200
    assert media_type(r) == "application/json"
    n0 = r.json()["requests"]
    assert isinstance(n0, int)
    for _ in range(3):
        cli.get("/version")
    n1 = cli.get("/statistics").json()["requests"]
    assert n1 >= n0 + 3

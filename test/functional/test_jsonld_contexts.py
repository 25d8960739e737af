"""@context management (5.13, 6.29, 6.30, 6.3.16): hosted contexts (Add, Serve,
Delete), the list of stored contexts with their kinds (Cached, Hosted,
ImplicitlyCreated) and details, reload of a cached one, the expiry of cached
documents, the URLs of served contexts (--publicUrl), and hosted contexts
kept by corDB on disk over a restart."""

import os
import signal
import subprocess
import time
import uuid
from urllib.parse import quote

import pytest
import requests

from conftest import REPO, binary_path
from ngsi import API, CORE_CONTEXT_URL, DATETIME_RE, assert_no_body, assert_problem, free_port, link_header, uid

DETAIL_MEMBERS = {"URL", "localId", "kind", "createdAt", "expiresAt", "lastUsage", "numberOfHits", "extraInfo"}
JSON = {"Content-Type": "application/json"}


def add(cli, ctx_value, **kw):
    return cli.post("/jsonldContexts", {"@context": ctx_value}, **kw)


def add_ok(cli, ctx_value):
    r = add(cli, ctx_value)
    assert r.status_code == 201, r.text
    loc = r.headers["Location"]
    assert loc.startswith(API + "/jsonldContexts/"), loc        # 6.29.3.1: the local relative path
    return loc.rsplit("/", 1)[1]


def details(cli, cid):
    r = cli.get("/jsonldContexts/" + quote(cid, safe=""), params={"details": "true"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert set(d) <= DETAIL_MEMBERS, set(d) - DETAIL_MEMBERS
    for k in ("URL", "localId", "kind", "createdAt", "numberOfHits"):
        assert k in d, d
    for k in ("createdAt", "expiresAt", "lastUsage"):
        if k in d:
            assert DATETIME_RE.match(d[k]), d
    return d


def listing(cli, **params):
    r = cli.get("/jsonldContexts", params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def pub(broker_factory):
    """A broker whose public URL is a host that does not resolve: what it
    resolves under that URL it can only have found in itself."""
    return broker_factory("--publicUrl", "http://ctx.invalid:9")


# ---------------------------------------------------------------- 5.13.2 Add

def test_5_13_2_add_serve_hosted(dcli):
    value = {"A1": "urn:ngsi-ld:attributes:A1", "A2": "urn:ngsi-ld:attributes:A2"}
    r = add(dcli, value)
    assert r.status_code == 201, r.text
    assert_no_body(r)
    cid = r.headers["Location"].rsplit("/", 1)[1]
    d = details(dcli, cid)
    assert d["kind"] == "Hosted" and d["localId"] == cid
    assert d["URL"].endswith(API + "/jsonldContexts/" + cid)
    # 5.13.4.4: the full content, and only the @context (5.13.2.3)
    r = dcli.get("/jsonldContexts/" + cid)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    assert r.json() == {"@context": value}
    # the URL itself works as the id (6.30.2)
    assert details(dcli, d["URL"])["localId"] == cid


def test_5_13_2_only_context_kept(dcli):
    r = dcli.post("/jsonldContexts", {"@context": {"X": "urn:x"}, "other": 1})
    assert r.status_code == 201, r.text
    cid = r.headers["Location"].rsplit("/", 1)[1]
    assert dcli.get("/jsonldContexts/" + cid).json() == {"@context": {"X": "urn:x"}}


@pytest.mark.parametrize("body,status,err", [
    (b'{"A1": "urn:a1" "A2": "urn:a2"}', 400, "InvalidRequest"),            # not JSON (5.5.4)
    (b'{"A1": "urn:a1"}', 400, "InvalidRequest"),                          # no @context root (doc/api.md)
    (b'[{"@context": {}}]', 400, "BadRequestData"),                         # not an object
    (b'{"@context": 3}', 400, "BadRequestData"),                            # not a context
    (b'{"@context": {"a": 3}}', 400, "BadRequestData"),                     # a term definition that is none
    (b'{"@context": "not a url"}', 400, "BadRequestData"),
])
def test_5_13_2_invalid(dcli, body, status, err):
    before = len(listing(dcli, kind="Hosted"))
    r = dcli.post("/jsonldContexts", data=body, ctype="application/json")
    assert_problem(r, status, err)
    assert len(listing(dcli, kind="Hosted")) == before


def test_5_13_2_remote_documents_become_cached(dcli, ctxserver):
    u1 = ctxserver.unique({"@context": {"r1": "urn:r1"}})
    u2 = ctxserver.unique({"@context": {"r2": "urn:r2"}})
    cid = add_ok(dcli, [u1, u2])
    assert details(dcli, cid)["kind"] == "Hosted"
    cached = {d["URL"]: d for d in listing(dcli, details="true", kind="Cached")}
    for u in (u1, u2):                          # downloaded while the context was validated
        assert cached[u]["kind"] == "Cached"
        assert details(dcli, u)["kind"] == "Cached"
    assert ctxserver.count(u1) == 1


def test_5_13_2_unreachable_remote_is_refused(dcli, ctxserver):
    missing = ctxserver.url("/missing-%s.jsonld" % uuid.uuid4().hex)
    before = listing(dcli, kind="Hosted")
    assert_problem(add(dcli, [missing, {"a": "urn:a"}]), 503, "LdContextNotAvailable")
    assert listing(dcli, kind="Hosted") == before


def test_5_13_2_bounds(broker_factory, make_client):
    b = broker_factory("--contextHostedMax", "2", "--contextHostedMaxBytes", "200")
    c = make_client(b, tenant=None)
    for cid in [d["localId"] for d in listing(c, details="true", kind="Hosted")]:
        c.delete("/jsonldContexts/" + cid)
    assert_problem(add(c, {"t%d" % i: "urn:ngsi-ld:x:%d" % i for i in range(20)}), 400, "BadRequestData")
    ids = [add_ok(c, {"a": "urn:a"}), add_ok(c, {"b": "urn:b"})]
    r = add(c, {"c": "urn:c"})
    assert_problem(r, 400, "BadRequestData")
    assert "--contextHostedMax" in r.json()["detail"]
    assert c.delete("/jsonldContexts/" + ids[0]).status_code == 204
    add_ok(c, {"c": "urn:c"})


# --------------------------------------------------------------- 5.13.3 List

def test_5_13_3_list_kinds_and_details(dcli, ctxserver):
    cid = add_ok(dcli, {"L1": "urn:l1"})
    remote = ctxserver.unique({"@context": {"rl": "urn:rl"}})
    assert dcli.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    urls = listing(dcli)
    assert CORE_CONTEXT_URL in urls and remote in urls                 # the core and every download: Cached
    assert any(u.endswith("/" + cid) for u in urls)
    assert all(isinstance(u, str) for u in urls)
    assert listing(dcli, details="false") == urls
    full = listing(dcli, details="true")
    assert [d["URL"] for d in full] == urls
    for d in full:
        assert set(d) <= DETAIL_MEMBERS and d["kind"] in ("Cached", "Hosted", "ImplicitlyCreated")
    core = [d for d in full if d["URL"] == CORE_CONTEXT_URL][0]
    assert core["kind"] == "Cached" and core["localId"] == "core"
    hosted = listing(dcli, kind="Hosted", details="true")
    assert {d["kind"] for d in hosted} == {"Hosted"} and cid in [d["localId"] for d in hosted]
    cached = listing(dcli, kind="Cached")
    assert remote in cached and not any(u.endswith("/" + cid) for u in cached)
    d = details(dcli, remote)
    assert d["expiresAt"] > d["createdAt"]                              # 6.3.16


@pytest.mark.parametrize("params", [{"kind": "cached"}, {"kind": "Other"}, {"details": "yes"}])
def test_5_13_3_list_bad_parameters(dcli, params):
    assert_problem(dcli.get("/jsonldContexts", params=params), 400, "BadRequestData")


def test_6_3_20_unknown_parameter_first(dcli):
    for path in ("/jsonldContexts", "/jsonldContexts/core"):
        assert_problem(dcli.get(path, params=[("details", "maybe"), ("foo", "1")]), 400, "InvalidRequest")
    assert_problem(dcli.delete("/jsonldContexts/core", params=[("reload", "x"), ("foo", "1")]), 400, "InvalidRequest")


def test_5_13_3_implicitly_created(dcli, ctxserver):
    u = ctxserver.unique({"@context": {"si": "urn:si"}})
    sub = {"id": uid("Subscription"), "type": "Subscription", "entities": [{"type": "T1"}],
           "notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}},
           "@context": [u, {"extra": "urn:extra"}]}
    r = dcli.post("/subscriptions", sub, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    link = dcli.get("/subscriptions/" + sub["id"]).json()["jsonldContext"]
    implicit = listing(dcli, kind="ImplicitlyCreated", details="true")
    mine = [d for d in implicit if d["URL"] == link]
    assert len(mine) == 1 and mine[0]["kind"] == "ImplicitlyCreated"
    assert u in listing(dcli, kind="Cached") and u not in listing(dcli, kind="Hosted")
    served = dcli.get("/jsonldContexts/" + mine[0]["localId"])
    assert served.status_code == 200 and served.json() == {"@context": sub["@context"]}
    # 5.13.5: deleting it leaves the subscription whole
    assert dcli.delete("/jsonldContexts/" + mine[0]["localId"]).status_code == 204
    assert dcli.get("/subscriptions/" + sub["id"]).status_code == 200
    assert dcli.delete("/subscriptions/" + sub["id"]).status_code == 204


# -------------------------------------------------------------- 5.13.4 Serve

def test_5_13_4_serve_cached_is_422(dcli, ctxserver):
    remote = ctxserver.unique({"@context": {"c422": "urn:c422"}})
    assert dcli.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    assert_problem(dcli.get("/jsonldContexts/" + quote(remote, safe="")), 422, "OperationNotSupported")
    assert_problem(dcli.get("/jsonldContexts/core"), 422, "OperationNotSupported")
    d = details(dcli, remote)
    assert d["kind"] == "Cached" and d["URL"] == remote
    assert details(dcli, d["localId"])["URL"] == remote


def test_5_13_4_unknown(dcli):
    assert_problem(dcli.get("/jsonldContexts/0123456789abcdef"), 404, "ResourceNotFound")
    assert_problem(dcli.get("/jsonldContexts/" + quote("http://nowhere.example/c.jsonld", safe="")),
                   404, "ResourceNotFound")
    assert_problem(dcli.get("/jsonldContexts/x", params={"details": "maybe"}), 400, "BadRequestData")


def test_5_13_4_number_of_hits(pub, make_client, ctxserver):
    c = make_client(pub, tenant=None)
    cid = add_ok(c, {"H1": "urn:h1"})
    url = details(c, cid)["URL"]                                  # a GET finds it: one hit, counted after
    assert url == "http://ctx.invalid:9" + API + "/jsonldContexts/" + cid
    assert c.create({"id": uid(), "type": "T", "H1": {"type": "Property", "value": 1}}, link=url).status_code == 201
    assert c.create({"id": uid(), "type": "T"}, link=url).status_code == 201
    d = details(c, cid)
    assert d["numberOfHits"] == 3 and "lastUsage" in d
    remote = ctxserver.unique({"@context": {"rh": "urn:rh"}})
    for _ in range(2):
        assert c.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    assert details(c, remote)["numberOfHits"] == 2


def test_5_13_4_number_of_hits_of_each_kind(dcli, ctxserver):
    """A GET of the context counts after its answer; a use counts once per request."""
    remote = ctxserver.unique({"@context": {"nk": "urn:nk"}})
    ent = lambda ctx: {"id": uid(), "type": "T", "@context": ctx}
    assert dcli.post("/entities", ent(remote), ctype="application/ld+json").status_code == 201
    assert details(dcli, remote)["numberOfHits"] == 1
    assert dcli.post("/entities", ent(remote), ctype="application/ld+json").status_code == 201
    assert details(dcli, remote)["numberOfHits"] == 3
    sub = {"id": uid("Subscription"), "type": "Subscription", "entities": [{"type": "T1"}],
           "notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}},
           "@context": [remote, ctxserver.unique({"@context": {"nk2": "urn:nk2"}})]}
    assert dcli.post("/subscriptions", sub, ctype="application/ld+json").status_code == 201
    url = dcli.get("/subscriptions/" + sub["id"]).json()["jsonldContext"]
    assert dcli.post("/entities", ent(url), ctype="application/ld+json").status_code == 201
    lid = url.rsplit("/", 1)[1]
    assert details(dcli, lid)["numberOfHits"] == 1
    assert details(dcli, lid)["numberOfHits"] == 2
    assert dcli.delete("/subscriptions/" + sub["id"]).status_code == 204
    # a relative @context URL names nothing: the entity is refused and counts nothing
    cid = add_ok(dcli, {"rel": "urn:rel"})
    assert details(dcli, cid)["numberOfHits"] == 0
    assert_problem(dcli.post("/entities", ent(API + "/jsonldContexts/" + cid), ctype="application/ld+json"),
                   400, "BadRequestData")
    assert details(dcli, cid)["numberOfHits"] == 1


# ------------------------------------------- hosted contexts resolved locally

def test_5_13_hosted_resolved_without_download(pub, make_client):
    c = make_client(pub, tenant=None)
    cid = add_ok(c, {"speedH": "https://example.org/speedH"})
    url = "http://ctx.invalid:9" + API + "/jsonldContexts/" + cid
    eid = uid()
    r = c.create({"id": eid, "type": "T", "speedH": {"type": "Property", "value": 3}}, link=url)
    assert r.status_code == 201, r.text
    full = c.get("/entities/" + eid).json()
    assert "https://example.org/speedH" in full
    r = c.get("/entities/" + eid, link=url)
    assert r.json()["speedH"]["value"] == 3
    # nested: an inline @context that names the hosted one
    r = c.get("/entities/" + eid, headers={"Accept": "application/ld+json"}, link=url)
    assert r.json()["@context"] == url
    c.delete("/jsonldContexts/" + cid)
    assert_problem(c.get("/entities/" + eid, link=url), 503, "LdContextNotAvailable")


def test_5_13_public_url_in_link_headers(pub, make_client):
    c = make_client(pub, tenant=None)
    sid = uid("Subscription")
    sub = {"id": sid, "type": "Subscription", "entities": [{"type": "T"}],
           "notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}}, "@context": {"pq": "urn:pq"}}
    assert c.post("/subscriptions", sub, ctype="application/ld+json").status_code == 201
    r = c.get("/subscriptions/" + sid, headers={"Accept": "application/json"})
    url = r.json()["jsonldContext"]             # the served context, named under --publicUrl
    assert url.startswith("http://ctx.invalid:9" + API + "/jsonldContexts/"), url
    assert c.get("/jsonldContexts/" + url.rsplit("/", 1)[1]).json() == {"@context": {"pq": "urn:pq"}}
    # a request in that context is answered with it in the Link header (resolved here, never downloaded)
    r = c.get("/subscriptions/" + sid, link=url, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    assert r.headers["Link"].startswith("<" + url + ">"), r.headers["Link"]
    assert c.delete("/subscriptions/" + sid).status_code == 204


# ------------------------------------------------------------- 5.13.5 Delete

def test_5_13_5_delete_hosted(dcli):
    cid = add_ok(dcli, {"D": "urn:d"})
    assert_problem(dcli.delete("/jsonldContexts/" + cid, params={"reload": "true"}), 400, "BadRequestData")
    r = dcli.delete("/jsonldContexts/" + cid)
    assert r.status_code == 204 and r.content == b""
    assert_problem(dcli.get("/jsonldContexts/" + cid), 404, "ResourceNotFound")
    assert_problem(dcli.delete("/jsonldContexts/" + cid), 404, "ResourceNotFound")


@pytest.mark.parametrize("cid,params,status,err", [
    ("0123456789abcdef", {}, 404, "ResourceNotFound"),
    ("0123456789abcdef", {"reload": "false"}, 404, "ResourceNotFound"),
    ("wrong_id_context", {"reload": "true"}, 400, "BadRequestData"),      # nothing to download from (doc/api.md)
    ("http://nowhere.example/c.jsonld", {"reload": "true"}, 404, "ResourceNotFound"),
    ("0123456789abcdef", {"reload": "xxx"}, 400, "BadRequestData"),
    ("core", {}, 400, "BadRequestData"),
    (CORE_CONTEXT_URL, {}, 400, "BadRequestData"),
])
def test_5_13_5_delete_errors(dcli, cid, params, status, err):
    assert_problem(dcli.delete("/jsonldContexts/" + quote(cid, safe=""), params=params), status, err)


def test_5_13_5_delete_core_with_reload(dcli):
    assert dcli.delete("/jsonldContexts/core", params={"reload": "true"}).status_code == 204
    assert CORE_CONTEXT_URL in listing(dcli)


def test_5_13_5_delete_cached_downloads_again(dcli, ctxserver):
    remote = ctxserver.unique({"@context": {"dc": "urn:dc"}})
    assert dcli.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    assert dcli.delete("/jsonldContexts/" + quote(remote, safe="")).status_code == 204
    assert remote not in listing(dcli, kind="Cached")
    assert dcli.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    assert ctxserver.count(remote) == 2


def test_5_13_5_delete_cached_named_by_an_array(dcli, ctxserver):
    """A Cached document deleted while a context built from an array that
    lists it stays cached: the next request with that array downloads it
    again, and it is listed as Cached again (ETSI 052_06_03)."""
    u1 = ctxserver.unique({"@context": {"da1": "urn:da1"}})
    u2 = ctxserver.unique({"@context": {"da2": "urn:da2"}})
    for _ in range(2):
        dcli.create({"id": uid(), "type": "T", "@context": [u1, u2]}, ctype="application/ld+json")
        cached = listing(dcli, kind="Cached")
        assert u1 in cached and u2 in cached
        for u in (u1, u2):
            assert dcli.delete("/jsonldContexts/" + quote(u, safe="")).status_code == 204
        assert u1 not in listing(dcli, kind="Cached")
    assert ctxserver.count(u1) == 2 and ctxserver.count(u2) == 2


def test_5_13_5_reload(dcli, ctxserver):
    path = "/reload-%s.jsonld" % uuid.uuid4().hex
    remote = ctxserver.serve(path, {"@context": {"rv": "urn:old"}})
    eid = uid()
    assert dcli.create({"id": eid, "type": "T", "rv": {"type": "Property", "value": 1}}, link=remote).status_code == 201
    created = details(dcli, remote)["createdAt"]
    ctxserver.serve(path, {"@context": {"rv": "urn:new"}})
    time.sleep(0.01)
    r = dcli.delete("/jsonldContexts/" + quote(remote, safe=""), params={"reload": "true"})
    assert r.status_code == 204, r.text
    assert details(dcli, remote)["createdAt"] > created
    body = dcli.get("/entities/" + eid, link=remote).json()
    assert "urn:old" in body and "rv" not in body                     # the new copy is used
    # a failed reload keeps the copy (5.13.5.4); 503 as DISPUTED.md decides
    ctxserver.serve(path, {"error": "gone"}, status=404)
    assert_problem(dcli.delete("/jsonldContexts/" + quote(remote, safe=""), params={"reload": "true"}),
                   503, "LdContextNotAvailable")
    ctxserver.serve(path, b"not json", ctype="application/json")
    assert_problem(dcli.delete("/jsonldContexts/" + quote(remote, safe=""), params={"reload": "true"}),
                   503, "LdContextNotAvailable")
    assert remote in listing(dcli, kind="Cached")
    e2 = uid()                                  # the copy of the successful reload is still the one used
    assert dcli.create({"id": e2, "type": "T", "rv": {"type": "Property", "value": 2}}, link=remote).status_code == 201
    assert "urn:new" in dcli.get("/entities/" + e2).json()


# --------------------------------------------------- 6.3.16 cached expiry

def test_6_3_16_expiry_from_cache_control(dcli, ctxserver):
    path = "/exp-%s.jsonld" % uuid.uuid4().hex
    remote = ctxserver.serve(path, {"@context": {"ex": "urn:ex1"}}, headers={"Cache-Control": "max-age=1"})
    assert dcli.create({"id": uid(), "type": "T"}, link=remote).status_code == 201
    d = details(dcli, remote)
    assert d["createdAt"] < d["expiresAt"] <= d["createdAt"][:17] + "99"   # max-age=1: within the minute
    ctxserver.serve(path, {"@context": {"ex": "urn:ex2"}}, headers={"Cache-Control": "max-age=600"})
    time.sleep(1.2)
    # an expired document is served as is while a new copy is downloaded
    eid = uid()
    assert dcli.create({"id": eid, "type": "T", "ex": {"type": "Property", "value": 1}},
                       link=remote).status_code == 201
    deadline = time.time() + 5
    while ctxserver.count(remote) < 2:
        assert time.time() < deadline, "the expired @context was not downloaded again"
        time.sleep(0.05)
    deadline = time.time() + 5
    while True:                                 # then contexts are built from the new copy
        e2 = uid()
        assert dcli.create({"id": e2, "type": "T", "ex": {"type": "Property", "value": 2}},
                           link=remote).status_code == 201
        if "urn:ex2" in dcli.get("/entities/" + e2).json():
            break
        assert time.time() < deadline, "the new copy of the @context is not used"
        time.sleep(0.05)
    d2 = details(dcli, remote)
    assert d2["createdAt"] > d["createdAt"] and d2["expiresAt"] > d["expiresAt"]


# ------------------------------------------------ restart with corDB on disk

def start_disk(dbdir, logpath, port):
    cmd = [binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "info",
           "--dbDir", dbdir, "--publicUrl", "http://ctx.invalid:9"]
    with open(logpath, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    base = "http://127.0.0.1:%d" % port
    deadline = time.time() + 15
    while time.time() < deadline:
        assert proc.poll() is None, open(logpath).read()
        try:
            if requests.get(base + "/version", timeout=1).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("broker did not start")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)


def test_5_13_hosted_survive_restart(tmp_path):
    dbdir, logpath = str(tmp_path / "db"), str(tmp_path / "broker.log")
    port = free_port()
    proc, base = start_disk(dbdir, logpath, port)
    try:
        value = {"RS": "https://example.org/RS"}
        r = requests.post(base + API + "/jsonldContexts", json={"@context": value}, headers=JSON, timeout=15)
        assert r.status_code == 201, r.text
        cid = r.headers["Location"].rsplit("/", 1)[1]
        gone = requests.post(base + API + "/jsonldContexts", json={"@context": {"G": "urn:g"}}, headers=JSON,
                             timeout=15).headers["Location"].rsplit("/", 1)[1]
        assert requests.delete(base + API + "/jsonldContexts/" + gone, timeout=15).status_code == 204
        created = requests.get(base + API + "/jsonldContexts/" + cid, params={"details": "true"},
                               timeout=15).json()["createdAt"]
    finally:
        stop(proc)
    proc, base = start_disk(dbdir, logpath, port)
    try:
        r = requests.get(base + API + "/jsonldContexts/" + cid, timeout=15)
        assert r.status_code == 200 and r.json() == {"@context": value}
        d = requests.get(base + API + "/jsonldContexts/" + cid, params={"details": "true"}, timeout=15).json()
        assert d["kind"] == "Hosted" and d["createdAt"] == created
        assert requests.get(base + API + "/jsonldContexts/" + gone, timeout=15).status_code == 404
        url = "http://ctx.invalid:9" + API + "/jsonldContexts/" + cid
        eid = uid()
        r = requests.post(base + API + "/entities", headers={"Content-Type": "application/json",
                                                             "Link": link_header(url)},
                          json={"id": eid, "type": "T", "RS": {"type": "Property", "value": 1}}, timeout=15)
        assert r.status_code == 201, r.text
        assert "https://example.org/RS" in requests.get(base + API + "/entities/" + eid, timeout=15).json()
    finally:
        stop(proc)
    log = open(logpath).read()
    assert "1 hosted @contexts restored" in log
    for marker in ("AddressSanitizer", "runtime error:", "ThreadSanitizer"):
        assert marker not in log

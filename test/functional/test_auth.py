"""Access control (--auth jwt, doc/operations.md): bearer JWTs signed RS256
or ES256 by a --jwks key (a JWKS file or URL, or a PEM key) or HS256 with
--jwtSecret; issuer, audience and time checks; the tenants claim. 401 with
WWW-Authenticate for a missing, bad or expired token, 403 (ProblemDetails)
for a tenant or a write the token does not grant."""
import http.server
import os
import signal
import subprocess
import threading
import time

import pytest
import requests

from conftest import binary_path, REPO
from jwtkit import Key, claims, jwks, token
from ngsi import free_port, uid

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer")
SECRET = "s3cret-s3cret-s3cret-s3cret-0123456789"
API = "/ngsi-ld/v1"


class AuthBroker:
    def __init__(self, tmp, *flags):
        self.port = free_port()
        self.logpath = os.path.join(str(tmp), "coraine-auth-%d.log" % self.port)
        log = open(self.logpath, "wb")
        self.p = subprocess.Popen([binary_path(), "-fg", "--port", str(self.port), "--bind", "127.0.0.1",
                                   "--auth", "jwt"] + list(flags), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        log.close()
        self.base = "http://127.0.0.1:%d" % self.port
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError("broker exited %s: %s" % (self.p.returncode, open(self.logpath).read()))
            try:
                if requests.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.02)
        raise RuntimeError("broker did not start")

    def req(self, method, path, tok=None, tenant=None, body=None, **kw):
        h = kw.pop("headers", {})
        if tok is not None:
            h["Authorization"] = "Bearer " + tok
        if tenant:
            h["NGSILD-Tenant"] = tenant
        return requests.request(method, self.base + path, json=body, headers=h, timeout=10, **kw)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(20)
        log = open(self.logpath, errors="replace").read()
        assert self.p.returncode == 0, "exit %s at SIGTERM; the log ends:\n%s" % (self.p.returncode, log[-4000:])
        for marker in SANITIZER_MARKERS:
            assert marker not in log, log[log.index(marker) - 200:][:3000]


@pytest.fixture(scope="module")
def keys():
    return Key("RSA", "rsa-1"), Key("EC", "ec-1"), Key("RSA", "rsa-1")   # the last: same kid, another key


@pytest.fixture(scope="module")
def ab(tmp_path_factory, keys):
    tmp = tmp_path_factory.mktemp("auth")
    path = str(tmp / "jwks.json")
    open(path, "w").write(jwks(keys[0], keys[1]))
    b = AuthBroker(tmp, "--jwks", path, "--jwtIssuer", "https://idp.example", "--jwtAudience", "coraine",
                   "--jwtLeeway", "5", "--accessLog", str(tmp / "access.log"))
    yield b
    b.stop()


def good(tenants, **extra):
    return claims(tenants, iss="https://idp.example", aud=["other", "coraine"], **extra)


def assert_401(r, error="invalid_token", what=None):
    assert r.status_code == 401, r.text
    www = r.headers["WWW-Authenticate"]
    assert www.startswith('Bearer realm="coraine"')
    if error:
        assert 'error="%s"' % error in www
    else:
        assert "error=" not in www
    pd = r.json()
    assert pd["status"] == 401 and pd["title"] and pd["detail"]
    if what:
        assert what in pd["detail"]


def test_missing_token_401(ab):
    r = ab.req("GET", API + "/entities?type=T")
    assert_401(r, error=None)
    assert_401(ab.req("GET", "/version"), error=None)
    assert_401(ab.req("GET", "/metrics"), error=None)
    assert_401(ab.req("GET", "/nowhere"), error=None)           # no hint of what exists
    r = ab.req("GET", API + "/entities?type=T", headers={"Authorization": "Basic YTpi"})
    assert_401(r, error="invalid_request")


def test_probes_need_no_token(ab):
    assert ab.req("GET", "/health").status_code == 200
    assert ab.req("GET", "/ready").status_code == 200


def test_rs256_and_es256_tokens_read_and_write(ab, keys):
    for k in keys[:2]:
        t = token(good({"@default": "write"}), key=k)
        eid = uid("urn:ngsi-ld:A:")
        r = ab.req("POST", API + "/entities", t, body={"id": eid, "type": "A"})
        assert r.status_code == 201, r.text
        assert ab.req("GET", API + "/entities/" + eid, t).status_code == 200


def test_token_without_kid_tries_every_key(ab, keys):
    t = token(good({"*": "read"}), key=keys[1], kid=None)
    assert ab.req("GET", API + "/entities?type=A", t).status_code == 200


def test_expired_token_401(ab, keys):
    t = token(good({"*": "write"}, exp=int(time.time()) - 60), key=keys[0])
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="expired")
    # within --jwtLeeway: accepted
    t = token(good({"*": "write"}, exp=int(time.time()) - 2), key=keys[0])
    assert ab.req("GET", API + "/entities?type=A", t).status_code == 200
    # not yet valid
    t = token(good({"*": "write"}, nbf=int(time.time()) + 120), key=keys[0])
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="nbf")
    # no exp at all
    c = good({"*": "write"})
    del c["exp"]
    assert_401(ab.req("GET", API + "/entities?type=A", token(c, key=keys[0])), what="exp")


def test_wrong_issuer_or_audience_401(ab, keys):
    c = good({"*": "write"})
    c["iss"] = "https://evil.example"
    assert_401(ab.req("GET", API + "/entities?type=A", token(c, key=keys[0])), what="issuer")
    c = good({"*": "write"})
    c["aud"] = "someone-else"
    assert_401(ab.req("GET", API + "/entities?type=A", token(c, key=keys[0])), what="audience")


def test_wrong_signature_401(ab, keys):
    t = token(good({"*": "write"}), key=keys[2])          # same kid, another key
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="signature")
    good_t = token(good({"*": "write"}), key=keys[0])
    h, p, s = good_t.split(".")
    forged = token(good({"*": "write", "admin": "write"}), key=keys[0]).split(".")[1]
    assert_401(ab.req("GET", API + "/entities?type=A", "%s.%s.%s" % (h, forged, s)), what="signature")
    assert_401(ab.req("GET", API + "/entities?type=A", "not.a-token"))
    assert_401(ab.req("GET", API + "/entities?type=A", "a.b.c.d"))


def test_alg_none_and_others_401(ab, keys):
    t = token(good({"*": "write"}), alg="none", sign=False)
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="alg")
    # HS256 is not accepted by a broker without --jwtSecret, even signed with the public key's bytes
    t = token(good({"*": "write"}), secret=keys[0].pem.decode(), alg="HS256")
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="HS256")
    t = token(good({"*": "write"}), key=keys[0], alg="RS512")
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="alg")
    t = token(good({"*": "write"}), key=keys[0], header={"crit": ["exp"]})
    assert_401(ab.req("GET", API + "/entities?type=A", t), what="critical")


def test_tenant_not_allowed_403(ab, keys):
    t = token(good({"city": "write"}), key=keys[0])
    assert ab.req("POST", API + "/entities", t, tenant="city",
                  body={"id": uid("urn:ngsi-ld:A:"), "type": "A"}).status_code == 201
    for tenant in ["lab", None]:
        r = ab.req("GET", API + "/entities?type=A", t, tenant=tenant)
        assert r.status_code == 403, r.text
        pd = r.json()
        assert pd["status"] == 403 and "tenant" in pd["detail"]
        assert "WWW-Authenticate" not in r.headers
    # a token without the claim grants nothing
    t = token(good(None), key=keys[0])
    assert ab.req("GET", API + "/entities?type=A", t).status_code == 403


def test_read_only_token_cannot_write_403(ab, keys):
    w = token(good({"ro": "write"}), key=keys[0])
    eid = uid("urn:ngsi-ld:A:")
    assert ab.req("POST", API + "/entities", w, tenant="ro", body={"id": eid, "type": "A",
                  "n": {"type": "Property", "value": 1}}).status_code == 201
    t = token(good({"ro": "read", "*": "write"}), key=keys[0])   # its own entry wins over "*"
    assert ab.req("GET", API + "/entities/" + eid, t, tenant="ro").status_code == 200
    # a query by POST is a read
    r = ab.req("POST", API + "/entityOperations/query", t, tenant="ro", body={"type": "Query", "entities": [{"type": "A"}]})
    assert r.status_code == 200, r.text
    for method, path, body in [("PATCH", API + "/entities/%s/attrs" % eid, {"n": {"type": "Property", "value": 2}}),
                               ("DELETE", API + "/entities/" + eid, None),
                               ("POST", API + "/entities", {"id": uid("urn:ngsi-ld:A:"), "type": "A"})]:
        r = ab.req(method, path, t, tenant="ro", body=body)
        assert r.status_code == 403, (method, r.text)
        assert "read" in r.json()["detail"]
    # nothing changed
    assert ab.req("GET", API + "/entities/" + eid, t, tenant="ro").json()["n"]["value"] == 1


def test_known_tokens_come_from_the_cache(ab, keys):
    t = token(good({"*": "read"}, jti=uid("j")), key=keys[0])
    admin = token(good({"*": "read"}), key=keys[1])

    def m(name):
        for line in ab.req("GET", "/metrics", admin).text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0
    v0, h0 = m("coraine_auth_tokens_verified_total"), m("coraine_auth_cache_hits_total")
    for _ in range(20):
        assert ab.req("GET", API + "/entities?type=A", t).status_code == 200
    v1, h1 = m("coraine_auth_tokens_verified_total"), m("coraine_auth_cache_hits_total")
    assert v1 - v0 == 1 and h1 - h0 >= 20


def test_access_log_names_the_subject(ab, keys):
    t = token(good({"*": "read"}, sub="bob-the-reader"), key=keys[0])
    r = ab.req("GET", API + "/entities?type=A", t)
    rid = r.headers["X-Request-Id"]
    path = os.path.join(os.path.dirname(ab.logpath), "access.log")
    deadline = time.time() + 3
    while time.time() < deadline and rid not in open(path).read():
        time.sleep(0.05)
    line = [l for l in open(path).read().splitlines() if rid in l][0]
    assert " - bob-the-reader [" in line


def test_hs256(tmp_path):
    b = AuthBroker(tmp_path, "--jwtSecret", SECRET)
    try:
        t = token(claims({"@default": "write"}), secret=SECRET)
        assert b.req("POST", API + "/entities", t, body={"id": uid("urn:ngsi-ld:H:"), "type": "H"}).status_code == 201
        assert_401(b.req("GET", API + "/entities?type=H", token(claims({"*": "write"}), secret="x" * 40)),
                   what="signature")
        key = Key("RSA", "k")
        assert_401(b.req("GET", API + "/entities?type=H", token(claims({"*": "write"}), key=key)), what="RS256")
    finally:
        b.stop()


def test_jwks_from_an_url_and_a_pem_key(tmp_path, keys):
    doc = jwks(keys[1]).encode()

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        b = AuthBroker(tmp_path, "--jwks", "http://127.0.0.1:%d/jwks.json" % srv.server_address[1])
        try:
            assert b.req("GET", API + "/entities?type=A", token(claims({"*": "read"}), key=keys[1])).status_code == 200
            assert_401(b.req("GET", API + "/entities?type=A", token(claims({"*": "read"}), key=keys[0])))
        finally:
            b.stop()
    finally:
        srv.shutdown()
        srv.server_close()
    pem = str(tmp_path / "key.pem")
    open(pem, "wb").write(keys[0].pem)
    b = AuthBroker(tmp_path, "--jwks", pem)
    try:
        assert b.req("GET", API + "/entities?type=A", token(claims({"*": "read"}), key=keys[0])).status_code == 200
    finally:
        b.stop()


@pytest.mark.parametrize("flags,why", [
    ([], "--jwks"),
    (["--jwtSecret", "short"], "32 bytes"),
    (["--jwks", "/nonexistent/jwks.json"], "nonexistent"),
])
def test_bad_configuration_refuses_to_start(tmp_path, flags, why):
    p = subprocess.run([binary_path(), "-fg", "--port", str(free_port()), "--bind", "127.0.0.1", "--auth", "jwt"] + flags,
                       capture_output=True, text=True, timeout=20, cwd=REPO)
    assert p.returncode == 2 and why in p.stderr


def test_auth_applies_over_cor_too(tmp_path, broker_factory):
    """cor:// (doc/cor-protocol.md) runs requests through the same route and checks as HTTP, --auth
    included: a hub's forward without a token is refused by the source; with the token in the
    registration's contextSourceInfo (6.3.19: its pairs are sent as headers) it is answered."""
    cor_port = free_port()
    src = AuthBroker(tmp_path, "--jwtSecret", SECRET, "--corPort", str(cor_port))
    try:
        tok = token(claims({"*": "write"}), secret=SECRET)
        eid = uid("Vehicle")
        r = src.req("POST", API + "/entities", tok, body={"id": eid, "type": "Vehicle",
                                                           "speed": {"type": "Property", "value": 3}})
        assert r.status_code == 201, r.text
        hub = broker_factory()
        for info, seen in (([], False), ([{"key": "Authorization", "value": "Bearer " + tok}], True)):
            tenant = "authcor%d" % int(seen)
            reg = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
                   "endpoint": "cor://127.0.0.1:%d" % cor_port}
            if info:
                reg["contextSourceInfo"] = info
            r = requests.post(hub.base + API + "/csourceRegistrations", json=reg,
                              headers={"NGSILD-Tenant": tenant}, timeout=10)
            assert r.status_code == 201, r.text
            r = requests.get(hub.base + API + "/entities", params={"type": "Vehicle"},
                             headers={"NGSILD-Tenant": tenant}, timeout=10)
            assert r.status_code == 200, r.text
            assert [e["id"] for e in r.json()] == ([eid] if seen else []), r.text
            assert ("NGSILD-Warning" in r.headers) != seen
    finally:
        src.stop()

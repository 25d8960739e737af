"""Context Source identity (5.15.1, 6.33, the type of 5.2.40):
GET /info/sourceIdentity with --brokerAlias, its default unique per instance
(host name and port), the alias of a tenant, and the JSON-LD form."""

import re
import socket
import time

from ngsi import API, CORE_CONTEXT_URL, DATETIME_RE, assert_problem

DURATION_RE = re.compile(r"^P(\d+D)?T(\d+H)?(\d+M)?\d+(\.\d{3})?S$")
MEMBERS = {"id", "type", "contextSourceAlias", "contextSourceUptime", "contextSourceTimeAt", "contextSourceExtras"}


def identity(cli, **kw):
    r = cli.get(API + "/info/sourceIdentity", **kw)
    assert r.status_code == 200, r.text
    return r


def test_6_33_source_identity(broker, make_client):
    c = make_client(broker, tenant=None)
    r = identity(c)
    assert r.headers["Content-Type"] == "application/json"
    assert CORE_CONTEXT_URL in r.headers["Link"]
    body = r.json()
    assert set(body) == MEMBERS, body
    assert body["type"] == "ContextSourceIdentity"
    assert re.match(r"^[a-z][a-z0-9+.-]*:", body["id"])                     # a URI
    assert body["contextSourceAlias"] == "%s:%d" % (socket.gethostname(), broker.port)
    assert DURATION_RE.match(body["contextSourceUptime"]), body
    assert DATETIME_RE.match(body["contextSourceTimeAt"]), body
    assert isinstance(body["contextSourceExtras"], dict) and body["contextSourceExtras"]["broker"] == "coraine"
    time.sleep(0.01)
    later = identity(c).json()
    assert later["contextSourceTimeAt"] > body["contextSourceTimeAt"]
    assert later["id"] == body["id"]


def test_5_15_1_broker_alias_and_tenant(broker_factory, make_client):
    b = broker_factory("--brokerAlias", "broker-a.example")
    c = make_client(b, tenant=None)
    body = identity(c).json()
    assert body["contextSourceAlias"] == "broker-a.example"
    t = identity(c, tenant="tenant1").json()                                # 4.14: one identity per tenant
    assert t["contextSourceAlias"] == "broker-a.example/tenant1" and t["id"] != body["id"]


def test_5_15_1_json_ld(broker, make_client):
    c = make_client(broker, tenant=None)
    r = identity(c, headers={"Accept": "application/ld+json"})
    assert r.headers["Content-Type"] == "application/ld+json"
    assert r.json()["@context"] == CORE_CONTEXT_URL


def test_6_33_errors(broker, make_client):
    c = make_client(broker, tenant=None)
    assert_problem(c.get(API + "/info/sourceIdentity", params={"x": "1"}), 400, "InvalidRequest")
    r = c.request("POST", API + "/info/sourceIdentity", json_body={})
    assert r.status_code == 405 and "GET" in r.headers["Allow"]


def test_flags_refused(tmp_path):
    """--brokerAlias goes into Via headers: one token; --publicUrl is an http(s) URL."""
    import subprocess
    from conftest import binary_path
    for flags in (["--brokerAlias", "two words"], ["--publicUrl", "ftp://x"], ["--publicUrl", "localhost:1026"]):
        p = subprocess.run([binary_path(), "-fg", "--port", "1", "--bind", "127.0.0.1"] + flags,
                           capture_output=True, timeout=15)
        assert p.returncode == 2 and flags[0].encode() in p.stderr, (flags, p.stderr)

"""Request ids and the access log (doc/operations.md): X-Request-Id taken from
the request or generated, echoed in every answer, on the log lines written
for the request and on forwarded requests; --accessLog in the combined log
format plus the request id and the duration."""
import os
import re
import signal
import time

import requests

from ngsi import uid
from test_shutdown import start

ACCESS = re.compile(r'^(\S+) - (\S+) \[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+) '
                    r'"([^"]*)" "([^"]*)" (\S+) (\d+)$')


def test_request_id_generated_and_echoed(broker):
    a = requests.get(broker.base + "/version", timeout=5).headers.get("X-Request-Id")
    b = requests.get(broker.base + "/version", timeout=5).headers.get("X-Request-Id")
    assert a and b and a != b and re.fullmatch(r"[0-9a-f]{16}", a)
    # errors carry it too
    r = requests.get(broker.base + "/ngsi-ld/v1/entities/urn:ngsi-ld:X:absent", timeout=5)
    assert r.status_code == 404 and r.headers.get("X-Request-Id")


def test_request_id_from_the_client_is_kept(broker):
    r = requests.get(broker.base + "/version", headers={"X-Request-Id": "abc-123.def"}, timeout=5)
    assert r.headers["X-Request-Id"] == "abc-123.def"
    # one that cannot go into a header or a log line unchanged is replaced
    r = requests.get(broker.base + "/version", headers={"X-Request-Id": "a b\"c"}, timeout=5)
    assert re.fullmatch(r"[0-9a-f]{16}", r.headers["X-Request-Id"])
    r = requests.get(broker.base + "/version", headers={"X-Request-Id": "x" * 200}, timeout=5)
    assert re.fullmatch(r"[0-9a-f]{16}", r.headers["X-Request-Id"])


def test_request_id_on_log_lines(tmp_path):
    p, base = start(tmp_path, "--logLevel", "debug")
    try:
        # a 5xx logs a line; a @context that cannot be had is one (503)
        r = requests.post(base + "/ngsi-ld/v1/entities", data='{"id":"urn:ngsi-ld:L:1","type":"L"}',
                          headers={"Content-Type": "application/json", "X-Request-Id": "trace-me-42",
                                   "Link": '<http://127.0.0.1:1/ctx.jsonld>; rel="http://www.w3.org/ns/json-ld#context"; '
                                           'type="application/ld+json"'}, timeout=30)
        assert r.status_code == 503 and r.headers["X-Request-Id"] == "trace-me-42"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(20)
    log = open([os.path.join(str(tmp_path), f) for f in os.listdir(str(tmp_path)) if f.endswith(".log")][0]).read()
    lines = [l for l in log.splitlines() if "[trace-me-42]" in l]
    assert lines, log[-2000:]
    assert any("503" in l for l in lines)


def test_access_log(tmp_path):
    path = str(tmp_path / "access.log")
    p, base = start(tmp_path, "--accessLog", path)
    try:
        eid = uid("urn:ngsi-ld:A:")
        r = requests.post(base + "/ngsi-ld/v1/entities", json={"id": eid, "type": "A"},
                          headers={"User-Agent": "pytest \"quoted\"", "Referer": "http://r/x"}, timeout=5)
        assert r.status_code == 201
        rid = r.headers["X-Request-Id"]
        r = requests.get(base + "/ngsi-ld/v1/entities?type=A&limit=5", timeout=5)
        assert r.status_code == 200
        n = len(r.content)
        deadline = time.time() + 3
        while time.time() < deadline and (not os.path.exists(path) or open(path).read().count("\n") < 3):
            time.sleep(0.05)
        lines = open(path).read().splitlines()
        m = [ACCESS.match(l) for l in lines]
        assert all(m), lines
        post = [x for x in m if x.group(4) == "POST"][0]
        assert post.group(1) == "127.0.0.1" and post.group(5) == "/ngsi-ld/v1/entities"
        assert post.group(6) == "HTTP/1.1" and post.group(7) == "201" and post.group(11) == rid
        assert post.group(10) == "pytest \\x22quoted\\x22" and post.group(9) == "http://r/x"
        get = [x for x in m if x.group(4) == "GET" and "type=A" in x.group(5)][0]
        assert get.group(5) == "/ngsi-ld/v1/entities?type=A&limit=5" and int(get.group(8)) == n
        # SIGHUP after logrotate moved it: a new file
        os.rename(path, path + ".1")
        p.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        requests.get(base + "/version", timeout=5)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(20)
    assert p.returncode == 0
    assert "/version" in open(path).read()


def test_request_id_on_forwarded_requests(broker_factory):
    from conftest import Client, fresh_tenant
    from mocksource import MockSource
    from test_distributed import register_mock
    hub = Client(broker_factory("--brokerAlias", "hub-rid"), fresh_tenant())
    m = MockSource(200, b"[]")
    try:
        hub.ensure_tenant()
        register_mock(hub, m)
        r = hub.get("/entities", params={"type": "Vehicle"}, headers={"X-Request-Id": "fwd-trace-1"})
        assert r.status_code == 200 and r.headers["X-Request-Id"] == "fwd-trace-1"
        assert m.requests and m.requests[-1][2].get("X-Request-Id") == "fwd-trace-1"
        # generated ids are forwarded too
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert m.requests[-1][2].get("X-Request-Id") == r.headers["X-Request-Id"]
    finally:
        m.close()
        hub.close()

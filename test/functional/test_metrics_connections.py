"""GET /metrics, connection counts and queue depths (doc/operations.md):
coraine_http_connections_total / _refused_total / _cut_total next to the
open gauge, and coraine_notify_queued_max, the longest endpoint queue."""
import socket
import time

from conftest import Client, fresh_tenant
from ngsi import read_answer, uid
from receiver import Receiver
from test_metrics import scrape


def test_connections_accepted_refused_and_cut(broker_factory):
    b = broker_factory("--maxConnections", "3", "--headerTimeout", "1")
    before, types = scrape(b)
    for name in ("coraine_http_connections_total", "coraine_http_connections_refused_total",
                 "coraine_http_connections_cut_total"):
        assert types[name] == "counter", name
    # 3 connections that never complete their head (cut with 408 at 1 s) and a 4th beyond
    # --maxConnections (503 at once). A connection of an earlier round or scrape may still hold a slot
    # while it closes, which turns a held one into a 503: the round is then tried again.
    for attempt in range(4):
        time.sleep(1.5)                   # the scrape's connection is closed or cut by now
        before, _ = scrape(b)
        held = [socket.create_connection(("127.0.0.1", b.port), timeout=10) for _ in range(3)]
        for s in held:
            s.sendall(b"GET /version HTTP/1.1\r\n")
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        extra.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        ans = read_answer(extra)
        extra.close()
        answers = [ans] + [read_answer(s) for s in held]
        for s in held:
            s.close()
        codes = sorted(a[0] for a in answers if a)
        assert codes and set(codes) <= {408, 503} and codes.count(503) >= 1, codes
        if codes.count(408) >= 2:
            break
    assert codes.count(408) >= 2, codes
    deadline = time.time() + 5
    while True:
        try:
            after, _ = scrape(b)
            break
        except Exception:
            assert time.time() < deadline
            time.sleep(0.1)
    d = lambda k: after[k] - before[k]  # noqa: E731
    assert d("coraine_http_connections_refused_total") >= codes.count(503)
    assert d("coraine_http_connections_cut_total") >= codes.count(408)
    assert d("coraine_http_connections_total") >= 5       # 3 held, the extra, this scrape


def test_notify_queued_max_is_the_longest_endpoint_queue(broker_factory):
    b = broker_factory("--brokerAlias", "metrics-queues")
    cli = Client(b, fresh_tenant())
    slow = Receiver("--delay", "300")
    try:
        s, types = scrape(b)
        assert types["coraine_notify_queued_max"] == "gauge"
        r = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Q"}],
                                        "notification": {"endpoint": {"uri": slow.uri}}})
        assert r.status_code == 201, r.text
        eid = uid("urn:ngsi-ld:Q:")
        cli.create({"id": eid, "type": "Q", "v": {"type": "Property", "value": 0}})
        for i in range(20):
            assert cli.patch("/entities/%s/attrs" % eid, {"v": {"type": "Property", "value": i}}).status_code == 204
        s, _ = scrape(b)
        assert 1 <= s["coraine_notify_queued_max"] <= s["coraine_notify_queued"]
        deadline = time.time() + 20
        while s["coraine_notify_queued"] and time.time() < deadline:
            time.sleep(0.2)
            s, _ = scrape(b)
        assert s["coraine_notify_queued_max"] == 0
    finally:
        slow.stop()
        cli.close()

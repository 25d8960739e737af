"""GET /metrics, queue depths per endpoint (doc/operations.md):
coraine_notify_endpoint_queued, the notifications waiting in each endpoint's
queue (the 64 deepest; the others added up under "other"; the endpoint shown
without user information or query), and coraine_forward_source_in_flight,
the requests sent to a context source and not answered yet."""
import time

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import in_thread, uid
from receiver import Receiver
from test_metrics import scrape, value
from test_metrics_forwarding import register


def subscribe(cli, uri, etype):
    r = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": etype}],
                                    "notification": {"endpoint": {"uri": uri}}})
    assert r.status_code == 201, r.text


def test_notify_queue_depth_per_endpoint(broker_factory):
    b = broker_factory("--brokerAlias", "metrics-endpoint-queues")
    cli = Client(b, fresh_tenant())
    slow, fast = Receiver("--delay", "300"), Receiver()
    try:
        port = slow.base.rsplit(":", 1)[1]
        subscribe(cli, "http://someone:secret@127.0.0.1:%s/notify?token=hidden" % port, "Q")
        subscribe(cli, fast.uri, "Q")
        eid = uid("urn:ngsi-ld:Q:")
        cli.create({"id": eid, "type": "Q", "v": {"type": "Property", "value": 0}})
        for i in range(20):
            assert cli.patch("/entities/%s/attrs" % eid, {"v": {"type": "Property", "value": i}}).status_code == 204
        s, types = scrape(b)
        assert types["coraine_notify_endpoint_queued"] == "gauge"
        shown = "http://127.0.0.1:%s/notify" % port
        depth = value(s, "coraine_notify_endpoint_queued", endpoint=shown)
        assert depth >= 1 and depth == s["coraine_notify_queued_max"], s
        assert "coraine_notify_endpoint_queued{endpoint=\"%s\"}" % fast.uri in s
        series = [k for k in s if k.startswith("coraine_notify_endpoint_queued{")]
        assert sum(s[k] for k in series) == s["coraine_notify_queued"]
        text = "\n".join(s)
        assert "secret" not in text and "someone" not in text and "hidden" not in text
        deadline = time.time() + 20
        while s["coraine_notify_queued"] and time.time() < deadline:
            time.sleep(0.2)
            s, _ = scrape(b)
        assert value(s, "coraine_notify_endpoint_queued", endpoint=shown) == 0
    finally:
        slow.stop()
        fast.stop()
        cli.close()


def test_notify_queues_beyond_64_endpoints_share_the_other_series(broker_factory):
    b = broker_factory("--brokerAlias", "metrics-endpoint-queues-many")
    cli = Client(b, fresh_tenant())
    r = Receiver()
    try:
        for i in range(70):
            subscribe(cli, "%s/e%02d" % (r.base, i), "R")
        s, _ = scrape(b)
        series = [k for k in s if k.startswith("coraine_notify_endpoint_queued{")]
        assert len(series) == 65, sorted(series)
        assert "coraine_notify_endpoint_queued{endpoint=\"other\"}" in s
        assert s["coraine_notify_endpoints"] >= 70
    finally:
        r.stop()
        cli.close()


def test_forward_in_flight_per_source(broker_factory):
    # 6 s in flight: a scrape on a loaded machine (on mongoc, per-tenant sizes
    # from the database) must not outlast the forward
    b = broker_factory("--brokerAlias", "metrics-forward-in-flight", "--forwardTimeout", "10000")
    hub = Client(b, fresh_tenant())
    slow = MockSource(delay=6)
    try:
        register(hub, slow.base)
        answer = {}
        t = in_thread(lambda: hub.get("/entities", params={"type": "Vehicle"}), answer)
        seen = 0
        deadline = time.time() + 15          # in flight until the query is answered
        while time.time() < deadline and not seen and t.is_alive():
            s, types = scrape(b)
            seen = value(s, "coraine_forward_source_in_flight", source=slow.base)
            time.sleep(0.05)
        t.join(20)
        assert types["coraine_forward_source_in_flight"] == "gauge"
        assert seen == 1, (answer, slow.requests if hasattr(slow, "requests") else None)
        s, _ = scrape(b)
        assert value(s, "coraine_forward_source_in_flight", source=slow.base) == 0
        assert "coraine_forward_source_in_flight{source=\"%s\"}" % slow.base in s
    finally:
        slow.close()
        hub.close()

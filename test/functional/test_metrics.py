"""GET /metrics (Prometheus text format 0.0.4), GET /health and GET /ready
(doc/operations.md): what an operator scrapes and what a load balancer asks."""
import re

import requests

from ngsi import uid
from receiver import Receiver

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})? (\S+)$')


def scrape(broker):
    r = requests.get(broker.base + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples, types = {}, {}
    for line in r.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = LINE.match(line)
        assert m, "not an exposition line: %r" % line
        float(m.group(3))
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples, types


def value(samples, name, **labels):
    want = "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}" if labels else ""
    return samples.get(name + want, 0.0)


def test_metrics_format_and_every_family(broker):
    samples, types = scrape(broker)
    for name, kind in [("coraine_http_requests_total", "counter"),
                       ("coraine_http_request_duration_seconds", "histogram"),
                       ("coraine_http_connections_open", "gauge"),
                       ("coraine_store_entities", "gauge"),
                       ("coraine_store_tenants", "gauge"),
                       ("coraine_notify_due_total", "counter"),
                       ("coraine_notify_sent_total", "counter"),
                       ("coraine_notify_failed_total", "counter"),
                       ("coraine_notify_dropped_total", "counter"),
                       ("coraine_notify_queued", "gauge"),
                       ("coraine_forward_requests_total", "counter"),
                       ("coraine_context_cache_hits_total", "counter"),
                       ("coraine_process_resident_bytes", "gauge"),
                       ("coraine_build_info", "gauge")]:
        assert types.get(name) == kind, name
    # every family is announced once
    text = requests.get(broker.base + "/metrics", timeout=10).text
    tl = [l for l in text.splitlines() if l.startswith("# TYPE ")]
    assert len(tl) == len(set(tl))


def test_block_pool_gauges_follow_the_entities(broker, cli):
    """coraine_block_pool_* (blockpool.c, doc/operations.md): 200 entities add to the pool's bytes,
    deleting them takes those bytes away again (an ASan build keeps entities malloc'd: all 0)."""
    pooled = requests.get(broker.base + "/version", timeout=10).json()["hugePages"]
    before, types = scrape(broker)
    for name in ("coraine_block_pool_bytes", "coraine_block_pool_slab_bytes", "coraine_block_pool_released_bytes"):
        assert types.get(name) == "gauge", name
    ids = [uid("urn:ngsi-ld:Pooled:") for _ in range(200)]
    r = cli.post("/entityOperations/create", [{"id": i, "type": "Pooled", "note": {"type": "Property", "value": "x" * 300}}
                                              for i in ids])
    assert r.status_code == 201, r.text
    mid, _ = scrape(broker)
    grown = value(mid, "coraine_block_pool_bytes") - value(before, "coraine_block_pool_bytes")
    assert (grown >= 200 * 300) if pooled else (grown == 0), grown
    assert value(mid, "coraine_block_pool_slab_bytes") >= value(mid, "coraine_block_pool_bytes")
    assert cli.post("/entityOperations/delete", ids).status_code == 204
    after, _ = scrape(broker)
    # other tests' entities come and go on this broker too: the 200 are gone, give or take theirs
    assert value(after, "coraine_block_pool_bytes") <= value(mid, "coraine_block_pool_bytes") - grown + 64 * 1024


def test_requests_counted_by_operation_and_class(broker, cli):
    eid = uid("urn:ngsi-ld:M:")
    before, _ = scrape(broker)
    cli.create({"id": eid, "type": "M", "n": {"type": "Property", "value": 1}})
    for i in range(3):
        assert cli.patch("/entities/%s/attrs" % eid, {"n": {"type": "Property", "value": i}}).status_code == 204
    assert cli.get("/entities/urn:ngsi-ld:M:absent").status_code == 404
    after, _ = scrape(broker)
    op = dict(route="/ngsi-ld/v1/entities/{id}/attrs", method="PATCH", **{"class": "2xx"})
    assert value(after, "coraine_http_requests_total", **op) - value(before, "coraine_http_requests_total", **op) == 3
    op = dict(route="/ngsi-ld/v1/entities/{id}", method="GET", **{"class": "4xx"})
    assert value(after, "coraine_http_requests_total", **op) - value(before, "coraine_http_requests_total", **op) == 1
    lab = dict(route="/ngsi-ld/v1/entities/{id}/attrs", method="PATCH")
    cnt = value(after, "coraine_http_request_duration_seconds_count", **lab)
    inf = value(after, "coraine_http_request_duration_seconds_bucket", **dict(lab, le="+Inf"))
    assert cnt == inf and cnt >= 3
    assert value(after, "coraine_http_request_duration_seconds_sum", **lab) > 0
    # buckets are cumulative
    prev = 0
    for le in ["0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
               "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]:
        v = value(after, "coraine_http_request_duration_seconds_bucket", **dict(lab, le=le))
        assert v >= prev
        prev = v
    # a route that matched nothing
    requests.get(broker.base + "/nowhere", timeout=5)
    s, _ = scrape(broker)
    assert value(s, "coraine_http_requests_total", route="(none)", method="GET", **{"class": "4xx"}) >= 1


def test_store_entities_per_tenant(broker, cli):
    for i in range(4):
        cli.create({"id": uid("urn:ngsi-ld:M:"), "type": "M"})
    s, _ = scrape(broker)
    assert value(s, "coraine_store_entities", tenant=cli.tenant) == 4
    assert 'coraine_store_entities{tenant=""}' in s


def test_notifications_counted(broker, cli):
    rcv = Receiver()
    try:
        before, _ = scrape(broker)
        r = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "N"}],
                                        "notification": {"endpoint": {"uri": rcv.uri}}})
        assert r.status_code == 201
        cli.create({"id": uid("urn:ngsi-ld:N:"), "type": "N", "v": {"type": "Property", "value": 1}})
        rcv.wait(1)
        after, _ = scrape(broker)
        assert after["coraine_notify_due_total"] > before["coraine_notify_due_total"]
        import time
        deadline = time.time() + 5
        while after["coraine_notify_sent_total"] <= before["coraine_notify_sent_total"] and time.time() < deadline:
            time.sleep(0.05)
            after, _ = scrape(broker)
        assert after["coraine_notify_sent_total"] > before["coraine_notify_sent_total"]
        assert after["coraine_notify_subscriptions"] >= 1
    finally:
        rcv.stop()


def test_disk_store_log_metrics(broker_factory, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("metricsdb"))
    b = broker_factory("--dbDir", d, "--dbSync", "always")
    r = requests.post(b.base + "/ngsi-ld/v1/entities", json={"id": uid("urn:ngsi-ld:D:"), "type": "D"}, timeout=10)
    assert r.status_code == 201
    s, types = scrape(b)
    assert s["coraine_store_log_fsyncs_total"] >= 1
    assert s["coraine_store_log_records_total"] >= 1
    assert "coraine_store_log_fsync_seconds_total" in s
    assert s["coraine_store_log_failed"] == 0


def test_log_fsync_latency_histogram(broker_factory, tmp_path_factory):
    # coraine_log_fsync_seconds: every fdatasync of the store's log and of
    # corDB history's history.log, in buckets from 50 us to 1 s
    d = str(tmp_path_factory.mktemp("fsynchist"))
    b = broker_factory("--dbDir", d, "--dbSync", "always", "--history", "corDB")
    eid = uid("urn:ngsi-ld:D:")
    r = requests.post(b.base + "/ngsi-ld/v1/entities", timeout=10,
                      json={"id": eid, "type": "D", "p": {"type": "Property", "value": 1}})
    assert r.status_code == 201
    for v in range(2, 5):
        r = requests.patch(b.base + "/ngsi-ld/v1/entities/%s/attrs" % eid, timeout=10,
                           json={"p": {"type": "Property", "value": v}})
        assert r.status_code == 204
    s, types = scrape(b)
    assert types.get("coraine_log_fsync_seconds") == "histogram"
    bounds = ["5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
              "0.05", "0.1", "0.25", "0.5", "1", "+Inf"]
    for log in ("store", "history"):
        cum = [value(s, "coraine_log_fsync_seconds_bucket", log=log, le=le) for le in bounds]
        assert all(x <= y for x, y in zip(cum, cum[1:])), (log, cum)
        n = value(s, "coraine_log_fsync_seconds_count", log=log)
        assert cum[-1] == n and n >= 1, (log, cum, n)
        assert value(s, "coraine_log_fsync_seconds_sum", log=log) > 0
    # the store's: one observation per fdatasync counted
    assert value(s, "coraine_log_fsync_seconds_count", log="store") == s["coraine_store_log_fsyncs_total"]


def test_health_and_ready(broker):
    r = requests.get(broker.base + "/health", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = requests.get(broker.base + "/ready", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    assert requests.head(broker.base + "/ready", timeout=5).status_code == 200


def test_ready_503_while_the_history_database_is_down(tmp_path):
    """/ready: 200 with PostgreSQL up, 503 (ProblemDetails) while it is down,
    200 again when it is back; /health stays 200 throughout."""
    import pytest
    from pg import PgServer
    from test_shutdown import start
    try:
        pg = PgServer()
    except RuntimeError as e:
        pytest.skip(str(e))
    p = None
    try:
        p, base = start(tmp_path, "--history", "timescale", "--historyURI", pg.uri(pg.new_database()))
        assert requests.get(base + "/ready", timeout=10).status_code == 200
        s = requests.get(base + "/metrics", timeout=10).text
        assert "coraine_history_reachable 1" in s and "coraine_history_queued 0" in s
        pg.stop()
        r = requests.get(base + "/ready", timeout=10)
        assert r.status_code == 503
        pd = r.json()
        assert pd["status"] == 503 and "history" in pd["detail"]
        assert requests.get(base + "/health", timeout=5).status_code == 200
        assert "coraine_history_reachable 0" in requests.get(base + "/metrics", timeout=10).text
        pg.start()
        assert requests.get(base + "/ready", timeout=10).status_code == 200
    finally:
        if p is not None:
            p.terminate()
            p.wait(20)
        pg.close()

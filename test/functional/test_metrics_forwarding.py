"""GET /metrics, the forwarded requests per context source
(coraine_forward_source_calls_total by result, coraine_forward_source_duration_seconds;
doc/operations.md): an answering source, a failing one, one that does not
answer in time, one nobody listens on, the endpoint shown without user
information, and the bound on the number of series."""
import pytest

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import free_port
from test_metrics import scrape, value


@pytest.fixture
def hub(broker_factory):
    b = broker_factory("--brokerAlias", "metrics-forwarding")
    c = Client(b, fresh_tenant())
    yield c
    c.close()


def register(hub, endpoint, **members):
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": endpoint}
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def calls(samples, source, result):
    return value(samples, "coraine_forward_source_calls_total", source=source, result=result)


def test_forward_calls_per_source_by_result_and_latency(hub):
    ok, bad, slow = MockSource(), MockSource(500, b'{"type":"x"}'), MockSource(delay=2)
    dead = "http://127.0.0.1:%d" % free_port()
    try:
        register(hub, ok.base + "/base/")
        register(hub, bad.base)
        register(hub, slow.base, management={"timeout": 200})
        register(hub, dead)
        before, types = scrape(hub.broker)
        for _ in range(2):
            assert hub.get("/entities", params={"type": "Vehicle"}).status_code == 200
        s, types = scrape(hub.broker)
        assert types["coraine_forward_source_calls_total"] == "counter"
        assert types["coraine_forward_source_duration_seconds"] == "histogram"
        src = ok.base + "/base"                        # the endpoint, trailing slashes dropped
        assert calls(s, src, "2xx") - calls(before, src, "2xx") == 2
        assert calls(s, bad.base, "5xx") - calls(before, bad.base, "5xx") == 2
        assert calls(s, slow.base, "timeout") - calls(before, slow.base, "timeout") == 2
        assert calls(s, dead, "error") - calls(before, dead, "error") == 2
        # the histogram: cumulative, count = +Inf = every call of the source
        for source, n in ((src, 2), (slow.base, 2)):
            lab = {"source": source}
            cnt = value(s, "coraine_forward_source_duration_seconds_count", **lab)
            assert cnt == value(s, "coraine_forward_source_duration_seconds_bucket", **dict(lab, le="+Inf")) == n
            prev = 0
            for le in ("0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5",
                       "5", "10", "+Inf"):
                v = value(s, "coraine_forward_source_duration_seconds_bucket", **dict(lab, le=le))
                assert v >= prev
                prev = v
        # the time-out is 200 ms: both slow calls took at least 0.1 s and at most 1 s
        lab = {"source": slow.base}
        assert value(s, "coraine_forward_source_duration_seconds_bucket", **dict(lab, le="0.1")) == 0
        assert value(s, "coraine_forward_source_duration_seconds_bucket", **dict(lab, le="1")) == 2
        assert value(s, "coraine_forward_source_duration_seconds_sum", **lab) >= 0.35
        # the totals agree with the per-source series
        assert s["coraine_forward_requests_total"] - before.get("coraine_forward_requests_total", 0) == 8
    finally:
        for m in (ok, bad, slow):
            m.close()


def test_forward_source_label_has_no_user_information_or_query(hub):
    m = MockSource()
    try:
        port = m.base.rsplit(":", 1)[1]
        register(hub, "http://someone:secret@127.0.0.1:%s/ld?x=1" % port)
        assert hub.get("/entities", params={"type": "Vehicle"}).status_code == 200
        s, _ = scrape(hub.broker)
        assert calls(s, "http://127.0.0.1:%s/ld" % port, "2xx") >= 1
        text = "\n".join(s)
        assert "secret" not in text and "someone" not in text
    finally:
        m.close()


def test_forward_sources_beyond_64_share_the_other_series(broker_factory):
    b = broker_factory("--brokerAlias", "metrics-forwarding-many")
    hub = Client(b, fresh_tenant())
    m = MockSource()
    try:
        for i in range(70):
            register(hub, "%s/s%02d" % (m.base, i))
        assert hub.get("/entities", params={"type": "Vehicle"}).status_code == 200
        s, _ = scrape(b)
        series = {k for k in s if k.startswith("coraine_forward_source_calls_total{")}
        assert len(series) == 65, sorted(series)
        assert calls(s, "other", "2xx") == 6
        assert sum(calls(s, "%s/s%02d" % (m.base, i), "2xx") for i in range(70)) == 64
    finally:
        m.close()
        hub.close()

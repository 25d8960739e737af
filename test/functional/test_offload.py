"""Requests that may wait for context sources run off the HTTP workers
(http_set_offload, --forwardThreads; doc/architecture.md "Threads"): a
forwarded query or retrieve (5.7.2 and 5.7.1 distributed, 4.3.6) to a source
that answers late holds back no other request, on a broker with a single
HTTP worker (--connectionPoolSize 1), where the worker itself would otherwise
wait the source's whole delay. Writes of a tenant with registrations are
handed over before their handler runs, reads only when they ask a source."""
import time

import requests

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import in_thread, uid
from test_metrics import scrape, value
from test_metrics_forwarding import register


def slow_query(cli, answer, path="/entities", params=None):
    return in_thread(lambda: cli.get(path, params=params or {"type": "Vehicle"}), answer)


def wait_in_flight(b, source, deadline_s=10):
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        s, _ = scrape(b)
        if value(s, "coraine_forward_source_in_flight", source=source) >= 1:
            return s
        time.sleep(0.05)
    raise AssertionError("the forward to %s never showed in flight" % source)


def test_5_7_2_a_slow_source_holds_back_no_other_request(broker_factory):
    b = broker_factory("--brokerAlias", "offload-one-worker", "--connectionPoolSize", "1",
                       "--forwardTimeout", "10000")
    hub, other = Client(b, fresh_tenant()), Client(b, fresh_tenant())
    slow = MockSource(delay=4)
    try:
        register(hub, slow.base)
        eid = uid("urn:ngsi-ld:Car:")
        assert other.create({"id": eid, "type": "Car", "speed": {"type": "Property", "value": 1}}).status_code == 201
        answer = {}
        t = slow_query(hub, answer)
        wait_in_flight(b, slow.base)
        # a scrape is no snapshot: its HTTP gauges are read before the
        # forwarding ones (and, on mongoc, before a round trip to the
        # database), so the pool thread may dequeue the query in between;
        # a scrape after the forward showed is taken while it still waits
        s, _ = scrape(b)
        assert value(s, "coraine_http_offload_running") >= 1
        # while the forward waits: another tenant's retrieve and write, the hub
        # tenant's own local query, and the probes, each answered at once
        t0 = time.time()
        assert other.get("/entities/" + eid).status_code == 200
        assert other.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 2}}).status_code == 204
        r = hub.get("/entities", params={"type": "Vehicle", "local": "true"})
        assert r.status_code == 200 and r.json() == []
        assert requests.get(b.base + "/health", timeout=5).status_code == 200
        took = time.time() - t0
        assert t.is_alive(), "the slow forward was answered before the other requests were made"
        assert took < 2, took
        t.join(15)
        assert answer["status"] == 200 and answer["seconds"] >= 3.5, answer
        s, _ = scrape(b)
        # the slow query, not the local one: a read is handed over when it asks a source
        assert value(s, "coraine_http_offloaded_total") == 1
        assert value(s, "coraine_http_offload_running") == 0
        assert value(s, "coraine_http_offload_queued") == 0
    finally:
        slow.close()
        hub.close()
        other.close()


def test_5_7_1_retrieves_through_one_slow_source_wait_in_parallel(broker_factory):
    # four retrieves forwarded to a source that answers after 2 s, on one
    # HTTP worker: they wait side by side on the forwarding threads, not one
    # after another on the worker
    b = broker_factory("--brokerAlias", "offload-parallel", "--connectionPoolSize", "1", "--forwardThreads", "4",
                       "--forwardTimeout", "10000")
    hub = Client(b, fresh_tenant())
    slow = MockSource(delay=2)
    try:
        register(hub, slow.base)
        answers = [{} for _ in range(4)]
        t0 = time.time()
        threads = [slow_query(Client(b, hub.tenant), a, "/entities/" + uid("urn:ngsi-ld:Vehicle:"),
                              {"type": "Vehicle"}) for a in answers]
        for t in threads:
            t.join(15)
        took = time.time() - t0
        assert all(a.get("status") == 404 for a in answers), answers    # found nowhere (the source answers [])
        assert took < 5, took                                             # serially: 8 s
    finally:
        slow.close()
        hub.close()


def test_writes_of_a_tenant_with_registrations_wait_off_the_worker(broker_factory):
    # 5.6.3 distributed: a PATCH of attributes registered at a slow source
    # (inclusive: written here and forwarded) does not hold back the worker
    b = broker_factory("--brokerAlias", "offload-write", "--connectionPoolSize", "1", "--forwardTimeout", "10000")
    hub, other = Client(b, fresh_tenant()), Client(b, fresh_tenant())
    slow = MockSource(status=204, body=b"", delay=3)
    try:
        eid = uid("urn:ngsi-ld:Vehicle:")
        assert hub.create({"id": eid, "type": "Vehicle", "speed": {"type": "Property", "value": 1}}).status_code == 201
        register(hub, slow.base, information=[{"entities": [{"id": eid, "type": "Vehicle"}], "propertyNames": ["speed"]}],
                 mode="inclusive", operations=["redirectionOps"])
        local = uid("urn:ngsi-ld:Car:")
        assert other.create({"id": local, "type": "Car"}).status_code == 201
        answer = {}
        t = in_thread(lambda: hub.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 2}}),
                      answer)
        wait_in_flight(b, slow.base)
        t0 = time.time()
        assert other.get("/entities/" + local).status_code == 200
        assert time.time() - t0 < 2
        assert t.is_alive()
        t.join(15)
        assert answer["status"] in (204, 207) and answer["seconds"] >= 2.5, answer
    finally:
        slow.close()
        hub.close()
        other.close()


def test_tenants_without_registrations_stay_on_their_worker(broker_factory):
    b = broker_factory("--brokerAlias", "offload-none")
    cli = Client(b, fresh_tenant())
    try:
        eid = uid("urn:ngsi-ld:Car:")
        assert cli.create({"id": eid, "type": "Car"}).status_code == 201
        assert cli.get("/entities/" + eid).status_code == 200
        s, _ = scrape(b)
        assert value(s, "coraine_http_offloaded_total") == 0
    finally:
        cli.close()


def test_4_20_writes_stay_on_the_worker_when_no_registration_takes_writes(broker_factory):
    # Table 4.20-2: federationOps (the default) and retrieveOps take no entity
    # write, so a write in such a tenant cannot forward: it stays on its worker
    # (a device's PATCH of a hub tenant pays no hand-off), while a local read
    # that asks no source stays there too; a registration with redirectionOps
    # sends the tenant's writes to the pool, and removing it brings them back
    b = broker_factory("--brokerAlias", "offload-ops")
    hub = Client(b, fresh_tenant())
    src = MockSource(status=204, body=b"")
    try:
        eid = uid("urn:ngsi-ld:Car:")
        assert hub.create({"id": eid, "type": "Car", "speed": {"type": "Property", "value": 1}}).status_code == 201
        register(hub, src.base)                                      # federationOps, for Vehicles
        register(hub, src.base, operations=["retrieveOps"])

        def writes_offloaded():
            s, _ = scrape(b)
            before = value(s, "coraine_http_offloaded_total")
            assert hub.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property", "value": 2}}).status_code == 204
            assert hub.get("/entities/" + eid, params={"local": "true"}).status_code == 200
            s, _ = scrape(b)
            return value(s, "coraine_http_offloaded_total") - before
        assert writes_offloaded() == 0
        rid = register(hub, src.base, information=[{"entities": [{"type": "Truck"}]}], operations=["redirectionOps"])
        assert writes_offloaded() == 1                               # the PATCH, not the local read
        assert hub.delete("/csourceRegistrations/" + rid).status_code == 204
        assert writes_offloaded() == 0
    finally:
        src.close()
        hub.close()


def test_forward_threads_is_checked(broker_factory):
    import subprocess
    from conftest import binary_path
    r = subprocess.run([binary_path(), "-fg", "--port", "1", "--forwardThreads", "0"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode != 0 and "--forwardThreads must be 1..1024" in r.stderr

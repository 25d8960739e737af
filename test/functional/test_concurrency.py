"""Concurrent writers on one entity lose nothing (issue 3, "Concurrency")."""

import concurrent.futures

from conftest import Client
from ngsi import entity, prop, uid

THREADS = 8
ROUNDS = 50


def test_parallel_patches_of_different_attributes_lose_none(broker, cli):
    eid = uid("Busy")
    cli.create(entity(eid, "Busy", **{"t%d" % i: prop(-1) for i in range(THREADS)}))

    def writer(i):
        c = Client(broker, cli.tenant)
        try:
            for j in range(ROUNDS):
                # 6.7.3.1 on its own attribute, and 6.5.3.4 adding a fresh one each round
                r = c.patch("/entities/%s/attrs/t%d" % (eid, i), {"value": j})
                assert r.status_code == 204, r.text
                r = c.patch("/entities/" + eid, {"n%d_%d" % (i, j): prop(j)})
                assert r.status_code == 204, r.text
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        for f in [ex.submit(writer, i) for i in range(THREADS)]:
            f.result()

    e = cli.entity(eid)
    for i in range(THREADS):
        assert e["t%d" % i] == prop(ROUNDS - 1), "t%d lost updates: %r" % (i, e["t%d" % i])
        for j in range(ROUNDS):
            assert e.get("n%d_%d" % (i, j)) == prop(j), "n%d_%d lost" % (i, j)
    assert len(e) == 2 + THREADS + THREADS * ROUNDS


def test_parallel_appends_to_one_entity_lose_none(broker, cli):
    eid = uid("Busy")
    cli.create(entity(eid, "Busy"))

    def writer(i):
        c = Client(broker, cli.tenant)
        try:
            for j in range(ROUNDS):
                r = c.post("/entities/%s/attrs" % eid, {"a%d_%d" % (i, j): prop(i * 1000 + j)})
                assert r.status_code == 204, r.text
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        for f in [ex.submit(writer, i) for i in range(THREADS)]:
            f.result()
    e = cli.entity(eid)
    assert len(e) == 2 + THREADS * ROUNDS


def test_parallel_creates_of_one_id_exactly_one_wins(broker, cli):
    cli.ensure_tenant()
    eid = uid("Race")

    def create(i):
        c = Client(broker, cli.tenant)
        try:
            return c.post("/entities", entity(eid, "Race", who=prop(i))).status_code
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        codes = list(ex.map(create, range(THREADS * 2)))
    assert codes.count(201) == 1
    assert codes.count(409) == THREADS * 2 - 1

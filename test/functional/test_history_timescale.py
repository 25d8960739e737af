

def test_concurrent_writers_through_a_small_queue_lose_nothing(broker_factory, pg_server, make_client):
    """8 writers through a queue of 16: they wait for room in turn; every
    acknowledged PATCH has exactly one instance, in commit order per entity."""
    import threading
    db = pg_server.new_database()
    b = ts_broker(broker_factory, pg_server.uri(db), "--historyQueueSize", "16")
    c = make_client(b)
    ids = [uid("Vehicle") for _ in range(8)]
    c.batch_create([vehicle(e, 0) for e in ids])
    ok = [0] * len(ids)

    def run(k):
        w = Client(b, c.tenant)
        for v in range(1, 101):
            r = w.patch("/entities/%s/attrs" % ids[k], {"speed": {"type": "Property", "value": v}})
            assert r.status_code == 204, r.text
            ok[k] += 1
        w.close()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ok == [100] * len(ids)
    for e in ids:
        assert speeds(tget(c, e, lastN=1000)) == list(range(0, 101))
    assert pg_server.psql("SELECT count(*) FROM coraine_instances", db) == str(8 * 101)

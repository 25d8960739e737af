"""corDB on disk, --dbSync always: the writes of stored objects (subscriptions
5.8, context source registrations 5.9, their subscriptions 5.11, hosted
@contexts 5.13) are held answers like the entity writes (doc/cordb.md "Held
answers"): answered by the log's thread after their fdatasync, with no HTTP
worker waiting; a failed fdatasync answers 503 and takes the object back
everywhere it took effect (the store, notify/'s registry, reg/'s registry,
ld/'s hosted contexts), and an acknowledged one survives kill -9.
Faults come from the LD_PRELOAD shim (build/<variant>/faultshim.so).
"""
import concurrent.futures
import http.server
import threading
import time
from urllib.parse import quote

import requests

from test_cordb_disk import API, A, JSON, T, DiskBroker, no_broker_left, dbdir  # noqa: F401 (fixtures)
from test_cordb_held import held

LD = {"Content-Type": "application/ld+json"}


class Sink:
    """A loopback HTTP endpoint that answers 200 [] and counts what it gets."""

    def __init__(self):
        hits = self.hits = []

        class H(http.server.BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                hits.append((self.command, self.path))
                body = b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = _any

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.uri = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def sub(sid, uri, q=None):
    s = {"id": sid, "type": "Subscription", "entities": [{"type": T}],
         "notification": {"endpoint": {"uri": uri + "/notify"}}}
    if q:
        s["q"] = q
    return s


def reg(rid, uri):
    return {"id": rid, "type": "ContextSourceRegistration", "information": [{"entities": [{"type": T}]}],
            "endpoint": uri}


def csub(sid, uri):
    return {"id": sid, "type": "Subscription", "entities": [{"type": T}],
            "notification": {"endpoint": {"uri": uri + "/cnotify"}}}


def ctx(b, value):
    return requests.post(b.base + API + "/jsonldContexts", headers=JSON, json={"@context": value}, timeout=30)


def get(b, path):
    return requests.get(b.base + API + path, timeout=15)


def assert_503(r):
    assert r.status_code == 503, (r.status_code, r.text)
    p = r.json()
    assert p["type"] and p["title"] and p["detail"], p


def test_object_writes_are_answered_by_the_syncer(dbdir, tmp_path):
    """Each kind's create, update and delete is a held answer (heldWrites
    goes up by one per write), and what was acknowledged is there after
    kill -9 right after the answers."""
    sink = Sink()
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    try:
        h0 = held(b)
        writes = [
            lambda: requests.post(b.base + API + "/subscriptions", headers=JSON,
                                  json=sub("urn:s:1", sink.uri), timeout=15),
            lambda: requests.patch(b.base + API + "/subscriptions/urn:s:1", headers=JSON,
                                   json={"q": "v>1"}, timeout=15),
            lambda: requests.post(b.base + API + "/subscriptions", headers=JSON,
                                  json=sub("urn:s:gone", sink.uri), timeout=15),
            lambda: requests.delete(b.base + API + "/subscriptions/urn:s:gone", timeout=15),
            lambda: requests.post(b.base + API + "/csourceRegistrations", headers=JSON,
                                  json=reg("urn:r:1", sink.uri), timeout=15),
            lambda: requests.patch(b.base + API + "/csourceRegistrations/urn:r:1", headers=JSON,
                                   json={"registrationName": "n2"}, timeout=15),
            lambda: requests.post(b.base + API + "/csourceSubscriptions", headers=JSON,
                                  json=csub("urn:c:1", sink.uri), timeout=15),
            lambda: requests.delete(b.base + API + "/csourceSubscriptions/urn:c:1", timeout=15),
        ]
        for i, w in enumerate(writes):
            r = w()
            assert r.status_code in (201, 204), (i, r.status_code, r.text)
            assert held(b) == h0 + i + 1, i
        r = ctx(b, {"k": "http://example.org/k"})
        assert r.status_code == 201, r.text
        cid = r.headers["Location"].rsplit("/", 1)[1]
        assert held(b) == h0 + len(writes) + 1
        b.kill()
        b = DiskBroker(dbdir, str(tmp_path))
        s = get(b, "/subscriptions/urn:s:1")
        assert s.status_code == 200 and s.json()["q"] == "v>1", s.text
        assert get(b, "/subscriptions/urn:s:gone").status_code == 404
        g = get(b, "/csourceRegistrations/urn:r:1")
        assert g.status_code == 200 and g.json()["registrationName"] == "n2", g.text
        assert get(b, "/csourceSubscriptions/urn:c:1").status_code == 404
        assert get(b, "/jsonldContexts/" + quote(cid, safe="")).status_code == 200
    finally:
        b.kill()
        sink.stop()


def test_failed_fsync_takes_every_object_back(dbdir, tmp_path):
    """While fdatasync fails (EIO), every object write is answered 503 and
    leaves no trace: a new object is 404 (store and registry), an updated
    one keeps its old value, a deleted one is still there; once the disk
    works, an entity that a withdrawn subscription would match notifies
    nobody there, and a query is not forwarded to a withdrawn registration."""
    sink = Sink()
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always"], fault_dir=str(faults))
    try:
        ok = requests.post(b.base + API + "/subscriptions", headers=JSON,
                           json=sub("urn:s:ok", sink.uri, q="v>100"), timeout=15)
        assert ok.status_code == 201, ok.text
        ok = requests.post(b.base + API + "/csourceRegistrations", headers=JSON,
                           json=dict(reg("urn:r:ok", sink.uri), registrationName="n1",
                                     information=[{"entities": [{"type": T + "Other"}]}]), timeout=15)
        assert ok.status_code == 201, ok.text
        ok = requests.post(b.base + API + "/csourceSubscriptions", headers=JSON,
                           json=csub("urn:c:ok", sink.uri), timeout=15)
        assert ok.status_code == 201, ok.text
        r = ctx(b, {"k": "http://example.org/k1"})
        assert r.status_code == 201, r.text
        cid = r.headers["Location"].rsplit("/", 1)[1]
        n_ctx = len(get(b, "/jsonldContexts").json())

        (faults / "fsync").write_text("EIO")
        assert_503(requests.post(b.base + API + "/subscriptions", headers=JSON,
                                 json=sub("urn:s:new", sink.uri), timeout=15))
        assert_503(requests.patch(b.base + API + "/subscriptions/urn:s:ok", headers=JSON,
                                  json={"q": "v>0"}, timeout=15))
        assert_503(requests.delete(b.base + API + "/subscriptions/urn:s:ok", timeout=15))
        assert_503(requests.post(b.base + API + "/csourceRegistrations", headers=JSON,
                                 json=reg("urn:r:new", sink.uri), timeout=15))
        assert_503(requests.patch(b.base + API + "/csourceRegistrations/urn:r:ok", headers=JSON,
                                  json={"registrationName": "n2"}, timeout=15))
        assert_503(requests.delete(b.base + API + "/csourceRegistrations/urn:r:ok", timeout=15))
        assert_503(requests.post(b.base + API + "/csourceSubscriptions", headers=JSON,
                                 json=csub("urn:c:new", sink.uri), timeout=15))
        assert_503(requests.delete(b.base + API + "/csourceSubscriptions/urn:c:ok", timeout=15))
        assert_503(ctx(b, {"k": "http://example.org/k2"}))
        assert_503(requests.delete(b.base + API + "/jsonldContexts/" + quote(cid, safe=""), timeout=15))
        (faults / "fsync").unlink()

        assert get(b, "/subscriptions/urn:s:new").status_code == 404
        s = get(b, "/subscriptions/urn:s:ok")
        assert s.status_code == 200 and s.json()["q"] == "v>100", s.text
        assert get(b, "/csourceRegistrations/urn:r:new").status_code == 404
        g = get(b, "/csourceRegistrations/urn:r:ok")
        assert g.status_code == 200 and g.json()["registrationName"] == "n1", g.text
        assert get(b, "/csourceSubscriptions/urn:c:new").status_code == 404
        assert get(b, "/csourceSubscriptions/urn:c:ok").status_code == 200
        assert get(b, "/jsonldContexts/" + quote(cid, safe="")).status_code == 200
        assert len(get(b, "/jsonldContexts").json()) == n_ctx

        # writes work again (the log's thread repairs it); no notification
        # from the withdrawn subscription nor from the PATCH taken back (q v>0)
        deadline = time.time() + 10
        while b.create("urn:e:1", 5).status_code != 201:
            assert time.time() < deadline, "writes did not resume"
            time.sleep(0.05)
        time.sleep(1.0)
        assert not [h for h in sink.hits if h[1] == "/notify"], sink.hits
        # no forwarding to the withdrawn registration (urn:r:ok is for another type)
        del sink.hits[:]
        r = requests.get(b.base + API + "/entities", params={"type": T}, timeout=15)
        assert r.status_code == 200, r.text
        assert not [h for h in sink.hits if h[0] == "GET"], sink.hits
        b.kill()
        b = DiskBroker(dbdir, str(tmp_path))
        assert get(b, "/subscriptions/urn:s:new").status_code == 404
        assert get(b, "/subscriptions/urn:s:ok").json()["q"] == "v>100"
        assert get(b, "/csourceRegistrations/urn:r:new").status_code == 404
        assert get(b, "/csourceRegistrations/urn:r:ok").json()["registrationName"] == "n1"
        assert get(b, "/csourceSubscriptions/urn:c:ok").status_code == 200
        assert get(b, "/jsonldContexts/" + quote(cid, safe="")).status_code == 200
    finally:
        b.kill()
        sink.stop()


def test_a_slow_sync_holds_no_worker(dbdir, tmp_path):
    """With 2 HTTP workers and a 400 ms fdatasync, 6 subscription creates
    in flight leave the workers free: a read is answered at once, and the
    creates share the fsyncs (they took well under 6 x 400 ms)."""
    sink = Sink()
    faults = tmp_path / "faults"
    faults.mkdir()
    b = DiskBroker(dbdir, str(tmp_path), ["--dbSync", "always", "--connectionPoolSize", "2"],
                   fault_dir=str(faults))
    try:
        (faults / "fsyncdelay").write_text("400")
        t0 = time.time()

        def create(i):
            return requests.post(b.base + API + "/subscriptions", headers=JSON,
                                 json=sub("urn:s:slow%d" % i, sink.uri), timeout=30)

        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            fut = [ex.submit(create, i) for i in range(6)]
            time.sleep(0.15)
            t1 = time.time()
            r = get(b, "/subscriptions/urn:s:none")
            read_s = time.time() - t1
            res = [f.result() for f in fut]
        total = time.time() - t0
        assert r.status_code == 404
        assert read_s < 0.3, read_s
        for x in res:
            assert x.status_code == 201, x.text
        assert total < 6 * 0.4, total
    finally:
        (faults / "fsyncdelay").unlink()
        b.kill()
        sink.stop()

"""Remote @contexts cost a request a bounded price and never the broker its
workers (issue 10, section 4): downloads run on the fetch pool while the
request is suspended, a request waits at most --contextTimeout in total, the
context caches evict instead of refusing new contexts, nested remote
contexts have a budget, and the egress policy keeps the broker away from
link-local and metadata addresses (redirects included). LdContextNotAvailable
is the answer of 6.3.2 for a context that cannot be had."""

import concurrent.futures
import http.server
import json
import socket
import threading
import time
import uuid

import pytest
import requests

from ngsi import VEHICLE_CTX, assert_problem, entity, link_header, prop, uid


class SilentServer:
    """Accepts TCP connections and never answers (nor closes them)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


class RedirectServer:
    """Answers every GET with a redirect to self.target."""

    def __init__(self, target):
        owner = self
        self.target = target

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(302)
                self.send_header("Location", owner.target)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def silent():
    s = SilentServer()
    yield s
    s.close()


def post_with_link(base, url, timeout=30):
    return requests.post(base + "/ngsi-ld/v1/entities",
                         data=json.dumps(entity(uid(), "Vehicle", speed=prop(1))),
                         headers={"Content-Type": "application/json", "Link": link_header(url),
                                  "NGSILD-Tenant": "silent"}, timeout=timeout)


# ---- the workers stay free ----------------------------------------------------

def test_never_answering_context_servers_do_not_block_workers(broker_factory, silent, ctxserver):
    """N requests whose @context server never answers, N > --connectionPoolSize:
    other requests (core context, a cached remote context) are answered at
    once meanwhile, and the waiting ones get 503 after --contextTimeout."""
    b = broker_factory("--connectionPoolSize", "2", "--contextTimeout", "3000", "--contextRetries", "0")
    cached = ctxserver.unique(VEHICLE_CTX)
    assert post_with_link(b.base, cached).status_code == 201          # now in the cache
    n = 6
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        t0 = time.time()
        stuck = [ex.submit(post_with_link, b.base, silent.url("/never-%d.jsonld" % i)) for i in range(n)]
        time.sleep(0.5)                                              # all of them are waiting now
        s = requests.Session()
        worst = 0.0
        for i in range(40):
            t = time.time()
            r = s.get(b.base + "/ngsi-ld/v1/entities", params={"type": "Vehicle"}, timeout=5)
            assert r.status_code == 200, r.text
            r = s.get(b.base + "/ngsi-ld/v1/entities", params={"type": "Vehicle"},
                      headers={"Link": link_header(cached)}, timeout=5)
            assert r.status_code == 200, r.text
            worst = max(worst, time.time() - t)
        assert worst < 0.5, "a request with a cached context took %.2f s while downloads hung" % worst
        assert time.time() - t0 < 2.5, "the other requests were held by the hanging downloads"
        for f in stuck:
            r = f.result()
            assert_problem(r, 503, "LdContextNotAvailable")
        elapsed = time.time() - t0
    assert 2.5 < elapsed < 8, elapsed


def test_context_timeout_is_total_whatever_the_retries(broker_factory, silent):
    b = broker_factory("--contextTimeout", "1000", "--contextRetries", "5")
    t0 = time.time()
    r = post_with_link(b.base, silent.url("/retry-%s.jsonld" % uuid.uuid4().hex))
    assert_problem(r, 503, "LdContextNotAvailable")
    assert time.time() - t0 < 2.0


def test_waiters_of_one_url_share_one_download(broker_factory, make_client, ctxserver):
    b = broker_factory("--connectionPoolSize", "2")
    url = ctxserver.unique(VEHICLE_CTX, delay=0.5)
    clients = [make_client(b, tenant=None) for _ in range(10)]
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        codes = list(ex.map(lambda c: c.post("/entities", entity(uid(), "Vehicle", speed=prop(1)),
                                              link=url).status_code, clients))
    assert codes == [201] * 10
    assert ctxserver.count(url) == 1


def test_batch_with_remote_contexts_is_written_once(broker_factory, make_client, ctxserver):
    """A batch whose members name contexts not yet downloaded waits for all of
    them before it writes anything (the handler runs again afterwards)."""
    b = broker_factory("--connectionPoolSize", "2")
    c = make_client(b)
    urls = [ctxserver.unique(VEHICLE_CTX, delay=0.2) for _ in range(3)]
    ents = []
    for u in urls:
        e = entity(uid(), "Vehicle", speed=prop(3))
        e["@context"] = u
        ents.append(e)
    r = c.post("/entityOperations/create", ents, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    assert sorted(r.json()) == sorted(e["id"] for e in ents)


# ---- caches that evict instead of refusing --------------------------------------

def raw_session(base):
    s = requests.Session()
    s.headers.update({"Content-Type": "application/ld+json"})
    return s


def test_16400_distinct_inline_contexts_keep_new_contexts_available(broker_factory):
    """The old cache refused every new context after 16,384 had been seen; now
    the least recently used are evicted and the cache stays under its bound."""
    b = broker_factory("--contextCacheSize", "8")
    s = raw_session(b.base)
    url = b.base + "/ngsi-ld/v1/entityOperations/query"

    def one(i):
        body = {"type": "Query", "entities": [{"type": "T%d" % (i % 7)}],
                "@context": {"T%d" % (i % 7): "https://ctx.example/%d/T" % i}}
        r = s.post(url, data=json.dumps(body), timeout=10)
        return r.status_code, r.text

    def interned():
        return requests.get(b.base + "/statistics", timeout=5).json()["internedNames"]

    def rss_kib():
        with open("/proc/%d/status" % b.proc.pid) as f:
            return int([l for l in f if l.startswith("VmRSS")][0].split()[1])

    for i in range(8200):
        code, text = one(i)
        assert code == 200, "context %d: %d %s" % (i, code, text[:300])
    names, rss = interned(), rss_kib()
    for i in range(8200, 16400):
        code, text = one(i)
        assert code == 200, "context %d: %d %s" % (i, code, text[:300])
    # the second half adds nothing for good: no interned names, no memory
    assert interned() - names < 20
    if "asan" not in b.proc.args[0] and "tsan" not in b.proc.args[0]:   # sanitizers keep freed memory
        assert rss_kib() - rss < 8 * 1024, (rss, rss_kib())
    eid = uid()
    body = entity(eid, "Fresh", size=prop(1))
    body["@context"] = {"Fresh": "https://fresh.example/Fresh", "size": "https://fresh.example/size"}
    r = s.post(b.base + "/ngsi-ld/v1/entities", data=json.dumps(body), timeout=10)
    assert r.status_code == 201, r.text
    st = requests.get(b.base + "/statistics", timeout=5).json()["contexts"]
    assert st["evictions"] > 0
    assert st["cachedBytes"] <= 4 << 20, st


# ---- a budget for nested remote contexts ---------------------------------------------

def test_nested_context_bomb_is_refused_within_the_budget(broker_factory, ctxserver):
    """Each document names two more: 2^10 documents if followed. The request
    stops at --contextMaxDocs with a clear error, having fetched few."""
    b = broker_factory("--contextMaxDocs", "8")
    tag = uuid.uuid4().hex
    depth = 10

    def path(d, i):
        return "/bomb-%s-%d-%d.jsonld" % (tag, d, i)

    for d in range(depth):
        for i in range(2 ** d):
            if d == depth - 1:
                doc = {"@context": {"leaf%d" % i: "https://b.example/%d" % i}}
            else:
                doc = {"@context": [ctxserver.url(path(d + 1, 2 * i)), ctxserver.url(path(d + 1, 2 * i + 1))]}
            ctxserver.serve(path(d, i), doc)
    r = post_with_link(b.base, ctxserver.url(path(0, 0)))
    assert_problem(r, 503, "LdContextNotAvailable")
    assert "--contextMaxDocs" in r.json()["detail"]
    fetched = sum(ctxserver.count(path(d, i)) for d in range(depth) for i in range(2 ** d))
    assert fetched <= 32, fetched


def test_deep_context_chain_stops_at_max_depth(broker_factory, ctxserver):
    b = broker_factory("--contextMaxDepth", "4")
    tag = uuid.uuid4().hex
    for d in range(10):
        nxt = ctxserver.url("/chain-%s-%d.jsonld" % (tag, d + 1))
        ctxserver.serve("/chain-%s-%d.jsonld" % (tag, d), {"@context": [nxt]})
    r = post_with_link(b.base, ctxserver.url("/chain-%s-0.jsonld" % tag))
    assert_problem(r, 503, "LdContextNotAvailable")
    assert "--contextMaxDepth" in r.json()["detail"]


# ---- the egress policy ---------------------------------------------------------------------

def test_link_local_context_url_is_refused_by_the_egress_policy(cli):
    r = cli.post("/entities", entity(uid(), "Vehicle"), link="http://169.254.169.254/latest/ctx.jsonld")
    assert_problem(r, 503, "LdContextNotAvailable")
    assert "egress policy" in r.json()["detail"]


def test_metadata_host_name_is_refused_before_dns(cli):
    r = cli.post("/entities", entity(uid(), "Vehicle"), link="http://metadata.google.internal/ctx.jsonld")
    assert_problem(r, 503, "LdContextNotAvailable")
    assert "egress policy" in r.json()["detail"]


def test_redirect_to_link_local_is_refused(cli):
    red = RedirectServer("http://169.254.169.254/latest/meta-data/")
    try:
        r = cli.post("/entities", entity(uid(), "Vehicle"), link=red.url("/r-%s.jsonld" % uuid.uuid4().hex))
        assert_problem(r, 503, "LdContextNotAvailable")
        assert "egress policy" in r.json()["detail"]
    finally:
        red.close()


def test_redirect_to_another_scheme_is_refused(cli):
    red = RedirectServer("file:///etc/passwd")
    try:
        r = cli.post("/entities", entity(uid(), "Vehicle"), link=red.url("/f-%s.jsonld" % uuid.uuid4().hex))
        assert_problem(r, 503, "LdContextNotAvailable")
    finally:
        red.close()


def test_egress_deny_list_refuses_loopback(broker_factory, ctxserver):
    b = broker_factory("--egressDeny", "127.0.0.0/8")
    r = post_with_link(b.base, ctxserver.unique(VEHICLE_CTX))
    assert_problem(r, 503, "LdContextNotAvailable")
    assert "egress policy" in r.json()["detail"]


def test_egress_allow_beats_a_shorter_deny(broker_factory, ctxserver):
    b = broker_factory("--egressDeny", "0.0.0.0/0,::/0", "--egressAllow", "127.0.0.1")
    url = ctxserver.unique(VEHICLE_CTX)
    assert post_with_link(b.base, url).status_code == 201


# ---- read-only requests intern nothing (issue 10, section 5) ---------------------------

def test_read_only_requests_intern_nothing(broker_factory, make_client):
    b = broker_factory("--defaultLimit", "19")
    c = make_client(b)
    eid = uid()
    c.create(entity(eid, "Thing", known=prop(1)))

    def interned():
        return requests.get(b.base + "/statistics", timeout=5).json()["internedNames"]

    def shapes(n):
        return ({"type": "T" + n}, {"type": "Thing", "q": n + "==1"}, {"type": "Thing", "q": "known==" + n},
                {"type": "Thing", "attrs": n}, {"type": "Thing", "pick": "id," + n},
                {"type": "Thing", "omit": n}, {"type": "Thing", "q": n + ".sub>2"})

    # warm up: fixed names a query shape uses (e.g. sub-attribute keywords) are interned once
    for params in shapes("warmup"):
        assert c.get("/entities", params=params).status_code == 200
    before = interned()
    for i in range(300):
        for params in shapes("unknown%s%d" % (uuid.uuid4().hex[:8], i)):
            r = c.get("/entities", params=params)
            assert r.status_code == 200, (params, r.text)
    assert interned() == before
    # an unknown name matches nothing, and its absence holds
    assert c.get("/entities", params={"type": "Nothing" + uuid.uuid4().hex}).json() == []
    assert c.get("/entities", params={"type": "Thing", "q": "zz%s==1" % uuid.uuid4().hex}).json() == []
    assert [e["id"] for e in c.get("/entities", params={"type": "Thing", "q": "!zz%s" % uuid.uuid4().hex}).json()] == [eid]
    assert c.get("/entities", params={"type": "Thing", "attrs": "zz" + uuid.uuid4().hex}).json() == []
    # a write still interns: the name becomes known and matches
    n = "late" + uuid.uuid4().hex[:8]
    c.create(entity(uid(), "Thing", **{n: prop(5)}))
    assert len(c.get("/entities", params={"type": "Thing", "q": n + "==5"}).json()) == 1


def test_stopping_broker_answers_requests_waiting_for_a_download(silent, tmp_path):
    """SIGTERM while a request waits for a never-answering @context server: the
    request gets its 503 at once and the broker exits promptly."""
    from conftest import binary_path
    from ngsi import free_port
    import subprocess
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "warn",
                          "--contextTimeout", "20000"], stdout=log, stderr=subprocess.STDOUT)
    try:
        base = "http://127.0.0.1:%d" % port
        for _ in range(300):
            try:
                requests.get(base + "/version", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.05)
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            f = ex.submit(post_with_link, base, silent.url("/stop.jsonld"))
            time.sleep(0.5)
            t0 = time.time()
            p.terminate()
            assert p.wait(timeout=15) == 0
            assert time.time() - t0 < 5
            assert_problem(f.result(), 503, "LdContextNotAvailable")
    finally:
        if p.poll() is None:
            p.kill()
        log.close()

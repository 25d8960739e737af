"""Fixtures of the functional suite.

- broker processes: the binary named by $CORAINE_BIN, started on a free port of
  127.0.0.1 and killed at the end of the session; its stderr goes to a file whose
  new part is attached to the report of every failing test. A broker that dies
  during a test is restarted for the next one (and the crash is reported).
- a local HTTP server that serves user @context documents (counts requests per
  path, can answer an error status or delay), so no test needs the internet.
- clients: a requests.Session bound to one broker and one tenant; `cli` gives
  every test a fresh tenant, `dcli` speaks to the default tenant.
"""

import http.server
import json
import os
import sys
import socket
import subprocess
import threading
import time
import uuid
from urllib.parse import quote

import pytest
import requests

from ngsi import API, VEHICLE_CTX, free_port, link_header

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_TIMEOUT = 15
MONGOC = os.environ.get("CORAINE_TEST_DATABASE", "").lower() == "mongoc"

def binary_path():
    b = os.environ.get("CORAINE_BIN") or os.path.join(REPO, "build", "release", "coraine")
    if not os.path.isabs(b):
        b = os.path.join(REPO, b)
    return b


# ---------------------------------------------------------------------------
# broker processes

class Broker:
    def __init__(self, flags, logdir):
        self.flags = list(flags)
        self.logdir = logdir
        self.proc = None
        self.port = None
        self.stderr_path = None
        self.crashes = []
        self.start()

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        binp = binary_path()
        if not os.path.exists(binp):
            raise RuntimeError("broker binary %s does not exist (build it with make)" % binp)
        self.port = free_port()
        tag = "-".join(f.strip("-") for f in self.flags).replace("/", "_") or "default"
        self.stderr_path = os.path.join(self.logdir, "coraine-%s-%d.log" % (tag[:60], self.port))
        errf = open(self.stderr_path, "wb")
        cmd = [binp, "-fg", "--port", str(self.port), "--bind", "127.0.0.1", "--logLevel", "warn"] + self.flags
        if MONGOC and not any(f in ("--database", "--dbDir") for f in self.flags):
            # CORAINE_TEST_DATABASE=mongoc: every broker that does not choose its
            # store runs on the session's FerretDB, with databases of its own
            import ferret
            self.mongo_prefix = getattr(self, "mongo_prefix", None) or ferret.new_prefix()
            cmd += list(ferret.mongo_flags(ferret.shared_server(), self.mongo_prefix))
        self.proc = subprocess.Popen(cmd, stdout=errf, stderr=subprocess.STDOUT, cwd=REPO)
        errf.close()
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited with %s at start: %s\n%s" % (
                    self.proc.returncode, " ".join(cmd), self.read_log()))
            try:
                r = requests.get(self.base + "/version", timeout=1)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("broker did not answer GET /version within 15 s: %s\n%s" % (
            " ".join(cmd), self.read_log()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def ensure_alive(self):
        if not self.alive():
            rc = self.proc.returncode if self.proc else None
            self.crashes.append((rc, self.read_log()[-4000:]))
            self.start()

    def log_size(self):
        try:
            return os.path.getsize(self.stderr_path)
        except OSError:
            return 0

    def read_log(self, since=0):
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        """SIGTERM; a broker that has not exited within 20 s (a sanitizer
        build checks for leaks at exit) is killed and reported: a clean
        shutdown is part of what is tested."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                _UNSTOPPED.append(" ".join(self.flags) or "default")


_BROKERS = {}
_UNSTOPPED = []      # brokers that did not exit on SIGTERM


@pytest.fixture(scope="session")
def broker_factory(tmp_path_factory):
    """broker_factory("--maxBodySize", "1000") -> a broker started with those
    extra flags (one process per distinct flag list, shared by the session)."""
    logdir = str(tmp_path_factory.mktemp("coraine"))

    def start(*flags):
        key = tuple(flags)
        b = _BROKERS.get(key)
        if b is None:
            b = Broker(flags, logdir)
            _BROKERS[key] = b
        else:
            b.ensure_alive()
        return b

    yield start
    for b in _BROKERS.values():
        b.stop()
    # a sanitizer build reports memory errors, undefined behaviour and leaks
    # (at exit) in the broker's log: any of them fails the session
    reports = []
    for key, b in _BROKERS.items():
        log = b.read_log()
        for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                       "WARNING: ThreadSanitizer"):
            i = log.find(marker)
            if i >= 0:
                reports.append("broker %s: %s" % (" ".join(key) or "default", log[max(0, i - 200):i + 3000]))
                break
    _BROKERS.clear()
    for flags in _UNSTOPPED:
        reports.append("broker %s: did not exit within 20 s of SIGTERM" % flags)
    if reports:
        pytest.fail("sanitizer reports in the broker logs:\n" + "\n".join(reports), pytrace=False)


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


def pytest_configure(config):
    config.addinivalue_line("markers", "cordb: tests of corDB itself (skipped with CORAINE_TEST_DATABASE=mongoc)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if MONGOC and item.get_closest_marker("cordb"):
        pytest.skip("corDB-specific (CORAINE_TEST_DATABASE=mongoc)")
    item._coraine_log_offsets = {k: b.log_size() for k, b in _BROKERS.items()}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    offsets = getattr(item, "_coraine_log_offsets", {})
    for key, b in _BROKERS.items():
        text = b.read_log(offsets.get(key, 0))
        state = "running" if b.alive() else "EXITED with %s" % b.proc.returncode
        if text or not b.alive():
            rep.sections.append(("coraine %s (port %d, %s) log" % (" ".join(key) or "default", b.port, state),
                                 text[-6000:] or "(empty)"))


# ---------------------------------------------------------------------------
# HTTP client bound to a broker and a tenant

def encode_params(params):
    """Query string with every reserved character percent-encoded (spaces as
    %20, never '+'), in the given order."""
    if not params:
        return ""
    items = params.items() if isinstance(params, dict) else params
    return "&".join("%s=%s" % (quote(str(k), safe=""), quote(str(v), safe="")) for k, v in items)


class Client:
    def __init__(self, broker, tenant=None):
        self.broker = broker
        self.tenant = tenant
        self.s = requests.Session()

    def url(self, path, params=None):
        if path.startswith("http://") or path.startswith("https://"):
            u = path
        elif path.startswith(API) or path.startswith("/version") or path.startswith("/statistics"):
            u = self.broker.base + path
        else:
            u = self.broker.base + API + path
        qs = encode_params(params)
        if qs:
            u += ("&" if "?" in u else "?") + qs
        return u

    def request(self, method, path, json_body=None, data=None, params=None, headers=None,
                link=None, ctype=None, accept=None, tenant=Ellipsis, timeout=DEFAULT_TIMEOUT):
        h = {}
        t = self.tenant if tenant is Ellipsis else tenant
        if t:
            h["NGSILD-Tenant"] = t
        if link:
            h["Link"] = link_header(link)
        if accept:
            h["Accept"] = accept
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            h["Content-Type"] = ctype or "application/json"
        elif ctype:
            h["Content-Type"] = ctype
        if headers:
            h.update(headers)
        return self.s.request(method, self.url(path, params), data=data, headers=h, timeout=timeout)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, json_body=body, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, json_body=body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, json_body=body, **kw)

    # --- shortcuts that assert success
    def create(self, ent, **kw):
        r = self.post("/entities", ent, **kw)
        assert r.status_code == 201, "create %s: %d %s" % (ent.get("id"), r.status_code, r.text[:300])
        return r

    def batch_create(self, ents, **kw):
        r = self.post("/entityOperations/create", ents, **kw)
        assert r.status_code == 201, "batch create: %d %s" % (r.status_code, r.text[:300])
        return r

    def entity(self, eid, **kw):
        r = self.get("/entities/" + quote(eid, safe=":"), **kw)
        assert r.status_code == 200, "GET %s: %d %s" % (eid, r.status_code, r.text[:300])
        return r.json()

    def ensure_tenant(self):
        """Writes one entity (type Seed) so that the tenant exists (4.14)."""
        self.create({"id": "urn:ngsi-ld:Seed:" + uuid.uuid4().hex[:12], "type": "Seed"})

    def close(self):
        self.s.close()


def fresh_tenant():
    return "t" + uuid.uuid4().hex


@pytest.fixture
def cli(broker):
    c = Client(broker, fresh_tenant())
    yield c
    c.close()


@pytest.fixture
def dcli(broker):
    c = Client(broker, None)
    yield c
    c.close()


@pytest.fixture
def make_client():
    made = []

    def make(broker, tenant=Ellipsis):
        c = Client(broker, fresh_tenant() if tenant is Ellipsis else tenant)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


# ---------------------------------------------------------------------------
# the @context server

class ContextServer:
    def __init__(self):
        self.routes = {}
        self.counts = {}
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                with owner.lock:
                    owner.counts[path] = owner.counts.get(path, 0) + 1
                    route = owner.routes.get(path)
                if route is None:
                    status, body, ctype, delay, extra = 404, b'{"error":"not found"}', "application/json", 0, {}
                else:
                    status, body, ctype, delay, extra = route
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def serve(self, path, doc, status=200, delay=0, ctype="application/ld+json", headers=None):
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode("utf-8")
        with self.lock:
            self.routes[path] = (status, body, ctype, delay, dict(headers or {}))
        return self.url(path)

    def unique(self, doc, **kw):
        """Serves doc at a path never used before (so no broker cache knows it)."""
        return self.serve("/ctx-%s.jsonld" % uuid.uuid4().hex, doc, **kw)

    def count(self, url_or_path):
        path = url_or_path
        if path.startswith("http"):
            path = "/" + path.split("/", 3)[3]
        with self.lock:
            return self.counts.get(path, 0)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def ctxserver():
    s = ContextServer()
    s.serve("/ctx.jsonld", VEHICLE_CTX)
    yield s
    s.close()


@pytest.fixture
def vctx(ctxserver):
    """URL of the Vehicle user @context."""
    return ctxserver.url("/ctx.jsonld")


# the PostgreSQL server of --history timescale (test/functional/pg.py)
from pg import pg_server, pg_uri  # noqa: E402,F401


def pytest_sessionfinish(session, exitstatus):
    """The session's FerretDB (the mongoc run's, and test_mongo.py's fixture in any run) stops with
    the session, after the brokers of the fixtures."""
    if "ferret" in sys.modules:
        sys.modules["ferret"].close_shared()

"""The HTTP client of notifications (src/notify/httpc.c) against receivers
that answer in every way HTTP/1.1 allows: chunked bodies, Connection: close,
HTTP/1.0, a kept connection closed by the receiver while idle, 1xx before the
answer, an answer that never ends, and garbage. Each case: every notification
counted as sent or failed as the answer says, none lost, none doubled."""

import socket
import threading
import time
import uuid

import pytest

from ngsi import entity, prop, uid


class RawReceiver:
    """A loopback HTTP server answering each request with answer(n) (raw
    bytes; n counts the requests); close_after: close the connection after
    each answer without saying so. Its path is its own: the broker keeps
    one endpoint (and its kept connections) per URI, and the kernel may
    give a later receiver the port of an earlier one; stop() closes the
    accepted connections too, so nothing of this receiver answers after it."""

    def __init__(self, answer, close_after=False):
        self.answer, self.close_after = answer, close_after
        self.requests, self.bodies = 0, []
        self.path = "/notify/%s?x=1" % uuid.uuid4().hex
        self.open = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = 0
        threading.Thread(target=self.serve, daemon=True).start()

    @property
    def uri(self):
        return "http://127.0.0.1:%d%s" % (self.port, self.path)

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                self.open.append(c)
            threading.Thread(target=self.conn, args=(c,), daemon=True).start()

    def conn(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                assert head.startswith(b"POST %s HTTP/1.1\r\n" % self.path.encode()), head
                n = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
                while len(buf) < n:
                    d = c.recv(65536)
                    if not d:                  # closed before the body ended: not a request
                        return
                    buf += d
                body, buf = buf[:n], buf[n:]
                with self.lock:
                    self.requests += 1
                    k = self.requests
                    self.bodies.append(body)
                a = self.answer(k)
                if a is None:
                    time.sleep(30)
                    return
                c.sendall(a)
                if self.close_after or b"Connection: close" in a or a.startswith(b"HTTP/1.0"):
                    return
        finally:
            c.close()

    def stop(self):
        self.sock.close()
        with self.lock:
            for c in self.open:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def run(cli, rcv, n=5, timeout=1000):
    """n changes of one entity; waits until each is delivered or given up.
    timeout: the endpoint's (ms), short where the case is a failure; a case
    of success must not depend on how fast a loaded machine answers."""
    sid = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                      "notification": {"endpoint": {"uri": rcv.uri, "timeout": timeout}}})
    assert sid.status_code == 201, sid.text
    sid = sid.headers["Location"].rsplit("/", 1)[1]
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(0)))
    for i in range(n - 1):
        time.sleep(0.02)
        r = cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)})
        assert r.status_code == 204, r.text
    deadline = time.time() + 30
    while time.time() < deadline:
        m = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        d = m["coraine:dropped"]
        if m["coraine:delivered"] + d["retriesExhausted"] + d["endpointFailing"] >= n:
            break
        time.sleep(0.05)
    m["requests"] = rcv.requests           # for the messages: what the receiver got
    return m


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize("name,answer,close_after", [
    ("content-length", lambda k: OK, False),
    ("no body", lambda k: b"HTTP/1.1 204 No Content\r\n\r\n", False),
    ("chunked", lambda k: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n", False),
    ("connection close", lambda k: b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", False),
    ("http/1.0 to the end", lambda k: b"HTTP/1.0 200 OK\r\n\r\nwhatever comes until the close", False),
    ("closed while idle", lambda k: OK, True),
    ("100 first", lambda k: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", False),
])
def test_answers_that_are_success(cli, name, answer, close_after):
    r = RawReceiver(answer, close_after)
    try:
        m = run(cli, r, timeout=20000)
        assert m["timesSent"] == 5 and m["timesFailed"] == 0 and m["coraine:delivered"] == 5, \
            (name, m, r.requests, cli.get("/statistics").text[:2000])
        assert r.requests == 5
        if not close_after and b"close" not in answer(1) and not answer(1).startswith(b"HTTP/1.0"):
            assert r.conns == 1, "one kept connection"
    finally:
        r.stop()


@pytest.mark.parametrize("name,answer", [
    ("500", lambda k: b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n"),
    ("garbage", lambda k: b"SMTP ready\r\n\r\n"),
    ("never answers", lambda k: None),
])
def test_answers_that_are_failure(broker_factory, make_client, name, answer):
    cli = make_client(broker_factory("--notifierRetries", "0"))
    r = RawReceiver(answer)
    try:
        m = run(cli, r, n=2)
        assert m["timesSent"] == 0 and m["timesFailed"] == 2 and m["status"] == "failed", (name, m)
        assert m["coraine:dropped"]["retriesExhausted"] == 2
    finally:
        r.stop()


def test_first_answer_fails_then_succeeds(cli):
    r = RawReceiver(lambda k: b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n" if k == 1 else OK)
    try:
        m = run(cli, r, n=3, timeout=20000)
        assert m["timesFailed"] == 1 and m["coraine:retried"] == 1 and m["coraine:delivered"] == 3, m
        assert m["status"] == "ok"
    finally:
        r.stop()


def test_counters_are_one_consistent_snapshot(cli):
    """Read while notifications complete, every GET shows a consistent
    snapshot: a change counted delivered is also counted sent (one entity:
    one change per notification), and due covers every outcome. The
    content-length case once saw timesSent 4 with coraine:delivered 5: the
    counters were read in the order they are updated, so the last
    notification could complete between the two reads."""
    r = RawReceiver(lambda k: OK)
    try:
        sid = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                          "notification": {"endpoint": {"uri": r.uri}}})
        assert sid.status_code == 201, sid.text
        sid = sid.headers["Location"].rsplit("/", 1)[1]
        eid = uid()
        cli.create(entity(eid, "Car", speed=prop(0)))
        bad, stop = [], threading.Event()

        def writer():
            for i in range(150):
                cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)})
            stop.set()

        threading.Thread(target=writer, daemon=True).start()
        deadline = time.time() + 60
        while time.time() < deadline:
            m = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
            d = m["coraine:dropped"]
            if m["coraine:delivered"] > m["timesSent"] or \
                    m["coraine:due"] < m["coraine:delivered"] + sum(d.values()) - d["throttled"]:
                bad.append(m)
            if stop.is_set() and m["coraine:delivered"] + sum(d.values()) >= 151:
                break
        assert not bad, bad[:2]
        assert m["coraine:delivered"] + sum(d.values()) >= 151, m
    finally:
        r.stop()

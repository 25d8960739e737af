"""The graceful stop (doc/operations.md): SIGTERM stops accepting, finishes the
requests under way, drains the notification queue within --shutdownTimeout,
syncs the log and exits 0; SIGHUP reopens --logFile."""
import os
import signal
import socket
import time

import pytest
import requests

from ngsi import uid
from receiver import Receiver
from test_shutdown import start


@pytest.fixture(autouse=True)
def clean_logs(tmp_path):
    """A sanitizer build's report in any broker log of the test fails it."""
    yield
    for name in os.listdir(str(tmp_path)):
        if name.endswith(".log"):
            log = open(os.path.join(str(tmp_path), name), errors="replace").read()
            for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                           "WARNING: ThreadSanitizer"):
                assert marker not in log, log[max(0, log.index(marker) - 200):][:3000]


def stop(p, timeout=30):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout)
    return p.returncode


def test_request_under_way_at_sigterm_is_answered(tmp_path):
    p, base = start(tmp_path)
    try:
        port = int(base.rsplit(":", 1)[1])
        body = b'{"id":"urn:ngsi-ld:G:1","type":"G","v":{"type":"Property","value":1}}'
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /ngsi-ld/v1/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
        time.sleep(0.3)                       # the head is read: the request is under way
        p.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # no new connection is accepted meanwhile
        try:
            requests.get(base + "/version", timeout=1)
            refused = False
        except requests.RequestException:
            refused = True
        assert refused
        s.sendall(body[10:])
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
        s.close()
        p.wait(20)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_shutdown_timeout_bounds_a_request_that_never_completes(tmp_path):
    p, base = start(tmp_path, "--shutdownTimeout", "1", "--bodyTimeout", "60")
    try:
        port = int(base.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /ngsi-ld/v1/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
        time.sleep(0.2)
        t0 = time.time()
        assert stop(p) == 0
        assert time.time() - t0 < 5
        s.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_notification_due_at_sigterm_is_delivered(tmp_path):
    rcv = Receiver("--delay", "300")
    p = None
    try:
        p, base = start(tmp_path, "--shutdownTimeout", "10", "--notifierDrain", "8000")
        api = base + "/ngsi-ld/v1"
        r = requests.post(api + "/subscriptions", json={
            "type": "Subscription", "entities": [{"type": "S"}],
            "notification": {"endpoint": {"uri": rcv.uri}}}, timeout=10)
        assert r.status_code == 201
        n = 5
        for i in range(n):
            r = requests.post(api + "/entities", json={"id": uid("urn:ngsi-ld:S:"), "type": "S", "v": {"type": "Property", "value": i}}, timeout=10)
            assert r.status_code == 201
        # five notifications of 300 ms each through at most --notifierInflight lanes: queued now
        assert stop(p) == 0
        c = rcv.count()
        assert c["entities"] >= n, c           # the changes (a notification may carry several)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        rcv.stop()


def test_disk_store_survives_sigterm(tmp_path):
    d = str(tmp_path / "db")
    os.mkdir(d)
    p, base = start(tmp_path, "--dbDir", d, "--dbSync", "interval", "--dbSyncInterval", "10000")
    eid = uid("urn:ngsi-ld:K:")
    try:
        assert requests.post(base + "/ngsi-ld/v1/entities", json={"id": eid, "type": "K"}, timeout=10).status_code == 201
        assert stop(p) == 0                   # the log is synced at the stop, not 10 s later
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    p, base = start(tmp_path, "--dbDir", d)
    try:
        assert requests.get(base + "/ngsi-ld/v1/entities/" + eid, timeout=10).status_code == 200
    finally:
        assert stop(p) == 0


def test_sighup_reopens_the_log_file(tmp_path):
    log = str(tmp_path / "coraine.log")
    p, base = start(tmp_path, "--logFile", log, "--logLevel", "info")
    try:
        deadline = time.time() + 5
        while "listening" not in open(log).read() and time.time() < deadline:
            time.sleep(0.05)
        os.rename(log, log + ".1")                      # what logrotate does
        p.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while not os.path.exists(log) and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(log)
        assert requests.get(base + "/version", timeout=5).status_code == 200   # still serving
        assert stop(p) == 0
        new = open(log).read()
        assert "SIGHUP: log file reopened" in new and "stopped" in new
        assert "stopped" not in open(log + ".1").read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

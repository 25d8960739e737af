"""Request ids and access-log lines for the answers the connection guard
sends itself, before any handler runs (src/http/server.c; doc/operations.md):
408 for a head or a body not complete in time, 431 for a head too large for
the connection's memory, 503 beyond --maxConnections; and the 400 of a query
refused while the request is read. Each carries X-Request-Id (the client's
when the head was read, else a generated one) and gets its access-log line;
a line with no request line read writes it "-"."""
import os
import re
import socket
import time

import pytest

from ngsi import API, read_answer
from test_shutdown import start

LINE = re.compile(r'^(\S+) - (\S+) \[[^\]]+\] "(-|(\S+) (\S+) (\S+))" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (\S+) (\d+)$')
RID = re.compile(r"[0-9a-f]{16}")


@pytest.fixture
def guarded(tmp_path):
    path = str(tmp_path / "access.log")
    p, base = start(tmp_path, "--accessLog", path, "--headerTimeout", "1", "--bodyTimeout", "1",
                    "--maxConnections", "4")
    port = int(base.rsplit(":", 1)[1])
    yield port, path
    p.terminate()
    p.wait(20)


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def log_lines(path, want, status):
    deadline = time.time() + 15          # the file is written every 100 ms; a loaded ASan run is slower
    while time.time() < deadline:
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        m = [LINE.match(x) for x in lines]
        assert all(m), lines
        hits = [x for x in m if x.group(7) == status]
        if len(hits) >= want:
            return hits
        time.sleep(0.05)
    raise AssertionError("no %d access-log line(s) with status %s in %s" % (want, status, lines))


def test_408_for_a_head_never_complete_has_a_request_id_and_a_line(guarded):
    port, path = guarded
    s = connect(port)
    s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n")
    ans = read_answer(s)
    s.close()
    assert ans is not None and ans[0] == 408
    rid = ans[1].get("x-request-id")
    assert rid and RID.fullmatch(rid), ans[1]
    line = log_lines(path, 1, "408")[0]
    assert line.group(1) == "127.0.0.1" and line.group(3) == "-"        # no request line was read
    assert line.group(11) == rid and int(line.group(8)) == len(ans[2])


def test_408_for_a_body_never_complete_keeps_the_client_request_id(guarded):
    port, path = guarded
    s = connect(port)
    s.sendall(("POST %s/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 1000\r\nX-Request-Id: slow-body-1\r\nUser-Agent: drip\r\n\r\n{" % API).encode())
    ans = read_answer(s)
    s.close()
    assert ans is not None and ans[0] == 408
    assert ans[1].get("x-request-id") == "slow-body-1"
    line = [x for x in log_lines(path, 1, "408") if x.group(11) == "slow-body-1"][0]
    assert line.group(4) == "POST" and line.group(5) == API + "/entities" and line.group(6) == "HTTP/1.1"
    assert line.group(10) == "drip" and int(line.group(12)) >= 500000     # µs: the 1 s deadline, on a coarse clock


def test_431_has_the_request_id_and_a_line(guarded):
    port, path = guarded
    # about 8 KiB: over what the broker takes, under what libmicrohttpd refuses itself (beyond
    # about 10 KiB its own 431 is replaced by ours: test_guard_head_size.py)
    filler = "".join("X-Filler-%d: %s\r\n" % (i, "v" * 100) for i in range(70))
    s = connect(port)
    s.sendall(("GET %s/entities?type=T HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-head-1\r\n%s"
               "Connection: close\r\n\r\n" % (API, filler)).encode())
    ans = read_answer(s)
    s.close()
    assert ans is not None and ans[0] == 431
    assert ans[1].get("x-request-id") == "big-head-1"
    line = log_lines(path, 1, "431")[0]
    assert line.group(11) == "big-head-1" and line.group(4) == "GET" and line.group(5) == API + "/entities?type=T"


def test_503_beyond_max_connections_has_a_request_id_and_a_line(guarded):
    port, path = guarded
    time.sleep(0.3)
    idle = [connect(port) for _ in range(4)]
    for s in idle:
        s.sendall(b"GET /version HTTP/1.1\r\n")          # holds a slot until the head deadline
    time.sleep(0.2)
    s = connect(port)
    s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
    ans = read_answer(s)
    s.close()
    for x in idle:
        x.close()
    assert ans is not None and ans[0] == 503, ans
    rid = ans[1].get("x-request-id")
    assert rid and RID.fullmatch(rid)
    line = [x for x in log_lines(path, 1, "503") if x.group(11) == rid][0]
    assert line.group(3) == "-" and line.group(1) == "127.0.0.1"


def test_a_query_refused_while_reading_the_request_has_its_request_id(guarded):
    port, path = guarded
    s = connect(port)
    qs = "&".join("p%d=1" % i for i in range(300))
    s.sendall(("GET %s/entities?%s HTTP/1.1\r\nHost: x\r\nX-Request-Id: many-params\r\nConnection: close\r\n\r\n"
               % (API, qs)).encode())
    ans = read_answer(s)
    s.close()
    assert ans is not None and ans[0] == 400
    assert ans[1].get("x-request-id") == "many-params"
    assert log_lines(path, 1, "400")[0].group(11) == "many-params"

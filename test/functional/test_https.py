"""--https --cert FILE --key FILE: the broker speaks TLS through libmicrohttpd's
GnuTLS (src/http/server.c; doc/operations.md). The certificates are made by
openssl in each test's directory (a CA and a server certificate it signs for
127.0.0.1), never kept in the repository. The client verifies the chain with
the test CA. A missing, unreadable or mismatched certificate or key stops the
start with a message that names it and a non-zero exit status."""
import os
import signal
import socket
import ssl
import subprocess
import time

import pytest
import requests

from conftest import REPO, binary_path
from ngsi import API, free_port

LD = "application/ld+json"
CORE = "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """ca.pem signs server.pem (SAN 127.0.0.1, localhost); other.key matches nothing."""
    d = str(d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=coraine test CA",
            cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key", cwd=d)
    return {k: os.path.join(d, v) for k, v in
            {"ca": "ca.pem", "cert": "server.pem", "key": "server.key", "other": "other.key"}.items()}


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer")


def assert_clean(log):
    """These brokers are not conftest's: their logs are checked here for sanitizer reports."""
    for marker in SANITIZER_MARKERS:
        i = log.find(marker)
        assert i < 0, log[max(0, i - 200):i + 3000]


def run(d, *flags):
    port = free_port()
    log = open(os.path.join(str(d), "coraine-%d.log" % port), "wb")
    p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1"] + list(flags),
                         stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    return p, port, log.name


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls(tmp_path, pki):
    p, port, log = run(tmp_path, "--https", "--cert", pki["cert"], "--key", pki["key"])
    base = "https://127.0.0.1:%d" % port
    s = requests.Session()
    s.trust_env = False          # else REQUESTS_CA_BUNDLE of the environment overrides verify
    s.verify = pki["ca"]
    deadline = time.time() + 15
    while True:
        try:
            if s.get(base + "/version", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            if time.time() > deadline or p.poll() is not None:
                p.kill()
                raise
            time.sleep(0.05)
    yield s, base, port
    p.terminate()
    rc = p.wait(20)
    assert_clean(open(log, errors="replace").read())
    assert rc == 0


def test_create_retrieve_query_patch_delete_over_https(tls):
    s, base, _ = tls
    e = {"id": "urn:ngsi-ld:T:https1", "type": "T", "speed": {"type": "Property", "value": 1}, "@context": CORE}
    r = s.post(base + API + "/entities", json=e, headers={"Content-Type": LD})
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == API + "/entities/urn:ngsi-ld:T:https1"
    r = s.get(base + API + "/entities/urn:ngsi-ld:T:https1", headers={"X-Request-Id": "tls-1"})
    assert r.status_code == 200 and r.json()["speed"]["value"] == 1
    assert r.headers["X-Request-Id"] == "tls-1"
    r = s.patch(base + API + "/entities/urn:ngsi-ld:T:https1/attrs", json={"speed": {"type": "Property", "value": 2}})
    assert r.status_code == 204, r.text
    r = s.get(base + API + "/entities", params={"type": "T"})
    assert r.status_code == 200 and [x["speed"]["value"] for x in r.json()] == [2]
    assert s.delete(base + API + "/entities/urn:ngsi-ld:T:https1").status_code == 204
    r = s.get(base + API + "/entities/urn:ngsi-ld:T:https1")
    assert r.status_code == 404 and r.headers["Content-Type"].startswith("application/json")
    assert r.json()["type"].endswith("ResourceNotFound")


def test_keep_alive_serves_many_requests_on_one_tls_connection(tls):
    s, base, _ = tls
    for i in range(50):
        assert s.get(base + "/version").status_code == 200
    m = s.get(base + "/metrics").text
    opened = [ln for ln in m.splitlines() if ln.startswith("coraine_http_connections_total")]
    assert opened and float(opened[0].split()[-1]) <= 3, opened     # the fixture's probe, this session


def test_the_certificate_is_verified_against_the_ca(tls):
    _, base, _ = tls
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(base + "/version", timeout=5, verify=True)     # the system CAs do not know the test CA


def test_plain_http_on_the_https_port_gets_no_http_answer(tls):
    _, _, port = tls
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = c.recv(100)
    except (ConnectionResetError, socket.timeout):
        got = b""
    c.close()
    assert not got.startswith(b"HTTP/1.1 200")


def test_a_head_too_large_gets_a_problem_details_431_over_tls(tls, pki):
    _, _, port = tls
    ctx = ssl.create_default_context(cafile=pki["ca"])
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    c = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    filler = "".join("X-Filler-%d: %s\r\n" % (i, "v" * 100) for i in range(70))
    c.sendall(("GET %s/entities?type=T HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-tls\r\n%s"
               "Connection: close\r\n\r\n" % (API, filler)).encode())
    data = b""
    while True:
        try:
            b = c.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            break
        if not b:
            break
        data += b
    c.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), data[:200]
    assert b"X-Request-Id: big-tls" in head
    assert b'"status":431' in body.replace(b" ", b"")


def start_fails(tmp_path, *flags):
    p, _, log = run(tmp_path, *flags)
    rc = p.wait(20)
    text = open(log, errors="replace").read()
    assert_clean(text)
    return rc, text


def test_a_missing_certificate_stops_the_start(tmp_path, pki):
    rc, log = start_fails(tmp_path, "--https", "--cert", str(tmp_path / "nope.pem"), "--key", pki["key"])
    assert rc != 0 and "--cert" in log and "nope.pem" in log and "No such file" in log, log


def test_a_key_that_does_not_match_the_certificate_stops_the_start(tmp_path, pki):
    rc, log = start_fails(tmp_path, "--https", "--cert", pki["cert"], "--key", pki["other"])
    assert rc != 0 and "do not match" in log and pki["other"] in log, log


def test_a_file_that_is_not_pem_stops_the_start(tmp_path, pki):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    rc, log = start_fails(tmp_path, "--https", "--cert", pki["cert"], "--key", str(junk))
    assert rc != 0 and "--key" in log and "no PEM PRIVATE KEY" in log, log
    rc, log = start_fails(tmp_path, "--https", "--cert", pki["key"], "--key", pki["key"])
    assert rc != 0 and "no PEM CERTIFICATE" in log, log


def test_a_directory_is_not_readable_as_a_key(tmp_path, pki):
    rc, log = start_fails(tmp_path, "--https", "--cert", pki["cert"], "--key", str(tmp_path))
    assert rc != 0 and "--key" in log and "unreadable" in log, log


def test_https_needs_both_files_and_the_files_need_https(tmp_path, pki):
    rc, log = start_fails(tmp_path, "--https", "--cert", pki["cert"])
    assert rc != 0 and "--https needs --cert FILE and --key FILE" in log, log
    rc, log = start_fails(tmp_path, "--cert", pki["cert"], "--key", pki["key"])
    assert rc != 0 and "only with --https" in log, log


def test_the_environment_names_work_too(tmp_path, pki):
    port = free_port()
    env = dict(os.environ, CORAINE_HTTPS="true", CORAINE_CERT=pki["cert"], CORAINE_KEY=pki["key"])
    log = open(str(tmp_path / "env.log"), "wb")
    p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1"], env=env,
                         stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.time() + 15
        while True:
            try:
                r = requests.get("https://127.0.0.1:%d/version" % port, verify=pki["ca"], timeout=1)
                break
            except requests.RequestException:
                if time.time() > deadline or p.poll() is not None:
                    raise
                time.sleep(0.05)
        assert r.status_code == 200
    finally:
        p.terminate()
        p.wait(20)
    assert_clean(open(str(tmp_path / "env.log"), errors="replace").read())


# ---- SIGHUP: the certificate and key are read again (tls.c)

def self_signed(d, name):
    """A second, self-signed certificate for 127.0.0.1 (its own trust anchor)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", name + ".key",
            "-out", name + ".pem", "-days", "2", "-subj", "/CN=127.0.0.1 " + name,
            "-addext", "subjectAltName=IP:127.0.0.1", cwd=str(d))
    return os.path.join(str(d), name + ".pem"), os.path.join(str(d), name + ".key")


def put(path, src):
    """Replaces path with a copy of src, as a deployment tool renames a new file into place."""
    with open(src, "rb") as f:
        data = f.read()
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


def wait_log(log, text, after=0, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = open(log, errors="replace").read()
        if got.find(text, after) >= 0:
            return got
        time.sleep(0.05)
    raise AssertionError("no %r in the log:\n%s" % (text, open(log, errors="replace").read()))


def tls_connect(port, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")


def http_get(c, path="/version"):
    """One request on a kept-alive TLS connection; the status and the answer."""
    c.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += c.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0])
    while len(body) < n:
        body += c.recv(65536)
    return int(head.split()[1]), body


def der_of(pem):
    return ssl.PEM_cert_to_DER_cert(open(pem).read())


@pytest.fixture
def rotating(tmp_path, pki):
    """A broker whose --cert/--key are files the test replaces (live.pem, live.key)."""
    cert, key = str(tmp_path / "live.pem"), str(tmp_path / "live.key")
    put(cert, pki["cert"])
    put(key, pki["key"])
    p, port, log = run(tmp_path, "--https", "--cert", cert, "--key", key)
    deadline = time.time() + 15
    while True:
        try:
            c = tls_connect(port, pki["ca"])
            c.close()
            break
        except (OSError, ssl.SSLError):
            if time.time() > deadline or p.poll() is not None:
                p.kill()
                raise
            time.sleep(0.05)
    yield p, port, log, cert, key
    p.terminate()
    rc = p.wait(20)
    assert_clean(open(log, errors="replace").read())
    assert rc == 0


def test_sighup_rotates_the_certificate_new_connections_get_it_open_ones_keep_working(rotating, pki, tmp_path):
    p, port, log, cert, key = rotating
    assert "--https: certificate %s (loaded): CN=127.0.0.1" % cert in open(log).read()
    old = tls_connect(port, pki["ca"])                   # kept alive across the rotation
    assert http_get(old)[0] == 200
    assert old.getpeercert(binary_form=True) == der_of(pki["cert"])

    new_pem, new_key = self_signed(tmp_path, "second")
    put(cert, new_pem)
    put(key, new_key)
    mark = len(open(log).read())
    p.send_signal(signal.SIGHUP)
    got = wait_log(log, "SIGHUP: certificate %s (reloaded): CN=127.0.0.1 second" % cert, mark)
    assert "expires 20" in got[mark:], got[mark:]

    c = tls_connect(port, new_pem)                       # the second certificate, verified as its own anchor
    assert c.getpeercert(binary_form=True) == der_of(new_pem)
    assert http_get(c)[0] == 200
    c.close()
    with pytest.raises(ssl.SSLError):                    # the old CA no longer verifies new connections
        tls_connect(port, pki["ca"])

    for _ in range(3):                                   # the connection opened before goes on as it was
        status, body = http_get(old)
        assert status == 200 and b"version" in body.lower()
    old.close()


def test_a_bad_new_certificate_keeps_the_one_in_use_and_logs_an_error(rotating, pki, tmp_path):
    p, port, log, cert, key = rotating
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for new_cert, new_key, words in ((pki["cert"], pki["other"], "do not match"),
                                     (str(junk), pki["key"], "no PEM CERTIFICATE"),
                                     (pki["cert"], str(tmp_path / "gone.key"), "No such file")):
        put(cert, new_cert)
        if os.path.exists(new_key):
            put(key, new_key)
        else:
            os.unlink(key)
        mark = len(open(log).read())
        p.send_signal(signal.SIGHUP)
        got = wait_log(log, "SIGHUP: the certificate is not reloaded", mark)
        line = [ln for ln in got[mark:].splitlines() if "not reloaded" in ln][0]
        assert "ERROR" in line and words in line, line
        c = tls_connect(port, pki["ca"])                 # still the certificate loaded at the start
        assert c.getpeercert(binary_form=True) == der_of(pki["cert"])
        assert http_get(c)[0] == 200
        c.close()
        put(key, pki["key"])


# ---- the guard's answers under TLS: through libmicrohttpd (src/http/server.c tls_refuse)

def started(tmp_path, pki, *flags):
    p, port, log = run(tmp_path, "--https", "--cert", pki["cert"], "--key", pki["key"], *flags)
    deadline = time.time() + 15
    while True:
        try:
            tls_connect(port, pki["ca"]).close()
            return p, port, log
        except (OSError, ssl.SSLError):
            if time.time() > deadline or p.poll() is not None:
                p.kill()
                raise
            time.sleep(0.05)


def stop(p, log):
    p.terminate()
    rc = p.wait(20)
    assert_clean(open(log, errors="replace").read())
    assert rc == 0


def read_answer(c):
    """Everything until the server closes: (status, head, body)."""
    data = b""
    while True:
        try:
            b = c.recv(65536)
        except (ssl.SSLError, ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        data += b
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split()[1]) if head else 0), head, body


def cut_count(port, pki):
    c = tls_connect(port, pki["ca"])
    _, body = http_get(c, "/metrics")
    c.close()
    return float([ln for ln in body.decode().splitlines()
                  if ln.startswith("coraine_http_connections_cut_total")][0].split()[-1])


def wait_cut(port, pki, n=1):
    deadline = time.time() + 10
    while cut_count(port, pki) < n:
        assert time.time() < deadline, "the request never became late"
        time.sleep(0.05)


def test_beyond_max_connections_a_tls_client_gets_a_problem_details_503(tmp_path, pki):
    p, port, log = started(tmp_path, pki, "--maxConnections", "2")
    try:
        held = []
        deadline = time.time() + 10
        while len(held) < 2:                 # the probe's slot may still be closing: retried
            c = tls_connect(port, pki["ca"])
            status, body = http_get(c)
            if status == 200:
                held.append(c)
            else:
                c.close()
                assert time.time() < deadline, body[:200]
                time.sleep(0.1)
        c = tls_connect(port, pki["ca"])     # the TLS handshake completes: the answer is in TLS
        c.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\nX-Request-Id: over-1\r\n\r\n")
        status, head, body = read_answer(c)
        assert status == 503, head
        assert b"Retry-After: 1" in head and b"X-Request-Id: over-1" in head, head
        assert b"connection: close" in head.lower(), head
        assert b'"status":503' in body.replace(b" ", b"") and b"--maxConnections" in body, body
        for h in held:                       # the connections within the limit are not disturbed
            assert http_get(h)[0] == 200
            h.close()
    finally:
        stop(p, log)


def test_a_tls_head_completed_after_header_timeout_gets_a_problem_details_408(tmp_path, pki):
    p, port, log = started(tmp_path, pki, "--headerTimeout", "1")
    try:
        c = tls_connect(port, pki["ca"])
        c.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n")
        wait_cut(port, pki)                  # past --headerTimeout: late, not closed yet
        c.sendall(b"X-Request-Id: late-head\r\n\r\n")
        status, head, body = read_answer(c)
        assert status == 408, head
        assert b"X-Request-Id: late-head" in head and b"connection: close" in head.lower(), head
        assert b'"status":408' in body.replace(b" ", b"") and b"--headerTimeout" in body, body
    finally:
        stop(p, log)


def test_a_tls_body_completed_after_body_timeout_gets_a_problem_details_408_and_writes_nothing(tmp_path, pki):
    p, port, log = started(tmp_path, pki, "--bodyTimeout", "1")
    try:
        body = ('{"id":"urn:ngsi-ld:T:late-body","type":"T","@context":"%s"}' % CORE).encode()
        c = tls_connect(port, pki["ca"])
        c.sendall(("POST %s/entities HTTP/1.1\r\nHost: x\r\nContent-Type: application/ld+json\r\n"
                   "X-Request-Id: late-body\r\nContent-Length: %d\r\n\r\n" % (API, len(body))).encode() + body[:10])
        wait_cut(port, pki)
        c.sendall(body[10:])
        status, head, got = read_answer(c)
        assert status == 408, head
        assert b"X-Request-Id: late-body" in head, head
        assert b'"status":408' in got.replace(b" ", b"") and b"--bodyTimeout" in got, got
        c = tls_connect(port, pki["ca"])
        assert http_get(c, API + "/entities/urn:ngsi-ld:T:late-body")[0] == 404
        c.close()
    finally:
        stop(p, log)


def test_a_tls_head_that_never_completes_is_closed_counted_and_logged(tmp_path, pki):
    access = str(tmp_path / "access.log")
    p, port, log = started(tmp_path, pki, "--headerTimeout", "1", "--accessLog", access)
    try:
        c = tls_connect(port, pki["ca"])
        c.settimeout(20)
        c.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        status, head, _ = read_answer(c)     # nothing more is sent: no answer can be, the socket is closed
        assert status == 0 and head == b"", head
        assert time.time() - t0 < 15
        assert cut_count(port, pki) == 1
        deadline = time.time() + 5
        while ' 408 ' not in open(access).read():         # the access log has its line (no bytes sent)
            assert time.time() < deadline, open(access).read()
            time.sleep(0.05)
        assert '"-" 408 0' in open(access).read(), open(access).read()
    finally:
        stop(p, log)

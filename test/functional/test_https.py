"""--https --cert FILE --key FILE: the broker speaks TLS through libmicrohttpd's
GnuTLS (src/http/server.c; doc/operations.md). The certificates are made by
openssl in each test's directory (a CA and a server certificate it signs for
127.0.0.1), never kept in the repository. The client verifies the chain with
the test CA. A missing, unreadable or mismatched certificate or key stops the
start with a message that names it and a non-zero exit status."""
import os
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
    p, port, _ = run(tmp_path, "--https", "--cert", pki["cert"], "--key", pki["key"])
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
    assert p.wait(20) == 0


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
    return rc, open(log).read()


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

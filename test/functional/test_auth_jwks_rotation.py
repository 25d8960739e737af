"""--jwks URL and key rotation (doc/operations.md): a token whose kid none
of the keys has makes the broker fetch the key set again, at once, at most
once every --jwksRefetch seconds; requests that come while a fetch runs wait
for it rather than fetch again; made-up kids within the interval cost no
fetch. A small JWKS server here rotates its keys and counts the fetches."""
import http.server
import threading
import time

import pytest

from jwtkit import Key, claims, jwks, token
from test_auth import API, AuthBroker, assert_401
from test_metrics import LINE


class JwksServer:
    def __init__(self, *keys):
        self.doc, self.gets, self.delay = jwks(*keys).encode(), 0, 0.0
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                srv.gets += 1
                if srv.delay:
                    time.sleep(srv.delay)
                doc = srv.doc
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(doc)))
                self.end_headers()
                self.wfile.write(doc)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = "http://127.0.0.1:%d/jwks.json" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def rotate(self, *keys):
        self.doc = jwks(*keys).encode()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture(scope="module")
def rkeys():
    return [Key("EC", "rot-%d" % i) for i in range(5)]


def read(b, key, kid=Ellipsis):
    return b.req("GET", API + "/entities?type=A", token(claims({"*": "read"}), key=key, kid=kid))


def metric(b, key, name):
    r = b.req("GET", "/metrics", token(claims({"@default": "read"}), key=key))
    assert r.status_code == 200, r.text
    for line in r.text.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == name:
            return float(m.group(3))
    raise AssertionError(name + " missing")


def test_unknown_kid_refetches_the_jwks_rate_limited(tmp_path, rkeys):
    k0, k1, k2, k3, _ = rkeys
    js = JwksServer(k0)
    try:
        b = AuthBroker(tmp_path, "--jwks", js.url, "--jwksRefresh", "0", "--jwksRefetch", "2")
        try:
            assert js.gets == 1                                   # at start
            assert read(b, k0).status_code == 200
            # the issuer rotates: the new kid is fetched at once
            js.rotate(k1)
            assert read(b, k1).status_code == 200
            assert js.gets == 2
            assert metric(b, k1, "coraine_auth_jwks_refetches_total") == 1
            # within --jwksRefetch, unknown kids are refused without a fetch
            for _ in range(5):
                assert_401(read(b, k2), what="kid")
            assert_401(read(b, k2, kid="made-up"), what="kid")
            assert js.gets == 2
            # the old key is gone with the rotation
            assert_401(read(b, k0), what="kid")
            # after the interval the next unknown kid fetches again
            js.rotate(k1, k2)
            time.sleep(2.2)
            assert read(b, k2).status_code == 200
            assert js.gets == 3
            # a bad signature under a known kid fetches nothing
            bad = token(claims({"*": "read"}), key=k3, kid="rot-1")
            assert_401(b.req("GET", API + "/entities?type=A", bad), what="signature")
            assert js.gets == 3
            assert metric(b, k2, "coraine_auth_jwks_fetches_total") == 2
        finally:
            b.stop()
    finally:
        js.close()


def test_concurrent_tokens_with_a_new_kid_share_one_fetch(tmp_path, rkeys):
    k0, _, _, _, k4 = rkeys
    js = JwksServer(k0)
    try:
        b = AuthBroker(tmp_path, "--jwks", js.url, "--jwksRefresh", "0", "--jwksRefetch", "60",
                       "--connectionPoolSize", "4")
        try:
            js.rotate(k0, k4)
            js.delay = 0.5
            codes = []
            ts = [threading.Thread(target=lambda: codes.append(read(b, k4).status_code)) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert codes == [200] * 4
            assert js.gets == 2, "one fetch at start, one for the new kid"
        finally:
            b.stop()
    finally:
        js.close()


def test_jwks_refetch_zero_never_fetches_for_a_kid(tmp_path, rkeys):
    k0, k1 = rkeys[0], rkeys[1]
    js = JwksServer(k0)
    try:
        b = AuthBroker(tmp_path, "--jwks", js.url, "--jwksRefresh", "0", "--jwksRefetch", "0")
        try:
            js.rotate(k1)
            assert_401(read(b, k1), what="kid")
            assert js.gets == 1
        finally:
            b.stop()
    finally:
        js.close()

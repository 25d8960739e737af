"""Helpers shared by the functional tests: entity builders, JSON comparison and
ProblemDetails checks. The fixtures that start processes live in conftest.py;
this module holds only functions (no fixtures, no processes), so tests can import
it by name."""

import json
import random
import threading
import time
import re
import socket
import uuid

API = "/ngsi-ld/v1"
ERR = "https://uri.etsi.org/ngsi-ld/errors/"
DEFAULT_VOCAB = "https://uri.etsi.org/ngsi-ld/default-context/"
CORE_CONTEXT_URL = "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"
JSONLD_CONTEXT_REL = "http://www.w3.org/ns/json-ld#context"
NGSI_NULL = "urn:ngsi-ld:null"

# 4.6.3: YYYY-MM-DDThh:mm:ss(.f{1,6})?Z
DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def uid(prefix="E"):
    """A fresh entity id, unique across the run (default-tenant tests need it)."""
    return "urn:ngsi-ld:%s:%s" % (prefix, uuid.uuid4().hex[:16])


# The user @context most tests use (served at /ctx.jsonld by the context server).
VEHICLE_CTX = {
    "@context": {
        "Vehicle": "https://example.org/Vehicle",
        "Car": "https://example.org/Car",
        "speed": "https://example.org/speed",
        "brand": "https://example.org/brand",
        "isParked": {"@id": "https://example.org/isParked", "@type": "@id"},
    }
}


_HANDED_OUT = set()


def _below_ephemeral():
    """Ports below the kernel's ephemeral range (ip_local_port_range), where
    no outgoing connection (a broker's to FerretDB, curl's to a receiver)
    takes one between free_port() and the server's bind; (lo, hi) or None."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (10000, low - 1) if low - 1 - 10000 >= 2000 else None


_RANGE = _below_ephemeral()


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()


def free_port():
    """A loopback port free now and not handed out before in this session: a
    test that holds a fixed port across a restart of its server (a --corPort)
    does not find it taken by another server of the session. Chosen below the
    ephemeral range where there is room (see _below_ephemeral), else by the
    kernel."""
    for _ in range(200):
        port = _bindable(random.randint(*_RANGE)) if _RANGE else _bindable(0)
        if port and port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free loopback port")


# ---- builders --------------------------------------------------------------

def entity(id, type, **attrs):
    e = {"id": id, "type": type}
    e.update(attrs)
    return e


def prop(value, **sub):
    a = {"type": "Property", "value": value}
    a.update(sub)
    return a


def rel(obj, **sub):
    a = {"type": "Relationship", "object": obj}
    a.update(sub)
    return a


def geo(gtype, coordinates, **sub):
    a = {"type": "GeoProperty", "value": {"type": gtype, "coordinates": coordinates}}
    a.update(sub)
    return a


def point(lon, lat, **sub):
    return geo("Point", [lon, lat], **sub)


def langprop(lmap, **sub):
    a = {"type": "LanguageProperty", "languageMap": lmap}
    a.update(sub)
    return a


def vocabprop(vocab, **sub):
    a = {"type": "VocabProperty", "vocab": vocab}
    a.update(sub)
    return a


def listprop(values, **sub):
    a = {"type": "ListProperty", "valueList": values}
    a.update(sub)
    return a


def listrel(objects, **sub):
    a = {"type": "ListRelationship", "objectList": [{"object": o} for o in objects]}
    a.update(sub)
    return a


def jsonprop(value, **sub):
    a = {"type": "JsonProperty", "json": value}
    a.update(sub)
    return a


def link_header(url):
    return '<%s>; rel="%s"; type="application/ld+json"' % (url, JSONLD_CONTEXT_REL)


# ---- comparison ------------------------------------------------------------

def canon_datetime(s):
    """2024-01-01T10:00:00Z and 2024-01-01T10:00:00.000Z are the same instant
    (4.6.3); compare DateTimes at microsecond precision, whatever their spelling."""
    m = DATETIME_RE.match(s)
    if not m:
        return s
    frac = (m.group(1) or ".")[1:]
    return s[:19] + "." + frac.ljust(6, "0") + "Z"


def canon(value, unordered=False):
    """A canonical form of a JSON value: object key order never matters, nor the
    spelling of a DateTime; with unordered=True the order of array elements does
    not matter either."""
    if isinstance(value, str):
        return canon_datetime(value)
    if isinstance(value, dict):
        return {k: canon(v, unordered) for k, v in value.items()}
    if isinstance(value, list):
        items = [canon(v, unordered) for v in value]
        if unordered:
            items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return items
    return value


def assert_json_equal(actual, expected, unordered=False):
    a, e = canon(actual, unordered), canon(expected, unordered)
    assert a == e, "JSON differs:\n  actual:   %s\n  expected: %s" % (
        json.dumps(a, sort_keys=True), json.dumps(e, sort_keys=True))


def strip_sys(value):
    """Removes createdAt/modifiedAt everywhere (for comparisons after sysAttrs)."""
    if isinstance(value, dict):
        return {k: strip_sys(v) for k, v in value.items() if k not in ("createdAt", "modifiedAt")}
    if isinstance(value, list):
        return [strip_sys(v) for v in value]
    return value


def ids_of(body):
    assert isinstance(body, list), "expected a JSON array, got %r" % (body,)
    return sorted(e["id"] for e in body)


def types_of(e):
    t = e["type"]
    return sorted(t) if isinstance(t, list) else [t]


def media_type(resp):
    return resp.headers.get("Content-Type", "").split(";")[0].strip().lower()


def assert_problem(resp, status, name):
    """6.3.3 / 5.5.3: status, Content-Type application/json, a JSON object with
    type == https://uri.etsi.org/ngsi-ld/errors/<name>, a title and a detail."""
    body_txt = resp.text[:400]
    assert resp.status_code == status, "expected %d %s, got %d: %s" % (
        status, name, resp.status_code, body_txt)
    assert media_type(resp) == "application/json", \
        "ProblemDetails must be application/json (6.3.3), got %r" % resp.headers.get("Content-Type")
    try:
        body = resp.json()
    except ValueError:
        raise AssertionError("ProblemDetails body is not JSON: %r" % body_txt)
    assert isinstance(body, dict), body
    assert body.get("type") == ERR + name, "expected type %s, got %r (%s)" % (
        ERR + name, body.get("type"), body_txt)
    assert isinstance(body.get("title"), str) and body["title"], "ProblemDetails without title: %s" % body_txt
    assert isinstance(body.get("detail"), str) and body["detail"], "ProblemDetails without detail: %s" % body_txt
    if "status" in body:
        assert body["status"] == status, body
    return body


def assert_problem_body(pd, name):
    """A ProblemDetails inside another body (BatchEntityError.error)."""
    assert isinstance(pd, dict), pd
    assert pd.get("type") == ERR + name, "expected %s, got %r" % (ERR + name, pd)
    assert isinstance(pd.get("title"), str) and pd["title"], pd


def assert_no_body(resp):
    assert resp.content in (b"",), "expected no body, got %r" % resp.content[:200]


def read_answer(s):
    """(status, headers lower-cased, body bytes) of one HTTP answer read from
    socket s (until Content-Length bytes of body, or the end), or None when
    the connection ends before any answer."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            break
        data += chunk
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            n = int(_head_fields(head).get("content-length", "-1"))
            if n >= 0 and len(rest) >= n:
                break
    if not data:
        return None
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(data.split(b" ", 2)[1]), _head_fields(head), rest


def _head_fields(head):
    hdrs = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return hdrs


def process_rss_kib(pid):
    """Resident memory of process pid in KiB (Linux)."""
    m = re.search(r"^VmRSS:\s+(\d+)", open("/proc/%d/status" % pid).read(), re.M)
    return int(m.group(1)) if m else 0


def in_thread(call, answer):
    """call() (a request) on a thread of its own, started; when it returns,
    answer holds its status, the start of its body and the seconds it took.
    For a request that waits (a slow context source) while the test does
    other things."""
    def run():
        t0 = time.time()
        r = call()
        answer.update(status=r.status_code, body=r.text[:300], seconds=round(time.time() - t0, 2))
    t = threading.Thread(target=run)
    t.start()
    return t

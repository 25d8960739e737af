"""scen.py - what the deployment scenarios (test/scenarios/s*.py) share:
brokers and notification receivers started on free loopback ports and
stopped at the end, a keep-alive JSON client that times its requests, wrk
runs, the broker's /metrics, percentiles, and the report: each scenario's
verdict and numbers go between its own markers in doc/reliability.md.

MODE=check (the default; CI): the fast assertions. MODE=load: the rate
ladder, and the report (REPORT=path overrides doc/reliability.md, REPORT=
writes none)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CORAINE_BIN") or os.path.join(ROOT, "build/release/coraine")
RECEIVER = os.path.join(os.path.dirname(BIN), "tools", "receiver")
MODE = os.environ.get("MODE", "check")
REPORT = os.environ.get("REPORT", os.path.join(ROOT, "doc/reliability.md"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Client:
    def __init__(self, port, tenant=None):
        self.port, self.tenant = port, tenant
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def req(self, method, path, body=None, headers=None):
        h = {}
        if body is not None:
            h["Content-Type"] = "application/json"
        if self.tenant:
            h["NGSILD-Tenant"] = self.tenant
        h.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        t0 = time.perf_counter()
        try:
            self.c.request(method, path, body=data, headers=h)
            r = self.c.getresponse()
            payload = r.read()
            status = r.status
        except (http.client.HTTPException, OSError):
            self.c.close()
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            status, payload = 0, b""
        return status, payload, time.perf_counter() - t0

    def json(self, method, path, body=None):
        st, payload, _ = self.req(method, path, body)
        return st, (json.loads(payload) if payload else None)


class Procs:
    """Brokers and receivers of one scenario; all stopped by close()."""

    def __init__(self):
        self.procs, self.tmp = [], tempfile.mkdtemp(prefix="coraine-scen-")
        # SIGTERM (a CI time-out) unwinds through close(): no broker is left behind
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))

    def broker(self, *flags):
        port = free_port()
        log = open(os.path.join(self.tmp, "coraine-%d.log" % port), "wb")
        p = subprocess.Popen([BIN, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "warn"] +
                             list(flags), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        wait_up(port, "/ready", p)
        return port

    def receiver(self, *flags):
        port = free_port()
        p = subprocess.Popen([RECEIVER, "--port", str(port)] + list(flags), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        wait_up(port, "/count", p)
        return port

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def wait_up(port, path, proc):
    deadline = time.time() + 15
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("a process exited at start (%s)" % proc.args)
        try:
            if Client(port).req("GET", path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("%s did not answer %s" % (proc.args[0], path))


def receiver_count(port):
    return json.loads(Client(port).req("GET", "/count")[1])


def metrics(port):
    out = {}
    for line in Client(port).req("GET", "/metrics")[1].decode().splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            try:
                out[name] = float(v)
            except ValueError:
                pass
    return out


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def wrk(port, duration, conns, threads, script, args=(), headers=()):
    """requests/s, non-2xx, p50 µs, p99 µs, completed requests."""
    cmd = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency", "-s",
           os.path.join(os.path.dirname(os.path.abspath(__file__)), script)]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd + ["http://127.0.0.1:%d/" % port, "--"] + [str(a) for a in args],
                         capture_output=True, text=True, check=True).stdout

    def lat(q):
        m = re.search(r"%s%%\s+([\d.]+)(us|ms|s)\b" % q, out)
        return float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)] if m else 0.0
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "bad": int(bad.group(1)) if bad else 0, "p50": lat(50), "p99": lat(99),
            "requests": int(done.group(1)) if done else 0}


def report(key, title, verdict, text):
    """The scenario's section in REPORT (between its markers), and stdout."""
    block = "## %s\n\n%s\n\n**Verdict: %s** (`MODE=%s python3 test/scenarios/%s.py`, %s, commit %s)\n" % (
        title, text, "PASS" if verdict else "FAIL", MODE, key,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                       text=True).stdout.strip() or "?")
    print(block)
    if MODE == "load" and REPORT:
        begin, end = "<!-- %s:begin -->" % key, "<!-- %s:end -->" % key
        doc = open(REPORT).read() if os.path.exists(REPORT) else "# Reliability\n"
        b = begin + "\n" + block + end
        if begin in doc and end in doc:
            doc = doc[:doc.index(begin)] + b + doc[doc.index(end) + len(end):]
        else:
            doc = doc.rstrip("\n") + "\n\n" + b + "\n"
        open(REPORT, "w").write(doc)
    print("%s: %s" % (key, "PASS" if verdict else "FAIL"))
    return 0 if verdict else 1


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

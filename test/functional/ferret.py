"""A MongoDB-wire server for the tests of `--database mongoc`.

No MongoDB server package is reachable from Debian, so the tests run FerretDB
v1.24.2 on its SQLite backend, embedded in the small Go program of
test/ferretdb (its own cmd/ferretdb panics at start for want of a generated
version file). FerretServer builds that program with `go build` once (into
build/ferretdb/, again only when its sources are newer), starts it on a free
loopback port with its SQLite files in a fresh temporary directory, and stops
it at the end. stop()/start() keep the directory and the port: the tests of a
database that goes away and comes back use them.

What FerretDB lacks (2dsphere, $geoWithin/$near, change streams) is in
doc/mongodb.md; the broker checks the server's capabilities at start.

The `ferret` fixture (session scope) is skipped, with the reason, when no Go
toolchain is found (scripts/deps.sh installs one); `mongo_flags(ferret)` gives
the broker flags for a database prefix of its own.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from ngsi import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SRC = os.path.join(REPO, "test", "ferretdb")
BIN = os.path.join(REPO, "build", "ferretdb", "ferretdb")


def go_binary():
    for g in (shutil.which("go"), "/usr/local/go/bin/go",
              os.path.join(os.environ.get("CORAINE_GO_DIR", "/usr/local/lib/coraine-go"), "bin", "go")):
        if g and os.path.exists(g):
            return g
    return None


def build():
    """The FerretDB program, built when missing or older than its sources."""
    srcs = [os.path.join(SRC, f) for f in ("main.go", "go.mod", "go.sum")]
    if os.path.exists(BIN) and all(os.path.getmtime(BIN) >= os.path.getmtime(s) for s in srcs):
        return BIN
    go = go_binary()
    if not go:
        raise RuntimeError("no Go toolchain (scripts/deps.sh installs one): FerretDB cannot be built")
    os.makedirs(os.path.dirname(BIN), exist_ok=True)
    r = subprocess.run([go, "build", "-o", BIN, "."], cwd=SRC, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("go build of test/ferretdb failed: %s %s" % (r.stdout[-2000:], r.stderr[-2000:]))
    return BIN


class FerretServer:
    def __init__(self):
        self.bin = build()
        self.dir = tempfile.mkdtemp(prefix="coraine-ferret-")
        self.port = free_port()
        self.log = os.path.join(self.dir, "ferretdb.log")
        self.proc = None
        self.start()

    @property
    def uri(self):
        return "mongodb://127.0.0.1:%d" % self.port

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen([self.bin, "-listen", "127.0.0.1:%d" % self.port,
                                      "-dir", os.path.join(self.dir, "data")],
                                     stdout=logf, stderr=subprocess.STDOUT)
        logf.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ferretdb exited at start: %s" % self.read_log()[-3000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("ferretdb did not listen within 30 s: %s" % self.read_log()[-3000:])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def read_log(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_SHARED = []


def shared_server():
    """One server for the whole session (the functional suite on mongoc)."""
    if not _SHARED:
        _SHARED.append(FerretServer())
    return _SHARED[0]


def close_shared():
    while _SHARED:
        _SHARED.pop().close()


def new_prefix():
    return "c" + uuid.uuid4().hex[:12]


def mongo_flags(server, prefix=None, *extra):
    return ("--database", "mongoc", "--dbURI", server.uri, "--dbName", prefix or new_prefix()) + extra


@pytest.fixture(scope="session")
def ferret():
    if not go_binary() and not os.path.exists(BIN):
        pytest.skip("no Go toolchain to build FerretDB (scripts/deps.sh installs one): "
                    "the --database mongoc tests need a MongoDB-wire server")
    return shared_server()

"""A real PostgreSQL for the tests of `--history timescale`.

PgServer runs Debian's server binaries (/usr/lib/postgresql/<version>/bin,
installed by scripts/deps.sh): initdb in a fresh temporary directory, then a
postmaster that listens on a Unix socket only (in that directory, named by a
free port number: no TCP port is taken), stopped at the end. PostgreSQL
refuses to run as root, so when the tests run as root the cluster belongs to
`nobody` and the commands run through runuser. Trust authentication for the
socket: only this machine's users can reach it, and it lives for one session.

The `pg_server` fixture (session scope) is skipped, with the reason, only
when no PostgreSQL server is installed; `pg_uri` gives a fresh database per
caller (`pg_server.new_database()`), so brokers never share tables.
"""

import glob
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from ngsi import free_port


def pg_bindir():
    """The newest installed server's bin directory, or None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                  key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(dirs[-1]) if dirs else None


class PgServer:
    USER = "coraine"

    def __init__(self):
        self.bindir = pg_bindir()
        if not self.bindir:
            raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql/*/bin "
                               "(scripts/deps.sh installs Debian's postgresql)")
        self.dir = tempfile.mkdtemp(prefix="coraine-pg-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "postgres.log")
        self.port = free_port()            # names the socket file only (no TCP)
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "nobody")
        self._run(["initdb", "-D", self.data, "-A", "trust", "-U", self.USER, "-E", "UTF8",
                   "--no-sync", "--locale=C"])
        self._run(["pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "30", "-o",
                   "-k %s -p %d -c listen_addresses='' -c fsync=off -c full_page_writes=off "
                   "-c synchronous_commit=off -c max_connections=200" % (self.dir, self.port),
                   "start"])

    def _run(self, argv, check=True):
        cmd = [os.path.join(self.bindir, argv[0])] + argv[1:]
        if self.as_root:
            cmd = ["runuser", "-u", "nobody", "--"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s %s" % (" ".join(cmd), r.returncode,
                                                          r.stdout[-2000:], r.stderr[-2000:]))
        return r

    def uri(self, db="postgres"):
        return "postgresql://%s@/%s?host=%s&port=%d" % (self.USER, db, self.dir, self.port)

    def psql(self, sql, db="postgres"):
        """Runs sql with psql; returns its unaligned, tuples-only output."""
        psql = os.path.join(self.bindir, "psql")
        if not os.path.exists(psql):
            psql = shutil.which("psql")
        r = subprocess.run([psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.uri(db),
                            "-c", sql], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("psql: %s" % r.stderr)
        return r.stdout.strip()

    def new_database(self):
        name = "h" + uuid.uuid4().hex[:16]
        self.psql("CREATE DATABASE %s" % name)
        return name

    def stop(self, mode="fast"):
        self._run(["pg_ctl", "-D", self.data, "-m", mode, "-w", "stop"], check=False)

    def start(self):
        self._run(["pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "30", "-o",
                   "-k %s -p %d -c listen_addresses='' -c fsync=off -c full_page_writes=off "
                   "-c synchronous_commit=off -c max_connections=200" % (self.dir, self.port),
                   "start"])

    def close(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


_PG = []

@pytest.fixture(scope="session")
def pg_server():
    if not pg_bindir():
        pytest.skip("PostgreSQL is not installed (scripts/deps.sh installs postgresql): "
                    "the --history timescale tests need a real server")
    s = PgServer()
    _PG.append(s)
    yield s
    s.close()


@pytest.fixture(scope="session")
def pg_uri(pg_server):
    """A database of its own on the session's server, as --historyURI."""
    return pg_server.uri(pg_server.new_database())

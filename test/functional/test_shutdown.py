"""Clean shutdown: SIGTERM and SIGINT stop the broker promptly and it exits 0
(the signals are blocked in every thread and taken by the main thread with
sigwait, so none is missed and none goes to a worker)."""
import os
import signal
import subprocess
import time

import requests

from conftest import binary_path, REPO
from ngsi import free_port

def start(tmp_path, *flags):
    port = free_port()
    log = open(os.path.join(str(tmp_path), "coraine-%d.log" % port), "wb")
    p = subprocess.Popen([binary_path(), "-fg", "--port", str(port), "--bind", "127.0.0.1"] + list(flags),
                         stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    base = "http://127.0.0.1:%d" % port
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            if requests.get(base + "/version", timeout=1).status_code == 200:
                return p, base
        except requests.RequestException:
            time.sleep(0.02)
    p.kill()
    raise RuntimeError("broker did not start")


def stop_with(tmp_path, sig, *flags):
    p, base = start(tmp_path, *flags)
    try:
        assert requests.get(base + "/version", timeout=5).status_code == 200
        p.send_signal(sig)
        p.wait(timeout=10)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_sigterm_stops_the_broker_every_time(tmp_path):
    # the old main loop (a flag set by a handler, then pause()) could miss a
    # signal that came between the test of the flag and pause(), and wait
    # for ever (CI saw it: a broker that never logged "stopping")
    for _ in range(5):
        stop_with(tmp_path, signal.SIGTERM, "--connectionPoolSize", "4")


def test_sigint_stops_the_broker(tmp_path):
    stop_with(tmp_path, signal.SIGINT)

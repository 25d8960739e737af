"""The notification receiver (tools/receiver.c) as a test fixture: one process
per receiver on a free loopback port, with its counts and the last
notifications it got."""

import os
import subprocess
import tempfile
import time

import requests

from conftest import binary_path
from ngsi import free_port


def receiver_path():
    return os.path.join(os.path.dirname(binary_path()), "tools", "receiver")


class Receiver:
    def __init__(self, *flags, port=None):
        """port: one chosen beforehand (a subscription may name it while nothing listens there yet)."""
        why = ""
        for _ in range(1 if port else 3):            # a port taken meanwhile: another one
            self.port = port or free_port()
            err = tempfile.TemporaryFile()
            self.proc = subprocess.Popen([receiver_path(), "--port", str(self.port)] + list(flags),
                                         stdout=subprocess.DEVNULL, stderr=err)
            self.base = "http://127.0.0.1:%d" % self.port
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    requests.get(self.base + "/count", timeout=1)
                    err.close()
                    return
                except requests.RequestException:
                    time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()
            rc = self.proc.wait()
            err.seek(0)
            why = "exit %s: %s" % (rc, err.read().decode("utf-8", "replace")[-2000:])
            err.close()
        raise RuntimeError("the receiver did not start (%s)" % why)

    @property
    def uri(self):
        return self.base + "/notify"

    def count(self):
        return requests.get(self.base + "/count", timeout=10).json()

    def notifications(self):
        return requests.get(self.base + "/notifications", timeout=10).json()

    def reset(self):
        requests.post(self.base + "/reset", timeout=10)

    def wait(self, n, timeout=10.0, key="notifications"):
        """Waits until at least n notifications came; returns the counts."""
        deadline = time.time() + timeout
        while True:
            c = self.count()
            if c[key] >= n or time.time() > deadline:
                return c
            time.sleep(0.02)

    def settle(self, quiet=0.3, timeout=20.0):
        """Waits until nothing new arrives for `quiet` seconds."""
        deadline = time.time() + timeout
        last = self.count()
        while time.time() < deadline:
            time.sleep(quiet)
            c = self.count()
            if c["notifications"] == last["notifications"]:
                return c
            last = c
        return last

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_failed(cli, sid, timeout=10.0):
    """The subscription's notification members once a notification failed."""
    deadline = time.time() + timeout
    while True:
        n = cli.get("/subscriptions/" + sid).json()["notification"]
        if n["timesFailed"] or time.time() > deadline:
            return n
        time.sleep(0.05)

"""The perf harness's own tools (test/perf/): openload.c, the open-model driver of knee.py and
scale.py, schedules by time and counts each latency from the time its request was due
(coordinated omission counted); report.py rewrites only the spans of doc/performance.md
between its markers and names each table's commit, machine and command."""

import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, Client

PERF = os.path.join(REPO, "test", "perf")


@pytest.fixture(scope="module")
def openload(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("openload") / "openload")
    subprocess.run(["gcc", "-std=c17", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out,
                    os.path.join(PERF, "openload.c")], check=True, timeout=120)
    return out


def run(openload, *args, timeout=60):
    r = subprocess.run([openload, *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_openload_drives_the_broker_with_numbered_requests(openload, broker):
    c = Client(broker)
    c.batch_create([{"id": "urn:ngsi-ld:Vehicle:%d" % i, "type": "Vehicle",
                     "speed": {"type": "Property", "value": -1}} for i in range(5)])
    res = run(openload, "-u", broker.base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:{i}/attrs", "-m", "PATCH",
              "-b", '{"speed":{"type":"Property","value":{i}}}', "-n", "5", "-H", "Content-Type: application/json",
              "-r", "200", "-d", "1", "-c", "4")
    assert res["scheduled"] == 200 and res["completed"] == 200
    assert res["non2xx"] == 0 and res["errors"] == 0
    for i in range(5):                                  # {i} in the path and the body: i % 5 for request i
        assert c.entity("urn:ngsi-ld:Vehicle:%d" % i)["speed"]["value"] == i


def test_openload_counts_a_stall_from_the_due_time(openload):
    """A server answering in 200 ms on one connection, offered 20 requests in a second: a closed
    model would report ~200 ms; the requests queued behind the stall waited seconds, and say so."""
    class Slow(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            time.sleep(0.2)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        res = run(openload, "-u", "http://127.0.0.1:%d/x" % srv.server_address[1], "-r", "20", "-d", "1",
                  "-c", "1", "-g", "10")
    finally:
        srv.shutdown()
    assert res["completed"] == 20 and res["errors"] == 0
    assert res["maxBacklog"] >= 10
    assert res["p50us"] >= 1_000_000          # half of them waited a second or more behind the stall
    assert res["maxus"] >= 2_500_000          # the last was due at 0.95 s and answered after 4 s
    assert res["achievedRate"] < 10


def test_openload_refuses_bad_arguments(openload):
    for args in (["-r", "10", "-d", "1"], ["-u", "http://localhost:1/", "-r", "10"], ["-u", "http://127.0.0.1:1/",
                                                                                       "-r", "0"]):
        r = subprocess.run([openload, *args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and "openload" in r.stderr


def test_report_rewrites_only_its_markers(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    row = {"shape": "retrieve", "runs": 3, "rpsMedian": 1234, "rpsSpreadPct": 2.5, "rpsRuns": "1200;1234;1300",
           "p50us": 100, "p99us": 900, "non2xx": 0, "requests": 9999, "cpuSeconds": 1.5, "cpuUsPerRequest": 15.0,
           "peakRssKiB": 20480, "ceilingShape": "trivial", "ceilingRps": 2000, "ofCeiling": 0.617,
           "notificationsDue": "", "notificationsReceived": "", "entitiesReceived": "", "notificationsDropped": ""}
    (results / "perf_run.csv").write_text(",".join(row) + "\n" + ",".join(str(v) for v in row.values()) + "\n")
    (results / "perf_run.csv.meta.json").write_text(json.dumps(
        {"commit": "abcdef123456", "machine": "x86_64, 2 cores, Test CPU", "at": "2026-12-01T00:00:00Z",
         "loadAverages": [1.5, 1.0, 0.5], "command": "python3 test/perf/perf_run.py --csv x", "runs": 3,
         "durationSeconds": 5, "connections": 50, "wrkThreads": 2, "entities": 10000}))
    md = tmp_path / "performance.md"
    head, tail = "# perf\n\nhand-recorded text, kept\n\n", "\n## an earlier recorded run\n\n| a | b |\n"
    md.write_text(head + "<!-- report:perf_run -->\nstale\n<!-- /report -->\n\n<!-- report:knee -->\n"
                  "<!-- /report -->\n" + tail)
    r = subprocess.run([sys.executable, os.path.join(PERF, "report.py"), "--in", str(results), "--perf-md", str(md),
                        "--md", str(tmp_path / "tuning.md"), "--html", str(tmp_path / "report.html")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert text.startswith(head) and text.endswith(tail) and "stale" not in text
    gen = text[text.index("<!-- report:perf_run -->"):text.index("<!-- report:knee -->")]
    assert "abcdef123456" in gen and "Test CPU" in gen and "1.50 / 1.00 / 0.50" in gen
    assert "python3 test/perf/perf_run.py --csv x" in gen
    assert "| retrieve | 1234 | ±2.5 % | 1200, 1234, 1300 |" in gen and "trivial, 2000 requests/s" in gen
    assert "Not measured yet: `python3 test/perf/knee.py" in text        # a missing input names its command
    assert not (tmp_path / "tuning.md").exists()                           # no pgo/tune input: left alone
    page = (tmp_path / "report.html").read_text()
    assert "<svg" in page and "<script" not in page

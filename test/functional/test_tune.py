"""make tune's tools (test/perf/tune/, ../shared/TUNING.md) and the image's entry point
(docker/coraine-start): a bad workload file fails in the first second naming the
member; a smoke measurement (a second per run) writes a tune-result.json of
TUNING.md's shape; coraine-start applies a tune.env, and the environment wins,
as GET /version shows."""

import json
import os
import subprocess
import sys
import time

import pytest
import requests

from conftest import REPO, binary_path
from ngsi import free_port

TUNE = os.path.join(REPO, "test", "perf", "tune")
EXAMPLE = os.path.join(TUNE, "workload.example.json")
sys.path.insert(0, TUNE)
import tuneResult  # noqa: E402


def example():
    with open(EXAMPLE) as f:
        return json.load(f)


def check(tmp_path, w):
    p = tmp_path / "w.json"
    p.write_text(json.dumps(w) if not isinstance(w, str) else w)
    c0 = os.times()
    r = subprocess.run([sys.executable, os.path.join(TUNE, "tuneGen.py"), "check", str(p)],
                       capture_output=True, text=True, timeout=10)
    c1 = os.times()
    # the checker's own CPU time: "in the first second" on an idle machine; the wall time of
    # a loaded one (the tests share it) says more about the others than about the checker
    return r, (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)


def test_the_example_workloads_check(tmp_path):
    for name in ("workload.example.json", "workload.ingest.json"):
        r = subprocess.run([sys.executable, os.path.join(TUNE, "tuneGen.py"), "check", os.path.join(TUNE, name)],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr


def set_path(w, path, value):
    obj = w
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    return w


@pytest.mark.parametrize("path,value,member,words", [
    (("entities", "count"), "many", "entities.count", "expected an integer"),
    (("load", "concurrency"), True, "load.concurrency", "expected an integer"),
    (("store", "persistent"), "yes", "store.persistent", "expected a boolean"),
    (("load", "colour"), 1, "load.colour", "unknown member"),
    (("entities", "types", 0, "colour"), 1, "entities.types[0].colour", "unknown member"),
    (("entities", "types", 0, "share"), 1.5, "entities.types[0].share", "out of range"),
    (("load", "mix", "patch"), -0.1, "load.mix.patch", "out of range"),
    (("entities", "types", 1, "attributes", 0, "type"), "Propety", "entities.types[1].attributes[0].type",
     "is not one of"),
    (("duration",), "thirty seconds", "duration", "is not a duration"),
    (("duration",), "PT", "duration", "is not a duration"),
    (("store", "history"), "influx", "store.history", "is not one of"),
    (("subscriptions", 0, "watchedAttributes"), ["colour"], "subscriptions[0].watchedAttributes[0]",
     "is not an attribute"),
])
def test_a_bad_workload_fails_in_the_first_second_naming_the_member(tmp_path, path, value, member, words):
    r, took = check(tmp_path, set_path(example(), list(path), value))
    assert r.returncode == 2
    assert took < 1.0
    assert (member + ":") in r.stderr and words in r.stderr, r.stderr


def test_a_file_that_is_not_json_is_named(tmp_path):
    r, _ = check(tmp_path, "{ not json")
    assert r.returncode == 2 and "not JSON" in r.stderr


def is_sanitized(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libasan" in out or "libtsan" in out


STATIC_CALL = """
static __attribute__((noinline)) int twice(int x) { return 2 * x; }
int main(int argc, char **argv) { int s = 0; for (int i = 0; i < 1000; i++) s += twice(i + argc); return s == 7; }
"""


def test_a_static_functions_profile_is_found_only_under_its_pgo_gen_name(tmp_path):
    """What make pgo's PGO_DUMPDIR is for: GCC hashes the auxiliary name (from -o) into a static
    function's profile id, so an object compiled elsewhere than its -fprofile-generate twin finds no
    profile for it ("Missing counts for called function") unless -dumpdir names the twin's place."""
    src = tmp_path / "x.c"
    src.write_text(STATIC_CALL)
    for d in ("gen", "use"):
        (tmp_path / d).mkdir()
    cc = ["gcc", "-O2", "-c", "x.c"]
    subprocess.run(cc + ["-fprofile-generate", "-o", "gen/x.o"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-fprofile-generate", "-o", "gen/x", "gen/x.o"], cwd=tmp_path, check=True)
    subprocess.run(["gen/x"], cwd=tmp_path, check=False)
    assert (tmp_path / "gen" / "x.gcda").exists()
    os.link(tmp_path / "gen" / "x.gcda", tmp_path / "use" / "x.gcda")    # what make pgo copied once
    plain = subprocess.run(cc + ["-fprofile-use", "-o", "use/x.o"], cwd=tmp_path, capture_output=True, text=True)
    assert "twice" in plain.stderr and "not found in profile data" in plain.stderr, plain.stderr
    fixed = subprocess.run(cc + ["-fprofile-use", "-dumpdir", "gen/", "-o", "use/x.o"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert fixed.returncode == 0 and fixed.stderr == "", fixed.stderr


def test_make_pgo_compiles_each_object_under_its_pgo_gen_name(tmp_path):
    """The pgo variants' compile lines carry -dumpdir build/pgo-gen/<the source's directory>, and
    no -Wno-missing-profile: a profile that goes missing again shows in make pgo's output."""
    out = subprocess.run(["make", "-n", "-B", "VARIANT=pgo", "BUILD=%s" % tmp_path,
                          "%s/src/json/json_problem.o" % tmp_path], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    line = [l for l in out.splitlines() if " -c src/json/json_problem.c " in l]
    assert line, out
    assert "-fprofile-use" in line[0] and "-dumpdir build/pgo-gen/src/json/ " in line[0], line[0]
    assert "-Wno-missing-profile" not in line[0]


def test_tune_smoke_writes_a_result_of_tunings_shape(tmp_path):
    """tuneMeasure.sh on a small copy of the example workload, a second per run."""
    w = example()
    w["entities"]["count"] = 300
    w["load"]["concurrency"] = 4
    w["subscriptions"][0]["count"] = 20
    wf = tmp_path / "w.json"
    wf.write_text(json.dumps(w))
    bdir = tmp_path / "bin"
    bdir.mkdir()
    os.symlink(binary_path(), bdir / "coraine")       # tune.env is written beside the broker
    env = dict(os.environ, TUNE_REPEATS="1", TUNE_DURATION="1", TUNE_WARMUP="0", TUNE_DRAIN="10",
               CORAINE_RECEIVER=os.path.join(os.path.dirname(binary_path()), "tools", "receiver"))
    if is_sanitized(binary_path()):
        env["TUNE_ALLOCATORS"] = "glibc"                # a sanitizer's runtime must come first
    out = tmp_path / "tune-result.json"
    r = subprocess.run([os.path.join(TUNE, "tuneMeasure.sh"), str(wf), str(bdir / "coraine"), str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith("tune: best --dbLockPrefer ") and "requests/s" in summary, summary
    assert "against the out-of-the-box settings - %s" % out in summary
    res = json.loads(out.read_text())
    assert tuneResult.validate(res) == []
    assert res["best"]["allocator"] in ("glibc", "jemalloc", "tcmalloc_minimal")
    for row in res["table"]:
        assert row["failedRequests"] == 0
        assert row["notifiedPerRun"] == row["notificationsDuePerRun"] > 0   # every due one delivered
    default = [t for t in res["table"] if t["dbLockPrefer"] == "reads" and t["allocator"] == "glibc"]
    assert default and default[0]["vsDefault"] == "+0.0 %"
    env_file = (bdir / "tune.env").read_text()
    assert "TUNE_DBLOCKPREFER=%s" % res["best"]["dbLockPrefer"] in env_file
    assert "TUNE_ALLOCATOR=%s" % res["best"]["allocator"] in env_file


def test_a_combination_with_failures_never_wins():
    runs = [{"dbLockPrefer": "reads", "allocator": "glibc", "rps": 100.0, "p99us": 10, "failedRequests": 0,
             "notificationsDue": 5, "notificationsDelivered": 5, "notificationsLost": 0},
            {"dbLockPrefer": "writes", "allocator": "glibc", "rps": 900.0, "p99us": 10, "failedRequests": 3,
             "notificationsDue": 5, "notificationsDelivered": 5, "notificationsLost": 0},
            {"dbLockPrefer": "reads", "allocator": "jemalloc", "rps": 800.0, "p99us": 10, "failedRequests": 0,
             "notificationsDue": 5, "notificationsDelivered": 4, "notificationsLost": 1}]
    res = tuneResult.result(runs, [])
    assert res["best"]["dbLockPrefer"] == "reads" and res["best"]["allocator"] == "glibc"
    assert tuneResult.validate(res) == []


def tune_runs(rows):
    """tuneRun-like lines: rows of (lock, allocator, rps)."""
    return [{"dbLockPrefer": lock, "allocator": alloc, "rps": float(rps), "p99us": 10, "failedRequests": 0,
             "notificationsDue": 0, "notificationsDelivered": 0, "notificationsLost": 0} for lock, alloc, rps in rows]


def test_the_default_stays_unless_beaten_beyond_the_spread():
    """A faster median whose runs overlap the default's is noise on a shared machine: the default stays."""
    res = tuneResult.result(tune_runs([("reads", "glibc", 80000), ("reads", "glibc", 90000),
                                       ("reads", "jemalloc", 85000), ("reads", "jemalloc", 99000),
                                       ("writes", "glibc", 70000), ("writes", "glibc", 75000)]), [])
    assert (res["best"]["dbLockPrefer"], res["best"]["allocator"]) == ("reads", "glibc")
    assert res["best"]["vsDefault"] == "+0.0 %"
    assert res["table"][0]["allocator"] == "jemalloc" and res["table"][0]["beatsDefault"] is False
    assert tuneResult.validate(res) == []


def test_a_combination_beyond_the_spread_wins():
    res = tuneResult.result(tune_runs([("reads", "glibc", 80000), ("reads", "glibc", 84000),
                                       ("writes", "glibc", 86000), ("writes", "glibc", 88000),
                                       ("reads", "jemalloc", 83000), ("reads", "jemalloc", 99000)]), [])
    assert (res["best"]["dbLockPrefer"], res["best"]["allocator"]) == ("writes", "glibc")   # jemalloc overlaps
    assert res["best"]["vsDefault"] == "+6.1 %"
    assert tuneResult.validate(res) == []


def test_one_run_each_the_fastest_wins():
    """TUNE_REPEATS=1 (a smoke run): no spread to weigh against."""
    res = tuneResult.result(tune_runs([("reads", "glibc", 80000), ("writes", "tcmalloc_minimal", 80001)]), [])
    assert (res["best"]["dbLockPrefer"], res["best"]["allocator"]) == ("writes", "tcmalloc_minimal")


def test_the_summary_says_why_a_faster_median_was_not_chosen(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in tune_runs(
        [("reads", "glibc", 80000), ("reads", "glibc", 90000), ("writes", "glibc", 86000), ("writes", "glibc", 95000)])))
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, os.path.join(TUNE, "tuneResult.py"), str(runs), "--out", str(out)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert "not beyond the spread" in lines[-2] and lines[-2].startswith("tune: writes with glibc")
    assert lines[-1].startswith("tune: best --dbLockPrefer reads glibc malloc - 85000 requests/s, +0.0 %")


# ---- docker/coraine-start ------------------------------------------------------------

def start(tmp_path, tune_env, **env):
    f = tmp_path / "tune.env"
    f.write_text(tune_env)
    port = free_port()
    e = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CORAINE_DBLOCKPREFER")}
    e.update(CORAINE_TUNE_ENV=str(f), CORAINE_BIN=binary_path(), **env)
    p = subprocess.Popen([os.path.join(REPO, "docker", "coraine-start"), "--port", str(port), "--bind", "127.0.0.1"],
                         env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = "http://127.0.0.1:%d" % port
    deadline = time.time() + 15
    while time.time() < deadline:
        if p.poll() is not None:
            return p, None
        try:
            return p, requests.get(base + "/version", timeout=1).json()
        except requests.RequestException:
            time.sleep(0.05)
    raise RuntimeError("coraine-start: no answer")


def stop(p):
    p.terminate()
    p.wait(timeout=20)


def lib(name):
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


@pytest.mark.parametrize("alloc,so", [("jemalloc", "libjemalloc.so.2"), ("tcmalloc_minimal", "libtcmalloc_minimal.so.4")])
def test_coraine_start_applies_tune_env(tmp_path, alloc, so):
    if not lib(so) or is_sanitized(binary_path()):
        pytest.skip("%s not installed, or a sanitizer build" % so)
    p, v = start(tmp_path, "# chosen\nTUNE_DBLOCKPREFER=writes\nTUNE_ALLOCATOR=%s\n" % alloc)
    try:
        assert v, p.stderr.read() if p.poll() is not None else ""
        assert v["dbLockPrefer"] == "writes"
        assert v["allocator"] == alloc.split("_")[0]
        assert v["allocatorLibrary"].endswith(so)
    finally:
        stop(p)


def test_coraine_start_environment_wins(tmp_path):
    """docker run -e CORAINE_DBLOCKPREFER=reads -e LD_PRELOAD= : the environment over tune.env."""
    p, v = start(tmp_path, "TUNE_DBLOCKPREFER=writes\nTUNE_ALLOCATOR=jemalloc\n",
                 CORAINE_DBLOCKPREFER="reads", LD_PRELOAD="")
    try:
        assert v["dbLockPrefer"] == "reads"
        assert v["allocator"] in (("asan", "tsan") if is_sanitized(binary_path()) else ("glibc",))
    finally:
        stop(p)


def test_coraine_start_defaults_without_tune_env(tmp_path):
    p, v = start(tmp_path, "")
    try:
        assert v["dbLockPrefer"] == "reads"
        assert v["allocator"] in (("asan", "tsan") if is_sanitized(binary_path()) else ("glibc",))
    finally:
        stop(p)


def test_coraine_start_refuses_a_bad_tune_env(tmp_path):
    p, v = start(tmp_path, "TUNE_DBLOCKPREFER=sideways\n")
    assert v is None and p.wait(timeout=10) == 2
    assert "TUNE_DBLOCKPREFER=sideways" in p.stderr.read()


def test_version_reports_the_build_and_the_allocator(tmp_path):
    """GET /version: PGO on/off and its training, LTO, the allocator found at run time."""
    p, v = start(tmp_path, "")
    try:
        assert isinstance(v["pgo"], bool) and isinstance(v["lto"], bool)
        assert isinstance(v["pgoTraining"], str) and (v["pgoTraining"] != "") == v["pgo"]
        if is_sanitized(binary_path()):
            assert v["allocator"] in ("asan", "tsan")
        else:
            assert v["allocator"] == "glibc" and "libc" in v["allocatorLibrary"]
    finally:
        stop(p)


# ---- docker/Dockerfile (no Docker engine here: what can be checked without one) ------

def test_the_image_installs_every_library_the_broker_links():
    """Each NEEDED library of the broker comes from a package the runtime stage installs
    (or the base image's C library)."""
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        runtime = f.read().split("FROM debian:bookworm-slim\n", 1)[1]
    needed = [l.split()[1] for l in subprocess.run(["objdump", "-p", binary_path()], capture_output=True,
                                                   text=True).stdout.splitlines() if l.strip().startswith("NEEDED")]
    assert needed
    for so in needed:
        if so.startswith(("libc.so", "libm.so", "libpthread", "libdl", "libasan", "libubsan", "libtsan",
                          "libgcc_s", "libstdc++")):
            continue
        r = subprocess.run(["dpkg", "-S", "*/" + so], capture_output=True, text=True)
        pkgs = {l.split(":")[0] for l in r.stdout.splitlines()}
        assert pkgs and any(p in runtime.split() for p in pkgs), "%s (%s) not installed by the image" % (so, pkgs)

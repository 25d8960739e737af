#!/usr/bin/env python3
"""report.py - folds the harness's CSVs into doc/performance.md, doc/tuning.md and an HTML report.

  python3 test/perf/report.py [--in test/perf/results] [--perf-md doc/performance.md]
                              [--md doc/tuning.md] [--html build/perf/report.html]

Inputs (each CSV with its .meta.json: commit, machine, time, load, command),
in --in (test/perf/results/, committed, by default):
  perf_run.csv               perf_run.py --csv: every request shape beside its trivial-responder ceiling
  knee.csv                   knee.py: the saturation knee, one line per stage
  scale.csv, scale_samples.csv  scale.py: the scale run and its 1 Hz samples
  startup.csv, scaling.csv   startup.py, scaling.py
  offload.csv                offload_bench.py: the pool's hand-off price and what slow forwards hold back
  mongo_scaling.csv          mongo_scaling.py: one and two coraine processes on one database (FerretDB)
  mongo_cpu.csv, mongo_callgrind.csv, mongo_trips.csv  mongo_bench.py: mongoc beside corDB per request
  memory.csv                 perf_run.py --memory: bytes per entity
  patch_p99.csv              patch_p99.py: PATCH latency under full scans
  create_stall.csv           create_stall.py: the longest create of a stream into one growing tenant
  notify_*.csv               notify_bench.py (writes, fanout, knee), notify_write_cost.py
  disk_*.csv                 disk_bench.py (ingest, recovery, snapshot_p99, empty)
  history_*.csv              history_bench.py (ingest, reads, memory, snapshot), history_pg_ingest.py (pg*)
  cor_chain.csv, reg_fanout.csv, fwd_temporal.csv  the distributed operations' benchmarks
  https.csv                  https_bench.py
  pgo_bench.csv              pgo_bench.py: the builds (-O2, PGO, PGO+LTO) per shape, alternated
  pgo_callgrind.csv          callgrind_requests.py --csv: the same builds' instructions per request
  tune_<workload>.csv        tuneCompare.py: out of the box / tuned profile / tuned, per run
  tune_<workload>-result.json  make tune's own comparison (tune-result.json)
  headroom_<workload>.csv    ingest_headroom.py: the responder with a busy-wait per request beside the broker
  callgrind_<workload>.csv   ingest_callgrind.py --csv: make pgo's and make tune's builds, instructions per request
doc/performance.md: report.py rewrites only what stands between a marker
`<!-- report:NAME -->` and the next `<!-- /report -->` (NAME: a key of
PERF_SECTIONS below); the rest of the file is left as it is. doc/tuning.md
is written whole, from the pgo and tune inputs, and left alone when --in has
none of them. Nothing in the outputs is typed by hand: every figure comes
from those files, and each table names the commit, the machine and the
command that made it. A section whose input is missing says which command
makes it. The plots are SVG embedded in the HTML (matplotlib when it is
installed, else drawn here), with no external scripts.
"""
import argparse
import csv
import glob
import html
import io
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
from tuneResult import beyond_spread  # noqa: E402  make tune's rule, one place

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def meta(path):
    try:
        with open(path + ".meta.json") as f:
            return json.load(f)
    except OSError:
        return {}


def provenance(m):
    if not m:
        return "_(no .meta.json beside the CSV: commit and machine unknown)_"
    runs = ""
    if m.get("runs") and m.get("durationSeconds"):
        runs = ", %s runs of %s s each" % (m["runs"], m["durationSeconds"])
    load = m.get("loadAverages") or m.get("loadAverageAtEnd")
    if isinstance(load, list):
        load = " / ".join("%.2f" % x for x in load) + " (1, 5, 15 min)"
    return "Commit `%s`, %s, %s, load average %s at the end (the machine is shared: the figures measure it " \
           "too)%s. `%s`" % (m.get("commit"), m.get("machine"), m.get("at"), load, runs, m.get("command"))


def spread(xs):
    med = statistics.median(xs)
    return "±%.1f %%" % ((max(xs) - min(xs)) / 2 / med * 100) if med else "n/a"


def compare_runs(xs, base):
    """How runs xs compare with runs base beyond the measured spread (tuneResult.beyond_spread, make
    tune's own rule): 'faster', 'slower', or 'within' when the ranges overlap."""
    return "faster" if beyond_spread(xs, base) else "slower" if beyond_spread(base, xs) else "within"


# ---- plots ------------------------------------------------------------------------------

def mpl_svg(title, draw):
    """An SVG figure drawn by draw(ax) with matplotlib, or None when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    draw(ax)
    ax.set_title(title)
    ax.legend(fontsize=8)
    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    s = buf.getvalue()
    return s[s.index("<svg"):]


def svg_bars(title, labels, series):
    """series: [(name, [value per label])] -> an SVG grouped bar chart (matplotlib if present)."""
    def draw(ax):
        width = 0.8 / max(1, len(series))
        for k, (name, vals) in enumerate(series):
            ax.bar([i + k * width for i in range(len(labels))], vals, width, label=name)
        ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))], labels)
        ax.set_ylabel("requests/s")
    svg = mpl_svg(title, draw)
    if svg:
        return svg
    W, H, top, bottom, left = 700, 300, 30, 50, 60
    vmax = max([v for _, vals in series for v in vals] + [1])
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    group = (W - left - 10) / max(1, len(labels))
    bw = group * 0.8 / max(1, len(series))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, H), '<text x="%d" y="18" font-size="13">%s</text>' % (left, html.escape(title))]
    for t in range(5):
        y = top + (H - top - bottom) * (1 - t / 4)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, W - 10, y, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (left - 4, y + 4, vmax * t / 4))
    for i, lab in enumerate(labels):
        x0 = left + i * group + group * 0.1
        for k, (name, vals) in enumerate(series):
            h = (H - top - bottom) * vals[i] / vmax
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.0f</title></rect>'
                       % (x0 + k * bw, H - bottom - h, bw * 0.95, h, colors[k % len(colors)], html.escape(name),
                          html.escape(lab), vals[i]))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x0 + group * 0.4, H - bottom + 14,
                                                                             html.escape(lab)))
    for k, (name, _) in enumerate(series):
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                   % (left + k * 150, H - 18, colors[k % len(colors)], left + k * 150 + 14, H - 9, html.escape(name)))
    out.append("</svg>")
    return "\n".join(out)


# ---- sections -----------------------------------------------------------------------------

def pgo_section(indir, md, plots):
    path = os.path.join(indir, "pgo_bench.csv")
    md.append("## make pgo against plain -O2\n")
    if not os.path.exists(path):
        md.append("Not measured yet: `make pgo && make pgo-nolto && make pgo-bench`.\n")
        return
    rows = read_csv(path)
    m = meta(path)
    md.append(provenance(m) + "\n")
    builds = list(dict.fromkeys(r["build"] for r in rows))
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    for b in builds:
        v = m.get("builds", {}).get(b) or {}
        for key, info in m.get("builds", {}).items():
            if key == b:
                v = info
        md.append("- %s: cflags `%s`, pgo %s%s, lto %s" % (b, v.get("cflags", "?"), v.get("pgo", "?"),
                                                          " (%s)" % v["pgoTraining"] if v.get("pgoTraining") else "",
                                                          v.get("lto", "?")))
    md.append("")
    md.append("| shape | " + " | ".join("%s requests/s (spread; runs)" % b for b in builds) + " | " +
              " | ".join("%s / %s" % (b, builds[0]) for b in builds[1:]) + " | non-2xx |")
    md.append("|---|" + "---:|" * (2 * len(builds)))
    med = {}
    for s in shapes:
        cells, ratios = [], []
        for b in builds:
            xs = [float(r["rps"]) for r in rows if r["build"] == b and r["shape"] == s]
            med[(b, s)] = statistics.median(xs)
            cells.append("%.0f (%s; %s)" % (med[(b, s)], spread(xs), ", ".join("%.0f" % x for x in xs)))
        ratios = ["%.3f" % (med[(b, s)] / med[(builds[0], s)]) for b in builds[1:]]
        bad = sum(int(r["non2xx"]) for r in rows if r["shape"] == s)
        md.append("| %s | %s | %s | %d |" % (s, " | ".join(cells), " | ".join(ratios), bad))
    md.append("")
    cg = os.path.join(indir, "pgo_callgrind.csv")
    if os.path.exists(cg):
        crows = read_csv(cg)
        cb = list(dict.fromkeys(r["build"] for r in crows))
        cs = list(dict.fromkeys(r["shape"] for r in crows))
        ins = {(r["build"], r["shape"]): float(r["instructionsPerRequest"]) for r in crows}
        md.append("Instructions per request (callgrind, every thread of the broker; the other load does not change "
                  "them, unlike requests/s). " + provenance(meta(cg)) + "\n")
        md.append("| shape | " + " | ".join(cb) + " | " + " | ".join("%s / %s" % (b, cb[0]) for b in cb[1:]) + " |")
        md.append("|---|" + "---:|" * (2 * len(cb) - 1))
        for s_ in cs:
            md.append("| %s | %s | %s |" % (s_, " | ".join("%.0f" % ins[(b, s_)] for b in cb),
                                             " | ".join("%.3f" % (ins[(b, s_)] / ins[(cb[0], s_)]) for b in cb[1:])))
        md.append("")
    plots.append(("make pgo against plain -O2", provenance(m),
                  svg_bars("requests/s per shape", shapes, [(b, [med[(b, s)] for s in shapes]) for b in builds])))


def compare_section(indir, md, plots):
    files = sorted(glob.glob(os.path.join(indir, "tune_*.csv")))
    md.append("## What make tune is worth, per workload\n")
    md.append("wrk runs on the same cores as the broker, so what it spends per request is taken from the rate: "
              "the generated script (tuneGen.py) formats each kind of request once and sends copies with the "
              "entity's number or the create's counter put in, the same bytes as wrk.format. Tables measured "
              "before c295fd7 used a script that formatted every request afresh (more of wrk's CPU "
              "per request, the same bytes on the wire); the commit each table names tells which.\n")
    if not files:
        md.append("Not measured yet: `make tune-compare WORKLOAD=test/perf/tune/workload.example.json` and the same "
                  "with workload.ingest.json (each: make pgo, make tune, then three ways x three runs).\n")
        return
    for path in files:
        rows = read_csv(path)
        m = meta(path)
        name = os.path.basename(path)[5:-4]
        md.append("### %s\n" % name)
        md.append(provenance(m) + "\n")
        if m.get("best"):
            md.append("make tune chose `%s` with %s.\n" % (m["best"]["brokerOptions"] or "(no store lock)",
                                                          m["best"]["allocator"]))
        md.append("| way | median requests/s | spread | runs | median p99 (µs) | failed requests | "
                  "notifications delivered / due |")
        md.append("|---|---:|---:|---|---:|---:|---:|")
        ways = list(dict.fromkeys(r["way"] for r in rows))
        med = {}
        for wy in ways:
            rs = [r for r in rows if r["way"] == wy]
            xs = [float(r["rps"]) for r in rs]
            p99 = [float(r["p99us"]) for r in rs if r["p99us"] not in ("", "None")]
            med[wy] = statistics.median(xs)
            md.append("| %s | %.0f | %s | %s | %s | %d | %d / %d |" % (
                wy, med[wy], spread(xs), ", ".join("%.0f" % x for x in xs),
                "%.0f" % statistics.median(p99) if p99 else "-", sum(int(r["failedRequests"]) for r in rs),
                sum(int(r["notificationsDelivered"]) for r in rs), sum(int(r["notificationsDue"]) for r in rs)))
        md.append("")
        if "out-of-the-box" in med and "tuned" in med:
            base = [float(r["rps"]) for r in rows if r["way"] == "out-of-the-box"]
            tuned = [float(r["rps"]) for r in rows if r["way"] == "tuned"]
            diff = med["tuned"] / med["out-of-the-box"] - 1
            verdict = {"within": "the runs of the two ways overlap: no difference beyond the measured spread",
                       "faster": "every tuned run faster than every out-of-the-box run",
                       "slower": "SLOWER: every tuned run slower than every out-of-the-box run"}[
                compare_runs(tuned, base)]
            md.append("Tuned against out of the box: %+.1f %% (%s).\n" % (diff * 100, verdict))
        cg = os.path.join(indir, "callgrind_%s.csv" % name)
        if os.path.exists(cg):          # ingest_callgrind.py --csv: the profiles told apart without the noise
            crows = read_csv(cg)
            builds = list(dict.fromkeys(r["build"] for r in crows))
            cshapes = list(dict.fromkeys(r["shape"] for r in crows))
            ins = {(r["build"], r["shape"]): int(r["instructionsPerRequest"]) for r in crows}
            md.append("Instructions per request of the workload's requests, by build (callgrind, every thread of "
                      "the broker: counts the machine's other load does not change, so a difference between two "
                      "profiles shows here where the rates above cannot resolve it; build/pgo-general is make "
                      "pgo's, the out-of-the-box build; build/pgo is make tune's). " + provenance(meta(cg)) + "\n")
            md.append("| build | " + " | ".join(cshapes) + " |")
            md.append("|---|" + "---:|" * len(cshapes))
            for b in builds:
                md.append("| %s | " % b + " | ".join(
                    "%d%s" % (ins[(b, sh)], " (%+.1f %%)" % ((ins[(b, sh)] / ins[(builds[0], sh)] - 1) * 100)
                               if b != builds[0] else "") for sh in cshapes) + " |")
            md.append("")
        plots.append(("%s: three ways" % name, provenance(m),
                      svg_bars(name, ways, [("median requests/s", [med[w] for w in ways])])))
        res = os.path.join(indir, "tune_%s-result.json" % name)
        if os.path.exists(res):
            with open(res) as f:
                tr = json.load(f)
            mm = tr.get("measured", {})
            md.append("make tune's own comparison (tune-result.json; commit `%s`, %s, %s, %s runs of %s s each):\n" %
                      (mm.get("commit"), mm.get("machine"), mm.get("at"), mm.get("repeats"), mm.get("durationSeconds")))
            md.append("| --dbLockPrefer | allocator | requests/s | spread | runs | p99 (µs) | failed | "
                      "notified per run | vs default |")
            md.append("|---|---|---:|---:|---|---:|---:|---:|---:|")
            for t in tr["table"]:
                md.append("| %s | %s | %d | %s | %s | %s | %d | %d | %s |" % (
                    t["dbLockPrefer"] or "-", t["allocator"], t["rps"], t.get("spread", ""),
                    ", ".join(str(x) for x in t["runs"]), t["p99us"], t["failedRequests"], t["notifiedPerRun"],
                    t["vsDefault"]))
            if all(len(t["runs"]) < 2 for t in tr["table"]):
                md.append("\nOne run per combination (TUNE_REPEATS=1): no spread to weigh the differences "
                          "against; a smoke-length measurement, not a verdict.")
            if tr.get("allocatorsLeftOut"):
                md.append("\nLeft out (not installed): %s." % ", ".join(tr["allocatorsLeftOut"]))
            md.append("")


# The targets of issue 18 on a 2-core machine, checked against the CSVs above.
TARGETS = [
    # (workload, what, minimum median requests/s of the way, the way, notifications must all arrive)
    ("workload.example", "out of the box at least 9,000 requests/s, every due notification delivered",
     9000, "out-of-the-box", True),
    ("workload.ingest", "out of the box at least 100,000 requests/s", 100000, "out-of-the-box", False),
]


def targets_section(indir, md):
    md.append("## The targets\n")
    md.append("| workload | target | measured | met |")
    md.append("|---|---|---|---|")
    for name, what, floor, way, all_notified in TARGETS:
        path = os.path.join(indir, "tune_%s.csv" % name)
        if not os.path.exists(path):
            md.append("| %s | %s | not measured | - |" % (name, what))
            continue
        rs = [r for r in read_csv(path) if r["way"] == way]
        med = statistics.median(float(r["rps"]) for r in rs)
        due = sum(int(r["notificationsDue"]) for r in rs)
        got = sum(int(r["notificationsDelivered"]) for r in rs)
        failed = sum(int(r["failedRequests"]) for r in rs)
        ok = med >= floor and failed == 0 and (not all_notified or got == due)
        md.append("| %s | %s | %.0f requests/s (median of %d), %d failed, notifications %d / %d | %s |" % (
            name, what, med, len(rs), failed, got, due, "yes" if ok else "**no**"))
    for name in sorted(os.path.basename(f)[5:-4] for f in glob.glob(os.path.join(indir, "tune_*.csv"))):
        rows = read_csv(os.path.join(indir, "tune_%s.csv" % name))
        base = [float(r["rps"]) for r in rows if r["way"] == "out-of-the-box"]
        tuned = [float(r["rps"]) for r in rows if r["way"] == "tuned"]
        if not base or not tuned:
            continue
        mb, mt = statistics.median(base), statistics.median(tuned)
        md.append("| %s | make tune's choice never slower than out of the box beyond the measured spread (slower "
                  "beyond it: every tuned run slower than every out-of-the-box run) | tuned %.0f (%s) against %.0f "
                  "(%s) requests/s, %+.1f %%; runs %.0f - %.0f against %.0f - %.0f | %s |" % (
                      name, mt, spread(tuned), mb, spread(base), (mt / mb - 1) * 100, min(tuned), max(tuned),
                      min(base), max(base), "**no**" if compare_runs(tuned, base) == "slower" else "yes"))
        cpath = os.path.join(indir, "ceiling_%s.csv" % name)
        if any(r["way"] == "ceiling" for r in rows):    # the three ways' own run measured the ceiling too
            cpath = os.path.join(indir, "tune_%s.csv" % name)
        if os.path.exists(cpath):       # else tuneCompare.py --ways ceiling,out-of-the-box --csv ceiling_<name>.csv
            crows = read_csv(cpath)
            cm = meta(cpath)
            cx = [float(r["rps"]) for r in crows if r["way"] == "ceiling"]
            bx = [float(r["rps"]) for r in crows if r["way"] == "out-of-the-box"]
            if cx and bx:
                md.append("| %s | (the machine's ceiling for the mix: the trivial libmicrohttpd responder under the "
                          "same wrk script, alternated with out of the box, %d runs of %s s, load average %s at the "
                          "end, `%s`) | ceiling %.0f requests/s (%s), out of the box %.0f (%s): %.2f of the ceiling "
                          "| - |" % (name, len(cx), cm.get("durationSeconds"), cm.get("loadAverageAtEnd"),
                                     cm.get("command", "tuneCompare.py"), statistics.median(cx), spread(cx),
                                     statistics.median(bx), spread(bx),
                                     statistics.median(bx) / statistics.median(cx)))
        res = os.path.join(indir, "tune_%s-result.json" % name)
        if os.path.exists(res):
            with open(res) as f:
                el = json.load(f).get("measured", {}).get("makeTuneSeconds")
            if el is not None:
                md.append("| %s | `make tune` end to end in under 20 minutes | %.1f min | %s |" % (
                    name, el / 60, "yes" if el < 1200 else "**no**"))
    md.append("")


def headroom_section(indir, md, plots):
    """headroom_<workload>.csv (ingest_headroom.py): the trivial responder with a busy-wait per request
    beside the broker, the same wrk script; what a target rate leaves of the broker's own work."""
    files = sorted(glob.glob(os.path.join(indir, "headroom_*.csv")))
    if not files:
        return
    md.append("## What the broker's own work per request costs the rate\n")
    md.append("The trivial libmicrohttpd responder answers the workload's wrk script after busy-waiting a fixed time "
              "per request in user space (test/perf/trivial_responder.c's spin_ns), alternated run by run with the "
              "broker out of the box (an empty store each run, as above): the curve of the rate against the work "
              "per request on this machine, and where the broker's own CPU per request places it. The system CPU "
              "per request rises as the server slows, for the responder as for the broker: a fast server finds "
              "the load generator awake, a slow one wakes it for each answer. The page faults per request are the "
              "server's minor faults (/proc/PID/stat) over the measured run: each is a fresh page the kernel zeroes "
              "and maps, in the kernel's share of the CPU; the broker's store grows with every create, the "
              "responder's memory does not.\n")
    for path in files:
        name = os.path.basename(path)[9:-4]
        rows = read_csv(path)
        md.append("### %s\n" % name)
        md.append(provenance(meta(path)) + "\n")
        md.append("| way | median requests/s | spread | runs | user CPU µs per request | system CPU µs per request "
                  "| page faults per request | failed |")
        md.append("|---|---:|---:|---|---:|---:|---:|---:|")
        ways = list(dict.fromkeys((r["way"], r["spinNs"]) for r in rows))
        med = {}
        for way, spin in ways:
            rs = [r for r in rows if r["way"] == way and r["spinNs"] == spin]
            xs = [float(r["rps"]) for r in rs]
            med[(way, spin)] = (statistics.median(xs),
                                statistics.median(float(r["userUsPerRequest"]) for r in rs))
            faults = [float(r["faultsPerRequest"]) for r in rs if r.get("faultsPerRequest")]
            md.append("| %s | %.0f | %s | %s | %.2f | %.2f | %s | %d |" % (
                way if way != "responder" else "responder + %s ns of work" % spin, med[(way, spin)][0], spread(xs),
                ", ".join(r["rps"] for r in rs), med[(way, spin)][1],
                statistics.median(float(r["sysUsPerRequest"]) for r in rs),
                "%.3f" % statistics.median(faults) if faults else "-",
                sum(int(r["failedRequests"]) for r in rs)))
        floor = next((t[2] for t in TARGETS if t[0] == name), None)
        plain = med.get(("responder", "0"))
        broker = next((v for (w, _), v in med.items() if w == "coraine"), None)
        if floor and plain and broker:
            fits = [int(sp) for (w, sp), v in med.items() if w == "responder" and v[0] >= floor]
            md.append("\nThe broker's user CPU per request less the plain responder's: %.2f µs (its own work). "
                      "The target of %d requests/s is reached by the responder with %s." % (
                          broker[1] - plain[1], floor,
                          "up to %d ns of added work (the largest spin measured that reaches it)" % max(fits)
                          if fits else "none of the spins measured, not even without added work"))
        md.append("")
        spins = sorted(int(sp) for (w, sp) in med if w == "responder")
        if broker and plain and spins:
            plots.append(("%s: requests/s against the work per request" % name, provenance(meta(path)), svg_lines(
                "%s: requests/s against the server's own work" % name, "user CPU µs per request (less the plain "
                "responder's)", "requests/s",
                [("responder + spin", [(med[("responder", str(sp))][1] - plain[1], med[("responder", str(sp))][0])
                                       for sp in spins]),
                 ("coraine", [(broker[1] - plain[1], broker[0])])])))


def svg_lines(title, xlabel, ylabel, series, logy=False):
    """series: [(name, [(x, y)])] -> an SVG line chart (matplotlib if present)."""
    def draw(ax):
        for name, pts in series:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    svg = mpl_svg(title, draw)
    if svg:
        return svg
    import math
    W, H, top, bottom, left, right = 700, 300, 30, 60, 70, 10
    pts = [p for _, ps in series for p in ps]
    if not pts:
        return ""
    xmin, xmax = min(p[0] for p in pts), max(p[0] for p in pts)
    ys = [max(p[1], 1e-9) for p in pts]
    tf = (lambda v: math.log10(max(v, 1e-9))) if logy else (lambda v: v)
    ymin, ymax = (tf(min(ys)), tf(max(ys))) if logy else (0, max(ys))
    if ymax == ymin:
        ymax = ymin + 1
    if xmax == xmin:
        xmax = xmin + 1

    def X(v):
        return left + (W - left - right) * (v - xmin) / (xmax - xmin)

    def Y(v):
        return H - bottom - (H - top - bottom) * (tf(v) - ymin) / (ymax - ymin)

    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, H), '<text x="%d" y="18" font-size="13">%s</text>' % (left, html.escape(title))]
    for t in range(5):
        fy = ymin + (ymax - ymin) * t / 4
        v = 10 ** fy if logy else fy
        y = Y(v)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, W - right, y, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.4g</text>' % (left - 4, y + 4, v))
        xv = xmin + (xmax - xmin) * t / 4
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.4g</text>' % (X(xv), H - bottom + 14, xv))
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % ((W + left) / 2, H - bottom + 28,
                                                                         html.escape(xlabel)))
    out.append('<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>'
               % ((H - bottom + top) / 2, (H - bottom + top) / 2, html.escape(ylabel)))
    for k, (name, ps) in enumerate(series):
        c = colors[k % len(colors)]
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                   % (c, " ".join("%.1f,%.1f" % (X(x), Y(y)) for x, y in ps)))
        for x, y in ps:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s: %.4g, %.4g</title></circle>'
                       % (X(x), Y(y), c, html.escape(name), x, y))
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                   % (left + k * 140, H - 18, c, left + k * 140 + 14, H - 9, html.escape(name)))
    out.append("</svg>")
    return "\n".join(out)


def missing(md, cmd):
    md.append("Not measured yet: `%s` (then `python3 test/perf/report.py`).\n" % cmd)


def perf_run_section(indir, md, plots):
    path = os.path.join(indir, "perf_run.csv")
    md.append("### Every request shape against the trivial responder (perf_run.py)\n")
    if not os.path.exists(path):
        return missing(md, "python3 test/perf/perf_run.py --csv test/perf/results/perf_run.csv")
    rows, m = read_csv(path), meta(path)
    md.append(provenance(m) + " wrk -t%s -c%s on loopback, %s entities; the shapes alternated in every run.\n"
              % (m.get("wrkThreads", "?"), m.get("connections", "?"), m.get("entities", "?")))
    md.append("| shape | median requests/s | spread | runs | p50 (µs) | p99 (µs) | non-2xx | broker CPU s "
              "| CPU µs per request | peak RSS (MiB) | ceiling (same run) | of the ceiling |")
    md.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        md.append("| %s | %s | ±%s %% | %s | %s | %s | %s | %s | %s | %.1f | %s | %s |" % (
            r["shape"], r["rpsMedian"], r["rpsSpreadPct"], r["rpsRuns"].replace(";", ", "), r["p50us"], r["p99us"],
            r["non2xx"], r["cpuSeconds"], r["cpuUsPerRequest"], int(r["peakRssKiB"]) / 1024,
            "%s, %s requests/s" % (r["ceilingShape"], r["ceilingRps"]) if r["ceilingShape"] else "-",
            r["ofCeiling"] or "-"))
    md.append("")
    notes = [r for r in rows if r.get("notificationsDue")]
    for r in notes:
        md.append("- %s: %s changes due a notification, %s notifications received by tools/receiver carrying %s "
                  "entities (the broker groups a subscription's due changes), %s dropped." % (
                      r["shape"], r["notificationsDue"], r["notificationsReceived"], r["entitiesReceived"],
                      r["notificationsDropped"]))
    md.append("- The CPU seconds are the serving processes' utime+stime over the shape's runs (the three brokers "
              "for fwd_*, the responder for trivial*); peak RSS is VmHWM after the shape's last run (the process's "
              "peak so far, loading included; the sum of the three for fwd_*).\n")
    shapes = [r["shape"] for r in rows if r["ceilingShape"]]
    plots.append(("Requests/s per shape against its ceiling", provenance(m), svg_bars(
        "requests/s per shape (the trivial responder of the same run beside it)", shapes,
        [("coraine", [float(r["rpsMedian"]) for r in rows if r["ceilingShape"]]),
         ("ceiling", [float(r["ceilingRps"]) for r in rows if r["ceilingShape"]])])))


def knee_section(indir, md, plots):
    path = os.path.join(indir, "knee.csv")
    md.append("### The saturation knee (knee.py, open model)\n")
    if not os.path.exists(path):
        return missing(md, "python3 test/perf/knee.py --csv test/perf/results/knee.csv")
    rows, m = read_csv(path), meta(path)
    md.append(provenance(m) + " Bound: p99 at most %s ms, at most %s %% failed, 95 %% of the offered rate "
              "achieved, a stage past it run once more; %s s per stage, %s connections; latency from each request's "
              "due time (openload.c).\n"
              % (m.get("p99BoundMs"), 100 * float(m.get("maxErrors", 0)), m.get("durationSeconds"),
                 m.get("connections")))
    knees = m.get("knees", {})
    md.append("| shape | knee: offered requests/s within the bound (median) | runs |")
    md.append("|---|---:|---|")
    for sh, v in knees.items():
        md.append("| %s | %.0f | %s |" % (sh, statistics.median(v), ", ".join("%.0f" % x for x in v)))
    md.append("")
    md.append("| shape | run | offered/s | achieved/s | p50 (µs) | p99 (µs) | p99.9 (µs) | failed | "
              "CPU µs per request | within |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        md.append("| %s | %s | %s | %s | %s | %s | %s | %d | %s | %s%s |" % (
            r["shape"], r["run"], r["offeredRate"], r["achievedRate"], r["p50us"], r["p99us"], r["p999us"],
            int(r["non2xx"]) + int(r["errors"]), r["cpuUsPerRequest"], "yes" if r["withinBound"] == "1" else "no",
            " (the repeat)" if r.get("retry") == "1" else ""))
    md.append("")
    series = []
    for sh in dict.fromkeys(r["shape"] for r in rows):
        series.append((sh, [(float(r["offeredRate"]), float(r["p99us"]) / 1000) for r in rows
                            if r["shape"] == sh and r["run"] == "1"]))
    plots.append(("The knee curve", provenance(m), svg_lines("p99 against the offered rate (run 1)",
                                                             "offered requests/s", "p99 (ms)", series, logy=True)))


def scale_section(indir, md, plots):
    path = os.path.join(indir, "scale.csv")
    md.append("### The scale run (scale.py)\n")
    if not os.path.exists(path):
        return missing(md, "SCALE=0.01 python3 test/perf/scale.py --out test/perf/results")
    rows, m = read_csv(path), meta(path)
    r0 = rows[0]
    md.append(provenance(m) + "\n")
    md.append("SCALE=%s: %s entities over %s tenants, %s subscriptions, %s registrations at %s sources, loaded "
              "through %s; %s s in all.\n" % (m.get("scale"), r0["entities"], r0["tenants"], r0["subscriptions"],
                                             r0["registrations"], m.get("sources"), m.get("loadedThrough"),
                                             m.get("totalSeconds")))
    md.append("| phase | seconds | per second | broker RSS after (MiB) |")
    md.append("|---|---:|---:|---:|")
    for r in rows:
        if r["phase"].startswith("load"):
            md.append("| %s | %s | %s | %.1f |" % (r["phase"], r["seconds"], r["rate"], int(r["brokerRssKiB"]) / 1024))
    md.append("")
    md.append("Subscription firing (every write due one notification):\n")
    md.append("| offered writes/s | achieved | write p99 (µs) | due | delivered | dropped | drain after the writes (s) |")
    md.append("|---:|---:|---:|---:|---:|---:|---:|")
    fire = [r for r in rows if r["phase"] == "fire"]
    for r in fire:
        md.append("| %.0f | %s | %s | %s | %s | %s | %s |" % (float(r["offeredRate"]), r["achievedRate"], r["writeP99us"],
                                                          r["due"], r["delivered"], r["dropped"], r["drainSeconds"]))
    md.append("")
    for r in rows:
        if r["phase"] == "federated":
            md.append("Federated queries: %s queries, each for one registered type, made %s calls to the sources: "
                      "**%s per query** (the registration index narrows to the one source; a broadcast would make "
                      "%s). Query p50 %s µs, p99 %s µs.\n" % (r["queries"], r["sourceCalls"],
                                                              r["sourceCallsPerQuery"], m.get("sources"),
                                                              r["queryP50us"], r["queryP99us"]))
    sp = os.path.join(indir, "scale_samples.csv")
    if os.path.exists(sp):
        samples = read_csv(sp)
        md.append("The 1 Hz samples (scale_samples.csv), per phase and process: the largest RSS and the mean "
                  "share of a core.\n")
        md.append("| phase | process | samples | max RSS (MiB) | mean CPU share |")
        md.append("|---|---|---:|---:|---:|")
        nsrc = len({x["process"] for x in samples if x["process"].startswith("source")})
        grouped = {}                      # (phase, process or "sources") -> {t: [rss, cpu share]}, sources summed
        for x in samples:
            pr = "%d sources (sum)" % nsrc if x["process"].startswith("source") else x["process"]
            cell = grouped.setdefault((x["phase"], pr), {}).setdefault(x["t"], [0, 0.0])
            cell[0] += int(x["rssKiB"])
            cell[1] += float(x["cpuShare"])
        for (ph, pr), by_t in grouped.items():
            v = list(by_t.values())
            md.append("| %s | %s | %d | %.1f | %.2f |" % (ph, pr, len(v), max(c[0] for c in v) / 1024,
                                                          statistics.mean(c[1] for c in v)))
        md.append("")
        series = [(pr, [(float(x["t"]), int(x["rssKiB"]) / 1024) for x in samples if x["process"] == pr])
                  for pr in dict.fromkeys(x["process"] for x in samples) if pr in ("broker", "receiver", "source0")]
        plots.append(("The scale run: RSS over time", provenance(meta(sp)),
                      svg_lines("RSS of each process, sampled at 1 Hz", "seconds", "RSS (MiB)", series)))
    if fire:
        plots.append(("The scale run: delivery", provenance(m), svg_bars(
            "notifications due and delivered per write rate", [r["offeredRate"] for r in fire],
            [("due", [float(r["due"]) for r in fire]), ("delivered", [float(r["delivered"]) for r in fire]),
             ("dropped", [float(r["dropped"]) for r in fire])])))


def table_section(name, title, cmd, about=None):
    """NAME.csv as a table, its rows as they are (scaling.csv with its efficiency), under the title,
    the provenance and about (what the table measures, written here once: no figure in it)."""
    def section(indir, md, plots):
        path = os.path.join(indir, name + ".csv")
        md.append("### %s\n" % title)
        if about:
            md.append(about + "\n")
        if not os.path.exists(path):
            return missing(md, cmd)
        rows = read_csv(path)
        md.append(provenance(meta(path)) + "\n")
        if name == "scaling":
            starved = False
            md.append("| shape | cores (broker) | wrk | median requests/s | runs | efficiency rps(k) / (k x rps(1)) "
                      "| median CPU µs per request | non-2xx |")
            md.append("|---|---:|---|---:|---|---:|---:|---:|")
            for sh in dict.fromkeys(r["shape"] for r in rows):
                one = statistics.median(float(r["rps"]) for r in rows if r["shape"] == sh and r["cores"] == "1")
                for k in sorted({r["cores"] for r in rows}, key=int):
                    rs = [r for r in rows if r["shape"] == sh and r["cores"] == k]
                    med = statistics.median(float(r["rps"]) for r in rs)
                    md.append("| %s | %s | %s | %.0f | %s | %.2f | %.1f | %d |" % (
                        sh, k, "on the other cores" if rs[0]["load"] == "apart" else "sharing every core", med,
                        ", ".join(r["rps"] for r in rs), med / (int(k) * one) if one else 0,
                        statistics.median(float(r["cpuUsPerRequest"]) for r in rs),
                        sum(int(r["non2xx"]) for r in rs)))
                    if one and med / (int(k) * one) > 1.2:
                        starved = True
            if starved:
                md.append("\nAn efficiency above 1 means the broker pinned to fewer cores was starved by other "
                          "processes on those cores (see the load average): those steps measure the machine, not "
                          "the scaling; the CPU µs per request still compare.")
        else:
            md.append("| " + " | ".join(rows[0]) + " |")
            md.append("|" + "---|" * len(rows[0]))
            for r in rows:
                md.append("| " + " | ".join(r.values()) + " |")
        md.append("")
        if name == "scaling":
            shapes = list(dict.fromkeys(r["shape"] for r in rows))
            cores = sorted({r["cores"] for r in rows}, key=int)
            plots.append((title, provenance(meta(path)), svg_bars(
                "requests/s by cores", shapes,
                [("%s core(s)" % c, [statistics.median(float(r["rps"]) for r in rows
                                                       if r["shape"] == s and r["cores"] == c) for s in shapes])
                 for c in cores])))
    return section


PERF_SECTIONS = {
    "perf_run": perf_run_section,
    "knee": knee_section,
    "scale": scale_section,
    "startup": table_section("startup", "Startup: time to the first answer and RSS (startup.py)",
                             "python3 test/perf/startup.py --csv test/perf/results/startup.csv"),
    "scaling": table_section("scaling", "Core scaling with taskset (scaling.py)",
                             "python3 test/perf/scaling.py --csv test/perf/results/scaling.csv"),
    "offload": table_section("offload", "Requests of tenants with registrations, off the HTTP worker "
                             "(offload_bench.py)", "python3 test/perf/offload_bench.py"),
    "mongo_scaling": table_section("mongo_scaling", "One coraine process on one MongoDB-wire database, and "
                                   "two (mongo_scaling.py)", "python3 test/perf/mongo_scaling.py"),
    "memory": table_section(
        "memory", "Memory per entity (perf_run.py --memory)",
        "python3 test/perf/perf_run.py --memory 100000,1000000",
        "Resident bytes per entity of perf_run's Vehicle (4 attributes, one with observedAt and a sub-attribute, a "
        "GeoProperty) on a fresh broker in RAM: (RSS after loading N - RSS before) / (N - 1), batch creates of "
        "1,000."),
    "patch_p99": table_section(
        "patch_p99", "PATCH latency alone and under full-scan queries (patch_p99.py)",
        "python3 test/perf/patch_p99.py",
        "Issue 10: no scan may hold the tenant lock for its whole length. 100,000 Vehicles; PATCHes "
        "(`wrk -t1 -c4`) alone, then while clients keep asking a q over an unindexed attribute with no type (every "
        "entity read), alternated; p99 against the same build's p99 alone."),
    "create_stall": table_section(
        "create_stall", "The longest create of a stream into one growing tenant (create_stall.py)",
        "python3 test/perf/create_stall.py --bin build/release/coraine --bin BASE/build/release/coraine "
        "--duration 20",
        "wrk -c50 of POST /ngsi-ld/v1/entities into a fresh broker in RAM for the run's length, every new entity "
        "with a GeoProperty: stacked at one point (make tune's ingest creates) or spread over 2 x 2 degrees. An "
        "index growth step that is O(entities) under the tenant's write lock holds every request of the tenant "
        "for its length: the maximum latency is the longest such stall. The builds alternate, one row per run."),
    "notify_writes": table_section(
        "notify_writes", "Writes with and without a subscription (notify_bench.py)",
        "python3 test/perf/notify_bench.py --phases writes",
        "Issue 12: PATCHes of perf_run's Vehicles with no subscription and with one that every PATCH makes due, "
        "delivered over HTTP to tools/receiver on loopback; due, received and dropped counted by the broker and "
        "the receiver."),
    "notify_fanout": table_section(
        "notify_fanout", "Notification fan-out on one entity (notify_bench.py)",
        "python3 test/perf/notify_bench.py --phases fanout",
        "PATCHes of one entity watched by N subscriptions (each its own receiver endpoint lane): notifications due "
        "and delivered, and delivered per second from the first PATCH to the last arrival."),
    "notify_knee": table_section(
        "notify_knee", "The notification knee, open model (notify_bench.py)",
        "python3 test/perf/notify_bench.py --phases knee",
        "PATCHes at a fixed offered rate (an open model), each due to every one of the subscriptions, all to one "
        "receiver endpoint: what is delivered at each rate within the run, and what the queues dropped. The "
        "shared endpoint's queue absorbs a burst, so the knee depends on the run's length."),
    "notify_write_cost": table_section(
        "notify_write_cost", "What matching costs the writer (notify_write_cost.py)",
        "python3 test/perf/notify_write_cost.py",
        "PATCH requests/s (1,000 Vehicles) with no subscription, with one whose q never matches (every write is "
        "matched, none is due) and with one whose every notification is dropped at once (--notifierQueueSize 1 "
        "and an endpoint that is not answered)."),
    "disk_ingest": table_section(
        "disk_ingest", "corDB on disk: ingest in RAM and with each --dbSync mode (disk_bench.py ingest)",
        "python3 test/perf/disk_bench.py ingest --duration 4 --runs 3",
        "Issue 13: creates and PATCHes in RAM and on --dbDir with --dbSync always, interval and none, side by side, "
        "alternated; the fsyncs per second, the writes each fsync carries (group commit) and the broker's CPU and "
        "context switches per write."),
    "disk_recovery": table_section(
        "disk_recovery", "corDB on disk: recovery from the log and from a snapshot (disk_bench.py recovery)",
        "python3 test/perf/disk_bench.py recovery --entities 1000000 --runs 3",
        "A store of N entities restarted from its log alone, and from a snapshot and the log after it: the time to "
        "the first answer, the recovery the broker logs, and the disk bytes per entity."),
    "disk_snapshot_p99": table_section(
        "disk_snapshot_p99", "corDB on disk: PATCH p99 while snapshots are written (disk_bench.py snapshot-p99)",
        "python3 test/perf/disk_bench.py snapshot-p99 --entities 1000000 --duration 8 --runs 3",
        "PATCHes of a 1,000,000-entity store with no snapshot under way and with snapshots written back to back."),
    "disk_empty": table_section(
        "disk_empty", "corDB on disk: the start of an empty store (disk_bench.py empty)",
        "python3 test/perf/disk_bench.py empty",
        "A broker started on an empty --dbDir and in RAM: recovery, time to the first answer and CPU."),
    "history_ingest": table_section(
        "history_ingest", "PATCH ingest with observedAt: --history corDB beside none (history_bench.py)",
        "python3 test/perf/history_bench.py",
        "Issue 14: PATCHes of a speed with observedAt, with the history off and on, in RAM and on --dbDir with "
        "--dbSync always and interval, alternated; the history's instances and bytes per instance after."),
    "history_reads": table_section(
        "history_reads", "Temporal reads on corDB: lastN and an hourly average (history_bench.py)",
        "python3 test/perf/history_bench.py", None),
    "history_memory": table_section(
        "history_memory", "Memory per history instance, and the temporal API's load rate (history_bench.py)",
        "python3 test/perf/history_bench.py", None),
    "history_snapshot": table_section(
        "history_snapshot", "What a history snapshot costs the writers (history_bench.py)",
        "python3 test/perf/history_bench.py",
        "PATCHes while the history (and the store) write snapshots, against the same writes with none under way: "
        "p99 and the longest stall, and how long the snapshot held the lock."),
    "history_pg": table_section(
        "history_pg", "PATCH ingest with --history timescale (history_pg_ingest.py)",
        "python3 test/perf/history_pg_ingest.py",
        "A PostgreSQL of its own (test/functional/pg.py: initdb in a temporary directory, plain tables: TimescaleDB "
        "is not packaged here); PATCHes with the history off and in PostgreSQL, alternated; the broker's and "
        "PostgreSQL's CPU per PATCH and how far the history trails the writes when they stop."),
    "history_pg_load": table_section(
        "history_pg_load", "Instances through the temporal API into PostgreSQL (history_pg_ingest.py)",
        "python3 test/perf/history_pg_ingest.py", None),
    "history_pg_reads": table_section(
        "history_pg_reads", "Temporal reads on PostgreSQL (history_pg_ingest.py)",
        "python3 test/perf/history_pg_ingest.py", None),
    "cor_chain": table_section(
        "cor_chain", "A query through a three-broker chain, HTTP and cor:// side by side (cor_chain.py)",
        "python3 test/perf/cor_chain.py",
        "Issue 15: the entities live in broker C, B holds a registration for C and A one for B; wrk queries A, "
        "which forwards to B, which forwards to C, over HTTP and over cor:// alternated; the CPU of each broker "
        "per query."),
    "reg_fanout": table_section(
        "reg_fanout", "A hub with 10,000 registrations of which a query matches 30 (reg_fanout.py)",
        "python3 test/perf/reg_fanout.py",
        "The forwards of one query run in parallel, so its wall time is about one source's latency, not the sum; "
        "finding the matching registrations is an index look-up, not a scan of all of them."),
    "fwd_temporal": table_section(
        "fwd_temporal", "The hub's CPU per forwarded temporal query, beside the entity query (fwd_temporal.py)",
        "python3 test/perf/fwd_temporal.py", None),
    "https": table_section(
        "https", "HTTPS against plain HTTP: a retrieve, kept alive and with a handshake per request "
        "(https_bench.py)", "python3 test/perf/https_bench.py",
        "Issue 17: a P-256 ECDSA certificate made by openssl; wrk -t1 -c4 on loopback, the broker started plain "
        "and with --https in turn; the broker's user+system CPU per request from /proc."),
    "mongo_cpu": table_section(
        "mongo_cpu", "The broker's CPU per request, --database mongoc beside corDB (mongo_bench.py)",
        "python3 test/perf/mongo_bench.py -n 1000 -r 3000 --r-slow 20 --repeat 3",
        "Issue 16's target: the broker's CPU per request with mongoc at most 2x its CPU per request with corDB "
        "(retrieve, query `type=Vehicle&q=speed>50&limit=20`, create, PATCH), FerretDB on SQLite the database "
        "(doc/mongodb.md). One keep-alive connection, the stores alternated; broker: the sum over its threads of "
        "/proc/PID/task/*/schedstat; net: the same less its idle CPU over the same wall time (timers, the "
        "--syncInterval poll); FerretDB: its utime+stime per request; in the kernel: the broker's stime share "
        "(clock ticks). Ratios: the median of the runs' ratios, each run's listed."),
    "mongo_callgrind": table_section(
        "mongo_callgrind", "The broker's instructions per request, --database mongoc beside corDB "
        "(mongo_bench.py --callgrind)", "python3 test/perf/mongo_bench.py --callgrind 200",
        "Each broker under valgrind --tool=callgrind, the instrumentation on only while a shape's requests run, "
        "all threads, `--syncInterval 600000` on both (the time-driven poll is not charged to requests): user-space "
        "instructions, the figure that does not drift on a shared machine. What a command costs inside libmongoc "
        "and why a PATCH on FerretDB is two commands: doc/mongodb.md."),
    "mongo_trips": table_section(
        "mongo_trips", "Database round trips per request on --database mongoc (mongo_bench.py --trips)",
        "python3 test/perf/mongo_bench.py --trips 200 --shapes retrieve,query,create,patch,batch_upsert,"
        "batch_update,batch_merge,batch_create,batch_cd",
        "The broker under strace: the commands it writes to the database's port per request (and per item of a "
        "batch of 20)."),
}


def rewrite_markers(path, indir, plots):
    """Each `<!-- report:NAME -->` ... `<!-- /report -->` span of path rewritten by PERF_SECTIONS[NAME]."""
    import re
    with open(path) as f:
        text = f.read()
    done = []

    def fill(mo):
        name = mo.group(1)
        if name not in PERF_SECTIONS:
            raise SystemExit("report.py: %s: unknown section <!-- report:%s --> (known: %s)"
                             % (path, name, ", ".join(PERF_SECTIONS)))
        md = []
        PERF_SECTIONS[name](indir, md, plots)
        done.append(name)
        return "<!-- report:%s -->\n%s\n<!-- /report -->" % (name, "\n".join(md).rstrip())

    text = re.sub(r"<!-- report:([a-z0-9_]+) -->.*?<!-- /report -->", fill, text, flags=re.S)
    with open(path, "w") as f:
        f.write(text)
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="indir", default=os.path.join(ROOT, "test", "perf", "results"))
    ap.add_argument("--md", default=os.path.join(ROOT, "doc", "tuning.md"))
    ap.add_argument("--perf-md", default=os.path.join(ROOT, "doc", "performance.md"))
    ap.add_argument("--html", default=os.path.join(ROOT, "build", "perf", "report.html"))
    a = ap.parse_args()
    plots = []
    done = rewrite_markers(a.perf_md, a.indir, plots)
    tuning_inputs = glob.glob(os.path.join(a.indir, "pgo_*.csv")) + glob.glob(os.path.join(a.indir, "tune_*.csv"))
    if tuning_inputs:
        md = ["# Tuning: make pgo and make tune, measured",
              "",
              "Generated by `python3 test/perf/report.py` from the CSVs in %s: do not edit by hand. "
              "What make pgo and make tune do is ../shared/TUNING.md's (the product specification); how to run "
              "them: `make pgo`, `make tune WORKLOAD=file.json`, `make tune-smoke` (a few seconds per step), "
              "`make tune-compare WORKLOAD=file.json` (the three ways below), `make pgo-bench`."
              % os.path.relpath(a.indir, ROOT),
              ""]
        pgo_section(a.indir, md, plots)
        compare_section(a.indir, md, plots)
        targets_section(a.indir, md)
        headroom_section(a.indir, md, plots)
        os.makedirs(os.path.dirname(a.md), exist_ok=True)
        with open(a.md, "w") as f:
            f.write("\n".join(md).rstrip() + "\n")
    os.makedirs(os.path.dirname(a.html), exist_ok=True)
    with open(a.html, "w") as f:
        f.write("<!doctype html><meta charset=utf-8><title>coraine performance report</title>"
                "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}</style>"
                "<h1>coraine performance report</h1><p>Generated by test/perf/report.py from %s.</p>"
                % html.escape(os.path.relpath(a.indir, ROOT)))
        for title, prov, svg in plots:
            f.write("<h2>%s</h2><p>%s</p>%s" % (html.escape(title), html.escape(prov), svg))
    print("report: %s (sections %s), %s%s" % (a.perf_md, ", ".join(done) or "none: no markers", a.html,
                                             ", " + a.md if tuning_inputs else
                                             " (%s left as it is: no pgo_*/tune_* CSV in %s)" % (a.md, a.indir)))


if __name__ == "__main__":
    main()

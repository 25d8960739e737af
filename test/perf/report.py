#!/usr/bin/env python3
"""report.py - folds the harness's CSVs into doc/tuning.md and an HTML report with plots.

  python3 test/perf/report.py [--in build/perf] [--md doc/tuning.md] [--html build/perf/report.html]

Inputs (each CSV with its .meta.json: commit, machine, time, load, command):
  pgo_bench.csv              pgo_bench.py: the builds (-O2, PGO, PGO+LTO) per shape, alternated
  pgo_callgrind.csv          callgrind_requests.py --csv: the same builds' instructions per request
  tune_<workload>.csv        tuneCompare.py: out of the box / tuned profile / tuned, per run
  tune_<workload>-result.json  make tune's own comparison (tune-result.json)
  startup.csv, scaling.csv   startup.py, scaling.py (their tables go to build/perf/harness.md)
Nothing in the outputs is typed by hand: every figure comes from those files,
and each table names the commit, the machine and the command that made it. A
section whose input is missing says which command makes it. The plots are SVG
embedded in the HTML (matplotlib when it is installed, else drawn here), with no
external scripts.
"""
import argparse
import csv
import glob
import html
import io
import json
import os
import statistics

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
    return "Commit `%s`, %s, %s, load average %s at the end (the machine is shared: the figures measure it " \
           "too)%s. `%s`" % (m.get("commit"), m.get("machine"), m.get("at"), m.get("loadAverageAtEnd"), runs,
                              m.get("command"))


def spread(xs):
    med = statistics.median(xs)
    return "±%.1f %%" % ((max(xs) - min(xs)) / 2 / med * 100) if med else "n/a"


# ---- plots ------------------------------------------------------------------------------

def svg_bars(title, labels, series):
    """series: [(name, [value per label])] -> an SVG grouped bar chart (matplotlib if present)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 3.2))
        width = 0.8 / max(1, len(series))
        for k, (name, vals) in enumerate(series):
            ax.bar([i + k * width for i in range(len(labels))], vals, width, label=name)
        ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))], labels)
        ax.set_ylabel("requests/s")
        ax.set_title(title)
        ax.legend(fontsize=8)
        buf = io.StringIO()
        fig.tight_layout()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        s = buf.getvalue()
        return s[s.index("<svg"):]
    except ImportError:
        pass
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
            diff = med["tuned"] / med["out-of-the-box"] - 1
            half = (max(base) - min(base)) / 2 / med["out-of-the-box"]
            verdict = ("within the spread of the out-of-the-box runs: no measurable difference on this machine"
                       if abs(diff) <= half else ("faster" if diff > 0 else "SLOWER") + " than out of the box beyond"
                       " the spread")
            md.append("Tuned against out of the box: %+.1f %% (%s).\n" % (diff * 100, verdict))
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


def harness_section(indir, md, plots):
    """startup.csv and scaling.csv (startup.py, scaling.py): their tables, for doc/performance.md."""
    for name, title, cmd in (("startup", "Startup: time to the first answer and RSS", "python3 test/perf/startup.py"),
                             ("scaling", "Core scaling (taskset)", "python3 test/perf/scaling.py")):
        path = os.path.join(indir, name + ".csv")
        md.append("## %s\n" % title)
        if not os.path.exists(path):
            md.append("Not measured yet: `%s`.\n" % cmd)
            continue
        rows = read_csv(path)
        md.append(provenance(meta(path)) + "\n")
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="indir", default=os.path.join(ROOT, "build", "perf"))
    ap.add_argument("--md", default=os.path.join(ROOT, "doc", "tuning.md"))
    ap.add_argument("--html", default=os.path.join(ROOT, "build", "perf", "report.html"))
    ap.add_argument("--harness-md", default=os.path.join(ROOT, "build", "perf", "harness.md"),
                    help="the startup and scaling tables (for doc/performance.md)")
    a = ap.parse_args()
    md = ["# Tuning: make pgo and make tune, measured",
          "",
          "Generated by `python3 test/perf/report.py` from the CSVs in build/perf/: do not edit by hand. "
          "What make pgo and make tune do is ../shared/TUNING.md's (the product specification); how to run "
          "them: `make pgo`, `make tune WORKLOAD=file.json`, `make tune-smoke` (a few seconds per step), "
          "`make tune-compare WORKLOAD=file.json` (the three ways below), `make pgo-bench`.",
          ""]
    plots = []
    pgo_section(a.indir, md, plots)
    compare_section(a.indir, md, plots)
    os.makedirs(os.path.dirname(a.md), exist_ok=True)
    with open(a.md, "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    hm = ["# The harness's other measurements (generated by test/perf/report.py)", ""]
    harness_section(a.indir, hm, plots)
    os.makedirs(os.path.dirname(a.harness_md), exist_ok=True)
    with open(a.harness_md, "w") as f:
        f.write("\n".join(hm).rstrip() + "\n")
    os.makedirs(os.path.dirname(a.html), exist_ok=True)
    with open(a.html, "w") as f:
        f.write("<!doctype html><meta charset=utf-8><title>coraine performance report</title>"
                "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}</style>"
                "<h1>coraine performance report</h1><p>Generated by test/perf/report.py from build/perf/.</p>")
        for title, prov, svg in plots:
            f.write("<h2>%s</h2><p>%s</p>%s" % (html.escape(title), html.escape(prov), svg))
    print("report: %s, %s, %s" % (a.md, a.html, a.harness_md))


if __name__ == "__main__":
    main()

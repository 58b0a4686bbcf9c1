#!/usr/bin/python3
"""`kvevict demo`'s table, JSON and HTML report against the run and against
an independent recomputation.

Runs the demo on a small geometry (fresh per-head keys, then persistent
keys with shared heads), then checks:
- the HTML parses (every non-void element closed in order), every <svg> is
  well-formed XML, and the figures expected are there;
- the JSON embedded in the report equals the --json file;
- every figure's numbers (data-* attributes) equal the JSON's, and its
  pixels follow from those numbers and the axes it declares;
- the table on stdout says what the JSON says;
- the legends lie beside the plot area, clear of every line; lines with
  the same points are marked (data-same-as), drawn so each shows, and noted
  in the legend as identical, and no other line is; the keep maps have an
  x-axis title and a colour scale of their cells' shading;
- the keep maps' counts, the survival curve, the running digest and the
  keep-set digest equal those of a cache state driven through the Python
  binding with the same schedule and ids (kve_state_read_slots), and the
  keep-set digest equals the spec's digest (tests/oracle) of those tables;
- the uniform expectation is a distribution of the kept count: summed over
  positions it equals the slots the heads hold.
Usage: test_demo_report.py KVEVICT (PYTHONPATH / KVEVICT_LIBRARY as for the
binding's tests).
"""
import html.parser
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np

import kvevict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import kve_oracle  # noqa: E402

GEOMETRY = dict(layers=3, heads=4, prompt=100, budget=200, window=16, interval=16, steps=700)
SVG = "{http://www.w3.org/2000/svg}"
VOID = {"meta", "br", "img", "hr", "input", "link"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def close(a, b, rel=1e-5, abs_=1e-9):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


class Balance(html.parser.HTMLParser):
    """Every non-void element closed, in order."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("</%s> closes <%s>" % (tag, self.stack[-1] if self.stack else "-"))
        else:
            self.stack.pop()


def nums(text):
    return [float(v) for v in text.split()] if text.strip() else []


def run_demo(kvevict_bin, tmp, extra):
    args = [kvevict_bin, "demo", "--no-progress", "--threads", "1", "--report",
            os.path.join(tmp, "r.html"), "--json", os.path.join(tmp, "r.json")]
    for k, v in GEOMETRY.items():
        args += ["--" + k, str(v)]
    p = subprocess.run(args + extra, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, "demo %s: exit %d: %s" % (extra, p.returncode, p.stderr))
    return p.stdout, open(os.path.join(tmp, "r.html")).read(), json.load(
        open(os.path.join(tmp, "r.json")))


def table_rows(stdout):
    rows = {}
    for line in stdout.splitlines():
        f = line.split()
        if len(f) == 10 and f[0] in ("full", "triattention", "knorm", "random", "random-p0"):
            rows[f[0]] = f
    return rows


def check_axes(svg, x, y, px, py, what):
    """Pixels (px, py) follow from data (x, y) through the axes the figure declares."""
    x0, x1, y0, y1 = (float(svg.get(k)) for k in ("data-x0", "data-x1", "data-y0", "data-y1"))
    left, top, right, bottom = nums(svg.get("data-plot"))
    ok = all(abs(left + (u - x0) / (x1 - x0) * (right - left) - p) < 0.02 and
             abs(bottom - (v - y0) / (y1 - y0) * (bottom - top) - q) < 0.02
             for u, v, p, q in zip(x, y, px, py))
    check(ok, "%s: pixels do not follow the data and the axes" % what)


def check_figures(doc, svgs, stdout):
    arms = {a["name"]: a for a in doc["arms"]}
    rows = table_rows(stdout)
    check(set(rows) == set(arms), "table arms %s != JSON arms %s" % (sorted(rows), sorted(arms)))
    for name, a in arms.items():
        f = rows.get(name)
        if not f:
            continue
        check([int(f[1]), int(f[2]), int(f[3]), int(f[4])] ==
              [a["prompt_len"], a["rounds"], a["held_final"], a["held_peak"]],
              "%s: table %s != JSON" % (name, f[1:5]))
        check(close(float(f[5].rstrip("%")), 100 * a["memory_ratio"], 0, 0.051),
              "%s: table's share of the full cache %s != %g" % (name, f[5], a["memory_ratio"]))
        check((f[6] == "-") == (a["rounds"] == 0) and
              (f[6] == "-" or close(float(f[6]), a["ms_per_round"], 0, 0.0006)),
              "%s: table ms/round %s != %g" % (name, f[6], a["ms_per_round"]))
        check(close(float(f[7]), a["choose_ms"], 0, 0.0006), "%s: choose ms" % name)
        check(int(f[8], 16) == int(a["digest"], 16) and f[9] == "verified",
              "%s: table digest %s / %s" % (name, f[8], f[9]))
    mem = svgs["fig-memory"]
    lines = {p.get("data-series"): p for p in mem.iter(SVG + "polyline")}
    for name, a in arms.items():
        p = lines.get(name)
        if check(p is not None, "fig-memory: no line for %s" % name):
            x, y = nums(p.get("data-x")), nums(p.get("data-y"))
            check(x == a["held_x"] and y == a["held"], "fig-memory %s: data != JSON" % name)
            check(y[-1] == a["held_final"] and max(y) <= a["held_peak"],
                  "fig-memory %s: last %g, held %d" % (name, y[-1], a["held_final"]))
            pts = [tuple(map(float, q.split(","))) for q in p.get("points").split()]
            check_axes(mem, x, y, [q[0] for q in pts], [q[1] for q in pts], "fig-memory " + name)
    bars = {r.get("data-series"): r for r in svgs["fig-cost"].iter(SVG + "rect")
            if r.get("data-series")}
    scale = {}
    for name, a in arms.items():
        r = bars.get(name)
        if check(r is not None, "fig-cost: no bar for %s" % name):
            v = float(r.get("data-value"))
            check(close(v, a["ms_per_round"]), "fig-cost %s: %g != %g" % (name, v, a["ms_per_round"]))
            check(close(v, sum(a["round_ms"]) / max(1, a["rounds"]), 1e-4),
                  "fig-cost %s: not the mean of the rounds' times" % name)
            scale[float(r.get("height"))] = v
    top = max(scale)
    check(all(abs(h - top * v / scale[top]) < 0.002 for h, v in scale.items()),
          "fig-cost: bar heights not to scale: %s" % scale)
    surv = {p.get("data-series"): p for p in svgs["fig-survival"].iter(SVG + "polyline")}
    for name, a in arms.items():
        check(nums(surv[name].get("data-y")) == a["survival"], "fig-survival %s != JSON" % name)
        if "expected" in a:
            check(nums(surv[name + " expected"].get("data-y")) == a["expected"],
                  "fig-survival %s expected != JSON" % name)


def segment_hits_box(p, q, box):
    """Whether the segment p-q meets the box (x0, y0, x1, y1) (Liang-Barsky)."""
    (px, py), (dx, dy) = p, (q[0] - p[0], q[1] - p[1])
    lo, hi = 0.0, 1.0
    for d, a, b in ((dx, box[0] - px, box[2] - px), (dy, box[1] - py, box[3] - py)):
        if d == 0:
            if a > 0 or b < 0:
                return False
            continue
        t0, t1 = sorted((a / d, b / d))
        lo, hi = max(lo, t0), min(hi, t1)
        if lo > hi:
            return False
    return True


def check_legend(svg, what):
    """The legend's box lies inside the figure, right of the plot area, and
    no line of the figure meets it; identical lines are marked and noted."""
    legends = [g for g in svg.iter(SVG + "g") if g.get("class") == "legend"]
    if not check(len(legends) == 1, "%s: %d legends" % (what, len(legends))):
        return
    leg = legends[0]
    box = nums(leg.get("data-box"))
    rect = leg.find(SVG + "rect")
    check(rect is not None and [float(rect.get(k)) for k in ("x", "y")] == box[:2] and
          close(float(rect.get("x")) + float(rect.get("width")), box[2], 0, 0.11) and
          close(float(rect.get("y")) + float(rect.get("height")), box[3], 0, 0.11),
          "%s: the legend's rect is not its data-box %s" % (what, box))
    left, top, right, bottom = nums(svg.get("data-plot"))
    check(right < box[0] < box[2] <= float(svg.get("width")) and
          0 <= box[1] < box[3] <= float(svg.get("height")),
          "%s: legend box %s not beside the plot area %s in the figure" %
          (what, box, (left, top, right, bottom)))
    for t in leg.iter(SVG + "text"):
        check(box[0] < float(t.get("x")) < box[2] and box[1] < float(t.get("y")) <= box[3],
              "%s: legend text %r outside its box" % (what, t.text))
    lines = list(svg.iter(SVG + "polyline"))
    for p in lines:
        pts = [tuple(map(float, q.split(","))) for q in p.get("points").split()]
        check(not any(segment_hits_box(a, b, box) for a, b in zip(pts, pts[1:] or pts)),
              "%s: line %s crosses the legend %s" % (what, p.get("data-series"), box))
    # identical lines: each later one names the group's first, solid ones in
    # dashes at offsets of their own, and the legend notes the group
    notes = " ".join(t.text for t in leg.iter(SVG + "text") if t.get("class") == "note")
    groups = {}
    for p in lines:
        groups.setdefault((p.get("data-x"), p.get("data-y")), []).append(p)
    want_notes = []
    for group in groups.values():
        names = [p.get("data-series") for p in group]
        check([p.get("data-same-as") for p in group] == [None] + names[:1] * (len(group) - 1),
              "%s: lines %s: data-same-as %s" % (what, names,
                                                 [p.get("data-same-as") for p in group]))
        solid = [p for p in group[1:] if p.get("stroke-dasharray") != "5,3"]
        offsets = [p.get("stroke-dashoffset") for p in solid]
        check(all(p.get("stroke-dasharray") for p in solid) and None not in offsets and
              len(set(offsets)) == len(offsets),
              "%s: identical lines %s not drawn in turns (offsets %s)" % (what, names, offsets))
        if len(group) > 1:
            want_notes.append(" = ".join(names) + " (identical)")
    check(notes == " ".join(want_notes),
          "%s: legend notes %r, expected %r" % (what, notes, " ".join(want_notes)))
    return len(want_notes)


def check_keepmap_axes(svg, what):
    """An x-axis title below the cells, and a colour scale from transparent to
    opaque in the cells' colour, with ticks from 0 to 1."""
    cells = [r for r in svg.iter(SVG + "rect") if r.get("data-bin") is not None]
    bottom = max(float(r.get("y")) + float(r.get("height")) for r in cells)
    titles = [t for t in svg.iter(SVG + "text") if t.get("class") == "x-title"]
    check(len(titles) == 1 and "position" in titles[0].text and
          float(titles[0].get("y")) > bottom,
          "%s: no x-axis title below the cells" % what)
    scales = [g for g in svg.iter(SVG + "g") if g.get("class") == "colour-scale"]
    if not check(len(scales) == 1, "%s: %d colour scales" % (what, len(scales))):
        return
    sc = scales[0]
    colors = {r.get("fill") for r in cells}
    grad = sc.find(".//" + SVG + "linearGradient")
    stops = [(float(s.get("offset")), float(s.get("stop-opacity")), s.get("stop-color"))
             for s in grad.iter(SVG + "stop")] if grad is not None else []
    check(len(colors) == 1 and sc.get("data-color") in colors and
          stops == [(0, 0, sc.get("data-color")), (1, 1, sc.get("data-color"))],
          "%s: colour scale %s does not span the cells' shading %s" % (what, stops, colors))
    bars = [r for r in sc.iter(SVG + "rect")]
    check(grad is not None and len(bars) == 1 and
          bars[0].get("fill") == "url(#%s)" % grad.get("id"),
          "%s: the colour scale's bar does not use its gradient" % what)
    ticks = [float(t.text) for t in sc.iter(SVG + "text") if t.get("class") == "tick"]
    check(ticks == [0, 0.25, 0.5, 0.75, 1] and
          (float(sc.get("data-min")), float(sc.get("data-max"))) == (0, 1),
          "%s: colour scale ticks %s" % (what, ticks))


def bins(n):
    return [n * b // 64 for b in range(65)]


def replay_state(doc, arm, snaps):
    """The arm's cache state through the Python binding: the same schedule,
    ids and appends (prompt in chunks of 64, then one token per step), no
    cache. Returns per snapshot the tables and the row info, and the end's."""
    ctx = kvevict.Context("cpu", threads=1)
    cap = kvevict.capacity(arm["prompt_len"], budget=arm["budget"], window=doc["window"],
                           interval=doc["interval"])
    st = kvevict.State(ctx, max_seqs=1, n_layers=doc["layers"], n_heads=doc["heads"],
                       budget=arm["budget"], window=doc["window"], interval=doc["interval"],
                       max_slots=cap, seed=doc["seed"], persistent=doc["persistent"],
                       shared_heads=doc["shared_heads"])
    st.admit(0, doc["seq_id"], arm["prompt_len"])
    want = sorted(set(s["tokens"] for s in snaps))
    out, pos, n_all = {}, 0, doc["prompt"] + doc["steps"]
    while pos < n_all:
        n = min(64, doc["prompt"] - pos) if pos < doc["prompt"] else 1
        st.append([0], [n])
        pos += n
        if pos in want:
            out[pos] = (st.slots(0), st.seq(0))
    return out, st.slots(0), st.seq(0), (st.digest(0), st.keepset_digest(0))


def check_keepmaps(doc, svgs, arm):
    name = arm["name"]
    svg = svgs.get("keepmap-" + name)
    if not check(svg is not None, "no keep map for %s" % name):
        return
    snaps = arm["snapshots"]
    states, final, info, (run_digest, keepset) = replay_state(doc, arm, snaps)
    n_all = doc["prompt"] + doc["steps"]
    edges = bins(n_all)
    th = 1 if doc["shared_heads"] else doc["heads"]
    for g in svg.iter(SVG + "g"):
        if g.get("data-table") is None:
            continue
        t = int(g.get("data-table"))
        for row in g.iter(SVG + "g"):
            if row.get("data-snap") is None:
                continue
            s = snaps[int(row.get("data-snap"))]
            tables, sinfo = states[s["tokens"]]
            check(int(row.get("data-tokens")) == s["tokens"] == sinfo.n_tokens and
                  int(row.get("data-round")) == s["round"] == sinfo.round,
                  "%s keep map: snapshot %s is not tokens %d round %d" %
                  (name, row.get("data-snap"), sinfo.n_tokens, sinfo.round))
            kept = tables[t // th, t % th, :sinfo.n_valid]
            counts = np.histogram(kept, bins=edges)[0]
            for cell in row.iter(SVG + "rect"):
                b = int(cell.get("data-bin"))
                end = min(edges[b + 1], s["tokens"])
                check(int(cell.get("data-kept")) == counts[b] and
                      int(cell.get("data-n")) == end - edges[b] and
                      close(float(cell.get("fill-opacity")), counts[b] / (end - edges[b]), 0, 6e-4),
                      "%s keep map: table %d snapshot %s bin %d: %s kept of %s, the state %d"
                      % (name, t, row.get("data-snap"), b, cell.get("data-kept"),
                         cell.get("data-n"), counts[b]))
    # survival over every head, from the end's tables
    heads = doc["layers"] * doc["heads"]
    weight = heads // (final.shape[0] * final.shape[1])
    counts = np.histogram(final[:, :, :info.n_valid], bins=edges)[0] * weight
    sizes = np.diff(edges)
    want = [c / (s * heads) for c, s in zip(counts, sizes)]
    check(all(close(a, b, 1e-5) for a, b in zip(arm["survival"], want)),
          "%s: survival != the state's tables" % name)
    check(run_digest == int(arm["run_digest"], 16), "%s: running digest %s != the state's %#x"
          % (name, arm["run_digest"], run_digest))
    per_head = [(doc["seq_id"], l, h,
                 final[l if final.shape[0] > 1 else 0, h if th > 1 else 0, :info.n_valid].tolist())
                for l in range(doc["layers"]) for h in range(doc["heads"])]
    check(kve_oracle.digest(per_head) == int(arm["digest"], 16) == keepset,
          "%s: keep-set digest %s != the spec's digest of the state's tables" % (name, arm["digest"]))
    if "expected" in arm:
        total = sum(e * s for e, s in zip(arm["expected"], sizes))
        check(close(total, arm["held_final"], 1e-4),
              "%s: the expectation sums to %g kept, the heads hold %d" % (name, total,
                                                                        arm["held_final"]))


def check_report(stdout, page, doc, what):
    bal = Balance()
    bal.feed(page)
    bal.close()
    check(not bal.errors and not bal.stack, "%s: HTML: %s, unclosed %s" % (what, bal.errors[:3],
                                                                            bal.stack))
    svgs = {}
    for text in re.findall(r"<svg\b.*?</svg>", page, re.S):
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            failures.append("%s: an SVG is not well-formed: %s" % (what, e))
            continue
        svgs[root.get("id")] = root
    names = [a["name"] for a in doc["arms"]]
    want = {"fig-memory", "fig-cost", "fig-survival"} | {"keepmap-" + n for n in names
                                                         if n != "full"}
    check(set(svgs) == want, "%s: figures %s, expected %s" % (what, sorted(svgs), sorted(want)))
    m = re.search(r'<script type="application/json" id="kvevict-run">\n(.*?)</script>', page, re.S)
    check(m and json.loads(m.group(1)) == doc, "%s: the report's JSON != the --json file" % what)
    if not want <= set(svgs):
        return
    check_figures(doc, svgs, stdout)
    noted = {fig: check_legend(svgs[fig], "%s %s" % (what, fig))
             for fig in ("fig-memory", "fig-survival")}
    # the evicting arms hold the same counts: one note in the memory figure
    evicting = [n for n in names if n != "full"]
    check(len(evicting) < 2 or noted["fig-memory"] == 1,
          "%s: fig-memory: %s hold the same, noted %s" % (what, evicting, noted["fig-memory"]))
    for n in evicting:
        check_keepmap_axes(svgs["keepmap-" + n], "%s keepmap-%s" % (what, n))
    for arm in doc["arms"]:
        if arm["name"] in ("random", "random-p0"):
            check_keepmaps(doc, svgs, arm)
    full = [a for a in doc["arms"] if a["name"] == "full"]
    check(full and full[0]["rounds"] == 0 and full[0]["held_final"] == full[0]["full_tokens"],
          "%s: the full arm evicted" % what)


def main():
    kvevict_bin = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for extra in ([], ["--persistent", "--shared-heads", "--map-heads", "2"]):
            n0 = len(failures)
            stdout, page, doc = run_demo(kvevict_bin, tmp, extra)
            if len(failures) == n0:
                check_report(stdout, page, doc, "demo %s" % " ".join(extra))
            print("%s demo %s: %d arms, %d figures checked" % (
                "ok  " if len(failures) == n0 else "FAIL", " ".join(extra), len(doc["arms"]),
                page.count("<svg")))
        # a path that cannot be written is an error, not a silent success
        p = subprocess.run([kvevict_bin, "demo", "--no-progress", "--steps", "10", "--layers", "1",
                            "--heads", "1", "--prompt", "8", "--budget", "16", "--window", "4",
                            "--interval", "4", "--map-heads", "1", "--report",
                            os.path.join(tmp, "no", "such.html")],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and "cannot write" in p.stderr,
              "unwritable --report: exit %d, %r" % (p.returncode, p.stderr))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

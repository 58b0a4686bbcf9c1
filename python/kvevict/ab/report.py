"""kvevict.ab's figures: the per-arm, per-bucket summary (summarize), the
command line's table (table) and the self-contained HTML report
(write_html: inline SVG, no script, nothing fetched)."""
import html
import math
from typing import Dict, List, Sequence

from . import stats

ALL = "all"
COLORS = ("#555555", "#1b7837", "#7fbf7b", "#762a83", "#c2a5cf", "#e08214", "#fdb863",
          "#2166ac", "#b2182b")


def _retry(rec: dict, max_new: int) -> bool:
    return (not rec["parsed"]) or (not rec["stopped"] and len(rec["ids"]) >= max_new)


def first_split(a: Sequence[str], b: Sequence[str]) -> int:
    """The index of the first token where a and b differ (len of the shorter
    when one is a prefix of the other)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def summarize(tasks: List[dict], res: Dict[str, List[dict]], ref: str = "full",
              examples: int = 5) -> dict:
    """Per arm and per bucket (and "all"): accuracy with its 95% Wilson
    interval, the paired difference against ref with the exact McNemar
    p-value, the retry rate, output length against ref's, tokens/s, p50 /
    p95 latency and peak KV bytes; per arm, up to `examples` failures
    (ref right, arm wrong) split at the first differing token."""
    buckets = []
    for t in tasks:
        if t["bucket"] not in buckets:
            buckets.append(t["bucket"])
    out = {"buckets": buckets, "arms": list(res), "reference_arm": ref if ref in res else None,
           "summary": {}, "failures": {}}
    for arm, recs in res.items():
        out["summary"][arm] = {}
        for b in buckets + [ALL]:
            idx = [i for i, t in enumerate(tasks) if b == ALL or t["bucket"] == b]
            k = sum(1 for i in idx if recs[i]["correct"])
            acc, lo, hi = stats.wilson(k, len(idx))
            lens = [len(recs[i]["ids"]) for i in idx]
            secs = [recs[i]["seconds"] for i in idx]
            s = dict(n=len(idx), correct=k, accuracy=acc, ci_low=lo, ci_high=hi,
                     retries=sum(1 for i in idx if _retry(recs[i], tasks[i]["max_new_tokens"])),
                     unparsed=sum(1 for i in idx if not recs[i]["parsed"]),
                     hit_limit=sum(1 for i in idx if not recs[i]["stopped"] and
                                   len(recs[i]["ids"]) >= tasks[i]["max_new_tokens"]),
                     new_tokens=sum(lens), mean_output_tokens=sum(lens) / len(idx) if idx else 0,
                     seconds=sum(secs),
                     tokens_per_s=sum(lens) / sum(secs) if sum(secs) else 0.0,
                     latency_ms_p50=1e3 * stats.percentile(secs, 50),
                     latency_ms_p95=1e3 * stats.percentile(secs, 95),
                     peak_kv_bytes=max([recs[i]["peak_kv_bytes"] for i in idx] or [0]),
                     mean_peak_kv_bytes=(sum(recs[i]["peak_kv_bytes"] for i in idx) / len(idx)
                                         if idx else 0))
            s["retry_rate"] = s["retries"] / len(idx) if idx else 0.0
            if ref in res:
                rr = res[ref]
                s.update({"vs_" + k2: v for k2, v in stats.paired(
                    [rr[i]["correct"] for i in idx], [recs[i]["correct"] for i in idx]).items()})
                d = [len(recs[i]["ids"]) - len(rr[i]["ids"]) for i in idx]
                rl = sum(len(rr[i]["ids"]) for i in idx)
                s.update(length_diff_mean=sum(d) / len(d) if d else 0.0,
                         length_ratio=sum(lens) / rl if rl else 0.0,
                         length_diff_p5=stats.percentile(d, 5),
                         length_diff_p50=stats.percentile(d, 50),
                         length_diff_p95=stats.percentile(d, 95),
                         length_same_share=sum(1 for x in d if x == 0) / len(d) if d else 0.0)
            out["summary"][arm][b] = s
        if ref in res and arm != ref:
            fails = []
            for i, t in enumerate(tasks):
                a, r = recs[i], res[ref][i]
                if r["correct"] and not a["correct"]:
                    at = first_split(r["tokens"], a["tokens"])
                    fails.append(dict(id=t["id"], bucket=t["bucket"], split_at=at,
                                      common=r["tokens"][:at], ref_rest=r["tokens"][at:],
                                      arm_rest=a["tokens"][at:], ref_output=r["text"],
                                      arm_output=a["text"], reference=t["reference"]))
            out["failures"][arm] = dict(count=len(fails), shown=fails[:examples])
    return out


def _pct(x: float) -> str:
    return "%.1f%%" % (100 * x)


def table(summary: dict) -> List[str]:
    """The command line's closing table: per arm and bucket the accuracy,
    its interval, the difference against the reference arm and McNemar's p;
    then per arm the costs."""
    S, arms, ref = summary["summary"], summary["arms"], summary["reference_arm"]
    lines = ["%-15s %-8s %4s %7s %17s %8s %9s %7s" % ("arm", "bucket", "n", "acc", "95% CI",
                                                     "vs " + (ref or "-"), "p McNemar", "retry")]
    for arm in arms:
        for b in summary["buckets"] + [ALL]:
            s = S[arm][b]
            diff = "%+.1f" % (100 * s["vs_diff"]) if ref else "-"
            p = ("%.2g" % s["vs_p_mcnemar"]) if ref and arm != ref else "-"
            lines.append("%-15s %-8s %4d %7s %8s-%-8s %8s %9s %7s" % (
                arm, b, s["n"], _pct(s["accuracy"]), _pct(s["ci_low"]), _pct(s["ci_high"]),
                diff if arm != ref else "-", p, _pct(s["retry_rate"])))
    lines.append("")
    lines.append("%-15s %8s %8s %8s %12s %12s %11s" % ("arm", "tok/s", "p50 ms", "p95 ms",
                                                     "peak KV KiB", "mean out tok",
                                                     "len vs " + (ref or "-")))
    for arm in arms:
        s = S[arm][ALL]
        lines.append("%-15s %8.1f %8.1f %8.1f %12.1f %12.2f %11s" % (
            arm, s["tokens_per_s"], s["latency_ms_p50"], s["latency_ms_p95"],
            s["peak_kv_bytes"] / 1024, s["mean_output_tokens"],
            "x%.2f" % s["length_ratio"] if ref else "-"))
    return lines


# ---- SVG ---------------------------------------------------------------------------------------
def _e(s) -> str:
    return html.escape(str(s))


def _svg(w: int, h: int, body: List[str], title: str) -> str:
    return ('<figure><figcaption>%s</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
            'width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" '
            'font-size="11">%s</svg></figure>' % (_e(title), w, h, w, h, "".join(body)))


def _acc_by_bucket(summary: dict, colors: Dict[str, str]) -> str:
    arms, groups = summary["arms"], summary["buckets"] + [ALL]
    bw, gap, left, top, H = 12, 18, 40, 20, 200
    W = left + len(groups) * (len(arms) * bw + gap) + 160
    body = ['<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>' % (left, top + H, W - 160,
                                                                     top + H)]
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + H * (1 - v)
        body.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>'
                    '<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>'
                    % (left - 4, y + 4, 100 * v, left, y, W - 160, y))
    x = left + gap / 2
    for g in groups:
        x0 = x
        for arm in arms:
            s = summary["summary"][arm][g]
            y, ylo, yhi = (top + H * (1 - s[k]) for k in ("accuracy", "ci_low", "ci_high"))
            body.append('<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s">'
                        '<title>%s %s: %s [%s, %s]</title></rect>'
                        % (x, y, bw - 2, top + H - y, colors[arm], _e(arm), _e(g),
                           _pct(s["accuracy"]), _pct(s["ci_low"]), _pct(s["ci_high"])))
            cx = x + (bw - 2) / 2
            body.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>'
                        % (cx, ylo, cx, yhi))
            x += bw
        body.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                    % ((x0 + x) / 2, top + H + 14, _e(g)))
        x += gap
    for i, arm in enumerate(arms):
        body.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">'
                    '%s</text>' % (W - 150, top + 14 * i, colors[arm], W - 136, top + 9 + 14 * i,
                                   _e(arm)))
    return _svg(W, top + H + 30, body, "Accuracy by bucket (bars; lines: 95% Wilson interval)")


def _acc_vs_memory(summary: dict, colors: Dict[str, str]) -> str:
    arms = summary["arms"]
    W, H, left, top = 520, 240, 50, 20
    pw, ph = W - left - 150, H - top - 40
    kib = [summary["summary"][a][ALL]["peak_kv_bytes"] / 1024 for a in arms]
    xmax = max(kib + [1e-9]) * 1.1
    body = ['<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
            % (left, top, pw, ph)]
    for v in (0, 0.5, 1.0):
        body.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>'
                    % (left - 4, top + ph * (1 - v) + 4, 100 * v))
    for v in (0, 0.5, 1.0):
        body.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>'
                    % (left + pw * v, top + ph + 14, xmax * v))
    body.append('<text x="%.1f" y="%d" text-anchor="middle">peak KV KiB held by a request'
                '</text>' % (left + pw / 2, top + ph + 30))
    for i, (arm, k) in enumerate(zip(arms, kib)):
        s = summary["summary"][arm][ALL]
        x = left + pw * k / xmax
        y, ylo, yhi = (top + ph * (1 - s[f]) for f in ("accuracy", "ci_low", "ci_high"))
        body.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>'
                    '<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s: %s at %.1f KiB'
                    '</title></circle>' % (x, ylo, x, yhi, colors[arm], x, y, colors[arm],
                                           _e(arm), _pct(s["accuracy"]), k))
        body.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">'
                    '%s</text>' % (W - 140, top + 14 * i, colors[arm], W - 126, top + 9 + 14 * i,
                                   _e(arm)))
    return _svg(W, H, body, "Accuracy (all buckets) against peak KV memory")


def _boxes(res: Dict[str, List[dict]], value, unit: str, title: str,
           colors: Dict[str, str]) -> str:
    """One row per arm: the p5-p95 whisker, the p25-p75 box, the median and
    every value as a dot."""
    arms = list(res)
    vals = {a: [value(r) for r in res[a]] for a in arms}
    top_v = max([max(v) for v in vals.values() if v] + [1e-9]) * 1.05
    left, W, row = 110, 560, 26
    pw = W - left - 20
    H = 30 + row * len(arms) + 20
    body = []
    for i, a in enumerate(arms):
        v = vals[a]
        y = 20 + row * i + row / 2
        q = [stats.percentile(v, p) for p in (5, 25, 50, 75, 95)]
        X = [left + pw * x / top_v for x in q]
        body.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (left - 6, y + 4,
                                                                            _e(a)))
        body.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>'
                    % (X[0], y, X[4], y))
        body.append('<rect x="%.1f" y="%.1f" width="%.1f" height="14" fill="%s" opacity="0.6">'
                    '<title>%s: p50 %.3g %s, p95 %.3g %s</title></rect>'
                    % (X[1], y - 7, max(1.0, X[3] - X[1]), colors[a], _e(a), q[2], unit, q[4],
                       unit))
        body.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" '
                    'stroke-width="2"/>' % (X[2], y - 8, X[2], y + 8))
        for x in v:
            body.append('<circle cx="%.1f" cy="%.1f" r="1.5" fill="#000" opacity="0.3"/>'
                        % (left + pw * x / top_v, y))
    y = 20 + row * len(arms) + 6
    for f in (0, 0.5, 1.0):
        v = top_v * f
        body.append('<text x="%.1f" y="%d" text-anchor="middle">%s %s</text>'
                    % (left + pw * f, y + 10, "%.0f" % v if top_v >= 10 else "%.2g" % v, unit))
    return _svg(W, H + 6, body, title)


def write_html(path: str, tasks: List[dict], res: Dict[str, List[dict]], summary: dict,
               describe: str) -> None:
    """The report: the tables, the four charts and the failure examples, one
    self-contained HTML file."""
    arms, S, ref = summary["arms"], summary["summary"], summary["reference_arm"]
    colors = {a: COLORS[i % len(COLORS)] for i, a in enumerate(arms)}
    rows = []
    for arm in arms:
        for b in summary["buckets"] + [ALL]:
            s = S[arm][b]
            rows.append("<tr%s><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s&ndash;%s</td>"
                        "<td>%s</td><td>%s</td><td>%s</td><td>%+.2f</td></tr>" % (
                            ' class="all"' if b == ALL else "", _e(arm), _e(b), s["n"],
                            _pct(s["accuracy"]), _pct(s["ci_low"]), _pct(s["ci_high"]),
                            ("%+.1f pt" % (100 * s["vs_diff"])) if ref and arm != ref else "-",
                            ("%.3g" % s["vs_p_mcnemar"]) if ref and arm != ref else "-",
                            _pct(s["retry_rate"]), s.get("length_diff_mean", 0.0)))
    cost = []
    for arm in arms:
        s = S[arm][ALL]
        cost.append("<tr><td>%s</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td>"
                    "<td>%.2f</td><td>%s</td><td>%s</td><td>%d / %d</td></tr>" % (
                        _e(arm), s["tokens_per_s"], s["latency_ms_p50"], s["latency_ms_p95"],
                        s["peak_kv_bytes"] / 1024, s["mean_output_tokens"],
                        ("x%.2f" % s["length_ratio"]) if ref else "-",
                        _pct(s.get("length_same_share", 0.0)), s["unparsed"], s["hit_limit"]))
    fails = []
    for arm, f in summary["failures"].items():
        for x in f["shown"]:
            fails.append("<tr><td>%s</td><td>%s</td><td>%s</td><td><code>%s</code></td>"
                         "<td>%s</td><td><code>%s</code> <b class=\"ref\">%s</b></td>"
                         "<td><code>%s</code> <b class=\"arm\">%s</b></td></tr>" % (
                             _e(arm), _e(x["id"]), _e(x["bucket"]), _e(x["reference"]),
                             x["split_at"], _e(" ".join(x["common"])) or "&empty;",
                             _e(" ".join(x["ref_rest"])) or "(end)",
                             _e(" ".join(x["common"])) or "&empty;",
                             _e(" ".join(x["arm_rest"])) or "(end)"))
        if f["count"] > len(f["shown"]):
            fails.append('<tr><td>%s</td><td colspan="6">... %d more</td></tr>'
                         % (_e(arm), f["count"] - len(f["shown"])))
    counts = " ".join("%s: %d" % (_e(a), f["count"]) for a, f in summary["failures"].items())
    doc = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kvevict A/B report</title>
<style>body{font-family:sans-serif;margin:1.5em;max-width:1100px}
td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
td:first-child,td:nth-child(2){text-align:left}tr.all td{font-weight:bold}
figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:4px}
b.ref{color:#1b7837}b.arm{color:#b2182b}code{font-size:12px}</style></head><body>
<h1>kvevict A/B report</h1>
<p>%s</p>
<h2>Accuracy by bucket</h2>
%s
<table><tr><th>arm</th><th>bucket</th><th>n</th><th>accuracy</th><th>95%% CI (Wilson)</th>
<th>vs %s</th><th>p (exact McNemar)</th><th>retry</th><th>&Delta; length (tok)</th></tr>
%s</table>
<h2>Cost</h2>
%s
<table><tr><th>arm</th><th>tok/s</th><th>p50 ms</th><th>p95 ms</th><th>peak KV KiB</th>
<th>mean output tokens</th><th>length vs %s</th><th>same length</th>
<th>unparsed / hit limit</th></tr>%s</table>
%s
%s
<h2>Failures</h2>
<p>Items %s answers right and the arm wrong (%s); each shown from the first token where the
two outputs part: the shared start, then %s's tokens (green) and the arm's (red).</p>
<table><tr><th>arm</th><th>id</th><th>bucket</th><th>reference</th><th>parts at token</th>
<th>%s</th><th>arm</th></tr>%s</table>
</body></html>
""" % (_e(describe), _acc_by_bucket(summary, colors), _e(ref or "-"), "\n".join(rows),
       _acc_vs_memory(summary, colors), _e(ref or "-"), "\n".join(cost),
       _boxes(res, lambda r: 1e3 * r["seconds"], "ms", "Latency per request", colors),
       _boxes(res, lambda r: len(r["ids"]), "tok", "Output length per request (tokens)",
              colors),
       _e(ref or "-"), counts or "none", _e(ref or "-"), _e(ref or "-"), "\n".join(fails))
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def isfinite_all(obj) -> bool:
    """True when every float in a JSON-able object is finite."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(isfinite_all(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(isfinite_all(v) for v in obj)
    return True

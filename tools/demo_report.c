/*
 * demo_report.c — what `kvevict demo` writes after its arms: the uniform
 * expectation of survival, the run as JSON, and the HTML report (the table
 * and four figures: memory held over the decode, the per-round cost, the
 * survival by position against the uniform expectation, and one keep map
 * per evicting arm). Every figure carries its numbers as data-* attributes,
 * equal to the JSON's (tests/python/test_demo_report.py checks both, and
 * the keep maps against a state driven through the Python binding).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "report.h"

static const char *const kve_arm_color[KVE_N_ARMS] = {"#555555", "#d62728", "#ff7f0e", "#1f77b4",
                                                     "#2ca02c"};

/* Expected survival of each position bin at the end of the run, when every
 * round keeps a uniform random n_keep of its n_cand candidates (docs/
 * BENCHMARKS.md "The demo" derives it). Round k (k = 1 .. R) runs when the
 * token at position t_k = C + (k - 1) r arrives, with C valid slots: the P
 * pinned, the W most recent (t_k - W .. t_k - 1, always valid) and the
 * candidates, every other valid position. So n_cand = C - P - W and n_keep
 * = clamp(B - P - W, 0, n_cand) in every round, and position p >= P is a
 * candidate in round k iff p < t_k - W. Fresh keys draw each round anew:
 * p survives with (n_keep / n_cand)^m, m the rounds it was a candidate in.
 * Persistent keys keep the n_keep smallest of every candidate ever, so each
 * of the t_R - W - P positions below t_R - W survives with n_keep over
 * their count. Pinned and window positions survive with 1. */
void kve_demo_expected_survival(const kve_demo_opts *o, kve_demo_arm *arm)
{
    for (int b = 0; b < KVE_DEMO_BINS; b++)
        arm->expected[b] = -1;
    if (arm->kind != KVE_ARM_RANDOM && arm->kind != KVE_ARM_RANDOM_P0)
        return;
    uint32_t n = o->prompt + o->steps, P = arm->prompt_len, C = arm->capacity, R = arm->rounds;
    int64_t cand = (int64_t)C - P - o->window, keep = (int64_t)arm->budget - P - o->window;
    keep = keep < 0 ? 0 : keep > cand ? cand : keep;
    double q = cand > 0 ? (double)keep / (double)cand : 1.0;
    int64_t last = R ? (int64_t)C + (int64_t)(R - 1) * o->interval - o->window : 0; /* t_R - W */
    for (int b = 0; b < KVE_DEMO_BINS; b++) {
        uint32_t lo = kve_demo_bin_lo(n, (uint32_t)b), hi = kve_demo_bin_lo(n, (uint32_t)b + 1);
        double sum = 0;
        for (uint32_t p = lo; p < hi; p++) {
            if (p < P || R == 0 || (int64_t)p >= last) {
                sum += 1;
            } else if (o->flags & KVE_PERSISTENT) {
                sum += (double)keep / (double)(last - P);
            } else { /* m = rounds k with t_k - W > p */
                uint32_t m = 0;
                for (uint32_t k = 1; k <= R; k++)
                    m += (int64_t)C + (int64_t)(k - 1) * o->interval - o->window > (int64_t)p;
                sum += pow(q, m);
            }
        }
        arm->expected[b] = hi > lo ? sum / (hi - lo) : -1;
    }
}

/* The sampled steps of the memory series: every stride-th, and the last. */
static uint32_t kve_demo_stride(const kve_demo_opts *o)
{
    return o->steps / 400 + 1;
}

static size_t kve_demo_series(const kve_demo_opts *o, const kve_demo_arm *a, double *x, double *y)
{
    size_t n = 0;
    uint32_t stride = kve_demo_stride(o);
    for (uint32_t s = 0; s <= o->steps; s += stride, n++) {
        x[n] = o->prompt + s;
        y[n] = a->held[s];
    }
    if ((o->steps % stride) != 0) {
        x[n] = o->prompt + o->steps;
        y[n++] = a->held[o->steps];
    }
    return n;
}

static double kve_demo_surv(const kve_demo_opts *o, const kve_demo_arm *a, int b)
{
    uint32_t n = o->prompt + o->steps;
    double size = (double)(kve_demo_bin_lo(n, (uint32_t)b + 1) - kve_demo_bin_lo(n, (uint32_t)b));
    return size > 0 ? (double)a->surv_kept[b] / (size * o->layers * o->heads) : 0;
}

double kve_demo_ms_per_round(const kve_demo_arm *a)
{
    return a->rounds ? 1e3 * a->choose_s / a->rounds : 0;
}

static void kve_json_nums(FILE *f, const char *name, const double *v, size_t n)
{
    fprintf(f, ",\"%s\":[", name);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        kve_num(f, v[i]);
    }
    fputc(']', f);
}

static void kve_json_arm(FILE *f, const kve_demo_opts *o, const kve_demo_arm *a, double *x, double *y)
{
    uint32_t full = o->prompt + o->steps;
    fprintf(f, "{\"name\":\"%s\",\"prompt_len\":%u,\"budget\":%u,\"capacity\":%u,\"rounds\":%u,"
               "\"held_final\":%u,\"held_peak\":%u,\"full_tokens\":%u,\"memory_ratio\":",
            a->name, a->prompt_len, a->budget, a->capacity, a->rounds, a->held[o->steps],
            a->held_peak, full);
    kve_num(f, (double)a->held_peak / full);
    fputs(",\"ms_per_round\":", f);
    kve_num(f, kve_demo_ms_per_round(a));
    fputs(",\"choose_ms\":", f);
    kve_num(f, 1e3 * a->choose_s);
    fputs(",\"write_ms\":", f);
    kve_num(f, 1e3 * a->write_s);
    fprintf(f, ",\"digest\":\"0x%016llx\",\"run_digest\":\"0x%016llx\",\"bad_entries\":%llu",
            (unsigned long long)a->digest, (unsigned long long)a->run_digest,
            (unsigned long long)a->bad);
    size_t n = kve_demo_series(o, a, x, y);
    kve_json_nums(f, "held_x", x, n);
    kve_json_nums(f, "held", y, n);
    kve_json_nums(f, "round_ms", a->round_ms, a->rounds);
    for (int b = 0; b < KVE_DEMO_BINS; b++)
        y[b] = kve_demo_surv(o, a, b);
    kve_json_nums(f, "survival", y, KVE_DEMO_BINS);
    if (a->expected[0] >= 0)
        kve_json_nums(f, "expected", a->expected, KVE_DEMO_BINS);
    fputs(",\"snapshots\":[", f);
    for (int s = 0; s < KVE_DEMO_SNAPS; s++)
        fprintf(f, "%s{\"tokens\":%u,\"round\":%u}", s ? "," : "", a->snap_tokens[s], a->snap_round[s]);
    fputs("]}", f);
}

void kve_demo_write_json(FILE *f, const kve_demo_opts *o, const char *backend,
                         const kve_demo_arm *arms, int n_arms)
{
    double *x = (double *)malloc((o->steps + 2 + KVE_DEMO_BINS) * sizeof(double));
    double *y = (double *)malloc((o->steps + 2 + KVE_DEMO_BINS) * sizeof(double));
    fprintf(f, "{\"layers\":%u,\"heads\":%u,\"entry_bytes\":%llu,\"prompt\":%u,\"budget\":%u,"
               "\"window\":%u,\"interval\":%u,\"steps\":%u,\"seed\":%llu,\"seq_id\":%llu,"
               "\"persistent\":%s,\"shared_heads\":%s,\"backend\":\"%s\",\"bins\":%d,"
               "\"map_heads\":%u,\"arms\":[",
            o->layers, o->heads, (unsigned long long)o->entry, o->prompt, o->budget, o->window,
            o->interval, o->steps, (unsigned long long)o->seed,
            (unsigned long long)(o->seed ^ 0x5eedULL), o->flags & KVE_PERSISTENT ? "true" : "false",
            o->flags & KVE_SHARED_HEADS ? "true" : "false", backend, KVE_DEMO_BINS, o->map_heads);
    for (int i = 0; x && y && i < n_arms; i++) {
        if (i)
            fputc(',', f);
        kve_json_arm(f, o, &arms[i], x, y);
    }
    fputs("]}\n", f);
    free(x);
    free(y);
}

/* The memory figure and the survival figure take @p x for the shared x
 * values and @p y for each arm's, @p cap values apart. */
static void kve_fig_memory(FILE *f, const kve_demo_opts *o, const kve_demo_arm *arms, int n_arms,
                           double *x, double *y, size_t cap)
{
    kve_fig g;
    uint32_t top = 0;
    for (int i = 0; i < n_arms; i++)
        top = arms[i].held_peak > top ? arms[i].held_peak : top;
    kve_fig_begin(&g, f, "fig-memory", "Memory held over the decode", "tokens in the sequence",
                  "slots held per head", o->prompt, o->prompt + o->steps, 0, top * 1.05 + 1, 1, 1);
    const char *names[KVE_N_ARMS], *colors[KVE_N_ARMS];
    kve_line lines[KVE_N_ARMS];
    for (int i = 0; i < n_arms; i++) {
        size_t n = kve_demo_series(o, &arms[i], x, y + i * cap);
        names[i] = arms[i].name;
        colors[i] = kve_arm_color[arms[i].kind];
        lines[i] = (kve_line){names[i], colors[i], x, y + i * cap, n, 0};
    }
    kve_fig_lines(&g, lines, (size_t)n_arms);
    kve_fig_legend(&g, names, colors, (size_t)n_arms);
    kve_fig_end(&g, "Slots each KV head holds (n_valid, the KV length attention reads) after "
                    "every token; the full cache holds every token. Evicting arms saw-tooth "
                    "between C - r and C, their capacity; arms that hold the same counts "
                    "share one line, drawn in turns in their colours.");
}

static void kve_fig_cost(FILE *f, const kve_demo_arm *arms, int n_arms)
{
    double top = 0;
    for (int i = 0; i < n_arms; i++)
        top = fmax(top, kve_demo_ms_per_round(&arms[i]));
    kve_fig g;
    kve_fig_begin(&g, f, "fig-cost", "Time per eviction round", "arm", "ms per round", -0.5,
                  n_arms - 0.5, 0, top > 0 ? top * 1.2 : 1, 0, 0);
    for (int i = 0; i < n_arms; i++) {
        kve_fig_bar(&g, arms[i].name, kve_arm_color[arms[i].kind], i, 0.6,
                    kve_demo_ms_per_round(&arms[i]));
        char label[64];
        snprintf(label, sizeof label, "%s", arms[i].rounds ? "" : "no rounds");
        if (arms[i].rounds)
            snprintf(label, sizeof label, "%.3f ms", kve_demo_ms_per_round(&arms[i]));
        kve_fig_label(&g, i, kve_demo_ms_per_round(&arms[i]) + 0.03 * g.y1, "middle", label);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", kve_fig_px(&g, i),
                g.h - g.bottom + 16);
        kve_html_text(f, arms[i].name);
        fputs("</text>\n", f);
    }
    kve_fig_end(&g, "Mean time of a round per arm, measured in this run: the append that runs "
                    "the round (selection and placement of all heads), plus the scoring pass "
                    "for the scored arms. The cache writes are the same in every arm and not "
                    "counted.");
}

/* Under the cost figure: this run's TriAttention : random ratio beside the
 * paper's Table 9, converted to a round, and what stays of that gap with a
 * scorer at its memory floor (docs/BENCHMARKS.md "Table 9, honest"). */
static void kve_cost_vs_paper(FILE *f, const kve_demo_arm *arms, int n_arms)
{
    double tri = -1, rnd = -1;
    for (int i = 0; i < n_arms; i++)
        if (arms[i].rounds && (arms[i].kind == KVE_ARM_TRI || arms[i].kind == KVE_ARM_RANDOM))
            *(arms[i].kind == KVE_ARM_TRI ? &tri : &rnd) = kve_demo_ms_per_round(&arms[i]);
    fputs("<p>The paper's Table 9 times one layer call in its HF harness (PyTorch, one H200): "
          "random 0.30 ms, TriAttention 1.47-1.64 ms; converted to a 36-layer round, about 10.8 "
          "and 53-59 ms, a 4.9-5.5x gap.", f);
    if (tri > 0 && rnd > 0)
        kve_html_printf(f, " In this run a TriAttention round costs %.1fx a random one.",
                        tri / rnd);
    fputs(" The gap does not close when the scorer runs at its memory floor: a scorer must read "
          "every candidate's key (75.5 MB a G1 round), random eviction reads the slot tables "
          "alone. On one CPU thread, with kvevict's scorers near that floor, TriAttention's "
          "round stays tens of times random's: all of the paper's 4.9-5.5x remains, and more "
          "(<code>kvevict-bench-arms</code>, docs/BENCHMARKS.md \"Table 9, honest\").</p>\n",
          f);
}

static void kve_fig_survival(FILE *f, const kve_demo_opts *o, const kve_demo_arm *arms,
                             int n_arms, double *x, double *y, size_t cap)
{
    uint32_t n = o->prompt + o->steps;
    for (int b = 0; b < KVE_DEMO_BINS; b++)
        x[b] = 0.5 * (kve_demo_bin_lo(n, (uint32_t)b) + kve_demo_bin_lo(n, (uint32_t)b + 1));
    kve_fig g;
    kve_fig_begin(&g, f, "fig-survival", "Survival by position at the end of the decode",
                  "position", "fraction of heads keeping it", 0, n, 0, 1.05, 1, 1);
    const char *names[KVE_N_ARMS + 1], *colors[KVE_N_ARMS + 1];
    kve_line lines[2 * KVE_N_ARMS];
    size_t k = 0, n_lines = 0;
    char exp_names[KVE_N_ARMS][48];
    for (int i = 0; i < n_arms; i++) {
        for (int b = 0; b < KVE_DEMO_BINS; b++)
            y[i * cap + b] = kve_demo_surv(o, &arms[i], b);
        names[k] = arms[i].name;
        colors[k++] = kve_arm_color[arms[i].kind];
        lines[n_lines++] = (kve_line){arms[i].name, kve_arm_color[arms[i].kind], x, y + i * cap,
                                      KVE_DEMO_BINS, 0};
        if (arms[i].expected[0] >= 0) {
            snprintf(exp_names[i], sizeof exp_names[i], "%s expected", arms[i].name);
            lines[n_lines++] = (kve_line){exp_names[i], "#000000", x, arms[i].expected,
                                          KVE_DEMO_BINS, 1};
        }
    }
    kve_fig_lines(&g, lines, n_lines);
    if (n_lines > k) {
        names[k] = "uniform expectation";
        colors[k++] = "-#000000";
    }
    kve_fig_legend(&g, names, colors, k);
    kve_fig_end(&g, "Per bin of positions, the fraction of (head, position) pairs the final "
                    "tables hold, over all heads. Dashed: the exact expectation of uniform "
                    "selection under this schedule (docs/BENCHMARKS.md \"The demo\"). The "
                    "pinned prompt survives whole; with prompt length 0 it decays like any "
                    "token.");
}

/* One keep map: map_heads panels, a row per snapshot, a cell per bin
 * shaded by the fraction of the bin's positions (generated so far) kept. */
static void kve_fig_keepmap(FILE *f, const kve_demo_opts *o, const kve_demo_arm *a)
{
    uint32_t n = o->prompt + o->steps, H = o->map_heads;
    double w = 860, left = 70, gap = 10, rowh = 12, top = 40;
    /* below the rows: the panels' end positions, the x-axis title, the colour scale */
    double base = top + KVE_DEMO_SNAPS * rowh;
    double pw = (w - left - 10 - gap * (H - 1)) / H, h = base + 70;
    fprintf(f, "<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"keepmap-%s\" width=\"%.0f\" "
               "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" data-positions=\"%u\" data-bins=\"%d\">\n"
               "<title>Keep map: %s</title>\n<text x=\"%.0f\" y=\"18\" font-weight=\"bold\">Keep map: "
               "%s</text>\n",
            a->name, w, h, w, h, n, KVE_DEMO_BINS, a->name, left, a->name);
    for (uint32_t hd = 0; hd < H; hd++) {
        double x0 = left + hd * (pw + gap);
        char label[64];
        if (o->flags & KVE_SHARED_HEADS)
            snprintf(label, sizeof label, "layer %u (heads shared)", hd);
        else
            snprintf(label, sizeof label, "layer %u, head %u", hd / o->heads, hd % o->heads);
        fprintf(f, "<g data-table=\"%u\">\n<text x=\"%.1f\" y=\"%.1f\">", hd, x0, top - 6);
        kve_html_text(f, label);
        fputs("</text>\n", f);
        for (int s = 0; s < KVE_DEMO_SNAPS; s++) {
            fprintf(f, "<g data-snap=\"%d\" data-tokens=\"%u\" data-round=\"%u\">", s,
                    a->snap_tokens[s], a->snap_round[s]);
            const uint32_t *row = a->map_kept + ((size_t)s * H + hd) * KVE_DEMO_BINS;
            for (int b = 0; b < KVE_DEMO_BINS; b++) {
                uint32_t lo = kve_demo_bin_lo(n, (uint32_t)b), hi = kve_demo_bin_lo(n, (uint32_t)b + 1);
                uint32_t end = hi < a->snap_tokens[s] ? hi : a->snap_tokens[s];
                if (end <= lo)
                    continue;
                fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                           "fill-opacity=\"%.3f\" data-bin=\"%d\" data-kept=\"%u\" data-n=\"%u\"/>",
                        x0 + pw * lo / n, top + s * rowh, pw * (hi - lo) / n, rowh - 1,
                        kve_arm_color[a->kind], (double)row[b] / (end - lo), b, row[b], end - lo);
            }
            fputs("</g>\n", f);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">0</text><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"end\">%u</text>\n</g>\n",
                x0, base + 12, x0 + pw, base + 12, n);
    }
    fprintf(f, "<text class=\"x-title\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">position "
               "in the sequence (each panel: 0 .. %u, %d bins)</text>\n",
            (left + w - 10) / 2, base + 28, n, KVE_DEMO_BINS);
    char id[64];
    snprintf(id, sizeof id, "scale-%s", a->name);
    kve_fig_colour_scale(f, id, kve_arm_color[a->kind], w - 10 - 200, base + 38, 200,
                         "fraction of the bin's positions kept");
    fprintf(f, "<text transform=\"translate(14,%.1f) rotate(-90)\" text-anchor=\"middle\">decode "
               "(top: early)</text>\n</svg>\n<figcaption>",
            top + KVE_DEMO_SNAPS * rowh / 2);
    kve_html_printf(f, "Which positions the first %u slot tables of arm %s hold (tables in "
                       "(layer, head) order: layer 0 head 0, 1, ...), at %d points of the "
                       "decode (rows, top to bottom), by position (x, %d bins): the shade is "
                       "the fraction of the bin's positions generated so far that the table "
                       "keeps.", H, a->name, KVE_DEMO_SNAPS, KVE_DEMO_BINS);
    fputs("</figcaption>\n</figure>\n", f);
}

int kve_demo_write_report(const char *path, const kve_demo_opts *o, const char *backend,
                          const kve_demo_arm *arms, int n_arms)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    size_t cap = o->steps + 2 + KVE_DEMO_BINS; /* a series' values at most */
    double *x = (double *)malloc(cap * sizeof(double));
    double *y = (double *)malloc(cap * (size_t)(n_arms > 0 ? n_arms : 1) * sizeof(double));
    if (!x || !y) {
        free(x);
        free(y);
        fclose(f);
        return -1;
    }
    kve_html_begin(f, "kvevict demo: the A/B arms");
    fputs("<h1>kvevict demo: the A/B arms through one engine path</h1>\n<p>", f);
    kve_html_printf(f, "%u layers x %u KV heads, %llu-byte K and V entries, prompt %u, budget "
                       "%u, window %u, interval %u, %u generated tokens, seed %llu%s%s; "
                       "backend %s.", o->layers, o->heads, (unsigned long long)o->entry,
                    o->prompt, o->budget, o->window, o->interval, o->steps,
                    (unsigned long long)o->seed, o->flags & KVE_PERSISTENT ? ", persistent keys" : "",
                    o->flags & KVE_SHARED_HEADS ? ", shared heads" : "", backend);
    fputs("</p>\n<p>Every arm runs the same tokens through the same cache state, slot mapping, "
          "moves and cache writes; only the selector (and for <code>random-p0</code>, a prompt "
          "length of 0 at admission, so the prompt is not pinned) differs. The keys and values "
          "are synthetic: this measures the mechanics and their cost, not task accuracy.</p>\n"
          "<pre>", f);
    /* the table, as printed on stdout (escaped: it holds no markup) */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (m) {
        kve_demo_print_table(m, o, arms, n_arms);
        fclose(m);
        kve_html_text(f, buf);
        free(buf);
    }
    fputs("</pre>\n", f);
    kve_fig_memory(f, o, arms, n_arms, x, y, cap);
    kve_fig_cost(f, arms, n_arms);
    kve_cost_vs_paper(f, arms, n_arms);
    kve_fig_survival(f, o, arms, n_arms, x, y, cap);
    for (int i = 0; i < n_arms; i++)
        if (arms[i].kind != KVE_ARM_FULL)
            kve_fig_keepmap(f, o, &arms[i]);
    fputs("<script type=\"application/json\" id=\"kvevict-run\">\n", f);
    kve_demo_write_json(f, o, backend, arms, n_arms);
    fputs("</script>\n", f);
    kve_html_end(f);
    free(x);
    free(y);
    return fclose(f) == 0 ? 0 : -1;
}

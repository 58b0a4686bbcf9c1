/* report.c — the HTML page and SVG figures of report.h. */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

enum {
    KVE_LEGEND_W = 230,    /* the legend column's width, pixels */
    KVE_LEGEND_CHARS = 32, /* characters of a note's line in it (11 px sans) */
    KVE_DASH = 8,          /* dash length of lines drawn in turns, pixels */
};

void kve_html_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

void kve_html_printf(FILE *f, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kve_html_text(f, buf);
}

void kve_num(FILE *f, double v)
{
    fprintf(f, "%.6g", isfinite(v) ? v : 0.0);
}

void kve_nums(FILE *f, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(' ', f);
        kve_num(f, v[i]);
    }
}

void kve_html_begin(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>", f);
    kve_html_text(f, title);
    fputs("</title>\n<style>\n"
          "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\n"
          "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 8px;"
          "text-align:right}th{background:#eee}td:first-child{text-align:left}\n"
          "figure{margin:1.5em 0}figcaption{font-size:90%;color:#444;max-width:900px}\n"
          "svg text{font-family:sans-serif;font-size:11px}\n"
          "code{background:#f4f4f4}\n"
          "</style>\n</head>\n<body>\n",
          f);
}

void kve_html_end(FILE *f)
{
    fputs("</body>\n</html>\n", f);
}

double kve_fig_px(const kve_fig *g, double x)
{
    double span = g->x1 - g->x0;
    return g->left + (span > 0 ? (x - g->x0) / span : 0) * (g->w - g->left - g->right);
}

double kve_fig_py(const kve_fig *g, double y)
{
    double span = g->y1 - g->y0;
    return g->h - g->bottom - (span > 0 ? (y - g->y0) / span : 0) * (g->h - g->top - g->bottom);
}

/* A tick step of 1, 2 or 5 x 10^k giving at most 8 ticks over the span. */
static double kve_tick_step(double span)
{
    if (!(span > 0))
        return 1;
    double base = pow(10, floor(log10(span / 8)));
    static const double mult[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (span / (base * mult[i]) <= 8)
            return base * mult[i];
    return base * 10;
}

static void kve_fig_axes(kve_fig *g, const char *xlabel, const char *ylabel)
{
    FILE *f = g->f;
    double l = g->left, r = g->w - g->right, t = g->top, b = g->h - g->bottom;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#888\"/>\n", l, t, r - l, b - t);
    for (int axis = !g->xticks; axis < 2; axis++) {
        double lo = axis ? g->y0 : g->x0, hi = axis ? g->y1 : g->x1;
        double step = kve_tick_step(hi - lo);
        for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
            double p = axis ? kve_fig_py(g, v) : kve_fig_px(g, v);
            if (axis)
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>"
                           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                        l - 4, p, l, p, l - 6, p + 4);
            else
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>"
                           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                        p, b, p, b + 4, p, b + 16);
            kve_num(f, fabs(v) < step * 1e-9 ? 0 : v);
            fputs("</text>\n", f);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (l + r) / 2, g->h - 6);
    kve_html_text(f, xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(14,%.1f) rotate(-90)\" "
               "text-anchor=\"middle\">", (t + b) / 2);
    kve_html_text(f, ylabel);
    fputs("</text>\n", f);
}

void kve_fig_begin(kve_fig *g, FILE *f, const char *id, const char *title, const char *xlabel,
                   const char *ylabel, double x0, double x1, double y0, double y1, int xticks,
                   int legend)
{
    /* the legend's column: KVE_LEGEND_W pixels right of the plot area */
    *g = (kve_fig){f, x0, x1, y0, y1, legend ? 1000 : 860, 320, 70,
                   legend ? KVE_LEGEND_W : 20, 30, 40, xticks, ""};
    fputs("<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"", f);
    kve_html_text(f, id);
    fprintf(f, "\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\"", g->w, g->h, g->w,
            g->h);
    const char *names[4] = {"data-x0", "data-x1", "data-y0", "data-y1"};
    double vals[4] = {x0, x1, y0, y1};
    for (int i = 0; i < 4; i++) {
        fprintf(f, " %s=\"", names[i]);
        kve_num(f, vals[i]);
        fputc('"', f);
    }
    /* the plot area's pixels: left, top, right, bottom */
    fprintf(f, " data-plot=\"%.0f %.0f %.0f %.0f\">\n<title>", g->left, g->top, g->w - g->right,
            g->h - g->bottom);
    kve_html_text(f, title);
    fprintf(f, "</title>\n<text x=\"%.1f\" y=\"18\" font-weight=\"bold\">", g->left);
    kve_html_text(f, title);
    fputs("</text>\n", f);
    kve_fig_axes(g, xlabel, ylabel);
}

void kve_fig_end(kve_fig *g, const char *caption)
{
    fputs("</svg>\n<figcaption>", g->f);
    kve_html_text(g->f, caption);
    fputs("</figcaption>\n</figure>\n", g->f);
}

static void kve_attr(FILE *f, const char *name, const char *value)
{
    fprintf(f, " %s=\"", name);
    kve_html_text(f, value);
    fputc('"', f);
}

static int kve_same_points(const kve_line *a, const kve_line *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->x[i] != b->x[i] || a->y[i] != b->y[i])
            return 0;
    return 1;
}

/* Line @p l, the @p m-th of @p k lines with the same points (@p first the
 * group's first): the first is drawn whole, each later solid one in dashes
 * at its own offset, so every colour of the group shows along the line. */
static void kve_fig_polyline(kve_fig *g, const kve_line *l, const kve_line *first, size_t m,
                             size_t k)
{
    FILE *f = g->f;
    fputs("<polyline fill=\"none\" stroke-width=\"1.5\"", f);
    kve_attr(f, "stroke", l->color);
    kve_attr(f, "data-series", l->series);
    if (m > 0)
        kve_attr(f, "data-same-as", first->series);
    if (l->dashed)
        fputs(" stroke-dasharray=\"5,3\"", f);
    else if (m > 0)
        fprintf(f, " stroke-dasharray=\"%d,%d\" stroke-dashoffset=\"%d\"", KVE_DASH,
                KVE_DASH * (int)(k - 1), KVE_DASH * (int)(k - m));
    fputs(" data-x=\"", f);
    kve_nums(f, l->x, l->n);
    fputs("\" data-y=\"", f);
    kve_nums(f, l->y, l->n);
    fputs("\" points=\"", f);
    for (size_t i = 0; i < l->n; i++)
        fprintf(f, "%s%.2f,%.2f", i ? " " : "", kve_fig_px(g, isfinite(l->x[i]) ? l->x[i] : 0),
                kve_fig_py(g, isfinite(l->y[i]) ? l->y[i] : 0));
    fputs("\"/>\n", f);
}

/* Appends @p a and @p b to the notes (cut at the buffer's end). */
static void kve_fig_note(kve_fig *g, const char *a, const char *b)
{
    size_t len = strlen(g->notes);
    snprintf(g->notes + len, sizeof g->notes - len, "%s%s", a, b);
}

void kve_fig_lines(kve_fig *g, const kve_line *lines, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t first = i, m = 0, k = 0; /* the group's first line, i's place in it, its size */
        for (size_t j = 0; j < n; j++) {
            if (!kve_same_points(&lines[i], &lines[j]))
                continue;
            first = k++ ? first : j;
            m += j < i;
        }
        kve_fig_polyline(g, &lines[i], &lines[first], m, k);
        if (m > 0 || k < 2)
            continue;
        /* the group's note: "a = b = c (identical)" */
        for (size_t j = i; j < n; j++)
            if (kve_same_points(&lines[i], &lines[j]))
                kve_fig_note(g, j > i ? " = " : "", lines[j].series);
        kve_fig_note(g, " (identical)", "\n");
    }
}

void kve_fig_bar(kve_fig *g, const char *series, const char *color, double x, double width,
                 double value)
{
    FILE *f = g->f;
    double v = isfinite(value) ? value : 0;
    double px0 = kve_fig_px(g, x - width / 2), px1 = kve_fig_px(g, x + width / 2);
    double top = kve_fig_py(g, v), base = kve_fig_py(g, g->y0);
    fprintf(f, "<rect x=\"%.3f\" y=\"%.3f\" width=\"%.3f\" height=\"%.3f\"", px0,
            top < base ? top : base, px1 - px0, fabs(base - top));
    kve_attr(f, "fill", color);
    kve_attr(f, "data-series", series);
    fputs(" data-value=\"", f);
    kve_num(f, v);
    fputs("\"/>\n", f);
}

/* The notes' lines, at most KVE_LEGEND_CHARS characters each (broken at
 * spaces), as <text> from (x, y) down when @p emit; returns their count. */
static size_t kve_fig_note_lines(kve_fig *g, double x, double y, int emit)
{
    size_t count = 0;
    const char *p = g->notes;
    while (*p) {
        const char *end = p + strcspn(p, "\n"), *cut = end;
        if (end - p > KVE_LEGEND_CHARS) { /* the last space that fits, else the first */
            cut = p + KVE_LEGEND_CHARS;
            while (cut > p && *cut != ' ')
                cut--;
            if (cut == p)
                cut = p + strcspn(p, " \n");
        }
        if (emit) {
            fprintf(g->f, "<text class=\"note\" x=\"%.1f\" y=\"%.1f\" font-style=\"italic\">",
                    x, y + 14.0 * count);
            char line[KVE_FIG_NOTES];
            snprintf(line, sizeof line, "%.*s", (int)(cut - p), p);
            kve_html_text(g->f, line);
            fputs("</text>\n", g->f);
        }
        count++;
        p = *cut ? cut + 1 : cut;
    }
    return count;
}

void kve_fig_legend(kve_fig *g, const char *const *names, const char *const *colors, size_t n)
{
    double x0 = g->w - g->right + 12, x1 = g->w - 6, y0 = g->top;
    double y1 = y0 + 8 + 15.0 * n + 14.0 * kve_fig_note_lines(g, 0, 0, 0);
    fprintf(g->f, "<g class=\"legend\" data-box=\"%.1f %.1f %.1f %.1f\">\n<rect x=\"%.1f\" "
                  "y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" "
                  "stroke=\"#cccccc\"/>\n",
            x0, y0, x1, y1, x0, y0, x1 - x0, y1 - y0);
    double y = y0 + 17;
    for (size_t i = 0; i < n; i++, y += 15) {
        int dashed = colors[i][0] == '-';
        fprintf(g->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"3\"%s",
                x0 + 6, y - 4, x0 + 22, y - 4, dashed ? " stroke-dasharray=\"4,2\"" : "");
        kve_attr(g->f, "stroke", colors[i] + dashed);
        fprintf(g->f, "/><text x=\"%.1f\" y=\"%.1f\">", x0 + 26, y);
        kve_html_text(g->f, names[i]);
        fputs("</text>\n", g->f);
    }
    kve_fig_note_lines(g, x0 + 6, y, 1);
    fputs("</g>\n", g->f);
}

void kve_fig_colour_scale(FILE *f, const char *id, const char *color, double x, double y,
                          double width, const char *label)
{
    fputs("<g class=\"colour-scale\" data-min=\"0\" data-max=\"1\"", f);
    kve_attr(f, "data-color", color);
    fputs(">\n<defs><linearGradient", f);
    kve_attr(f, "id", id);
    fputs(">", f);
    for (int end = 0; end < 2; end++) {
        fprintf(f, "<stop offset=\"%d\" stop-opacity=\"%d\"", end, end);
        kve_attr(f, "stop-color", color);
        fputs("/>", f);
    }
    fprintf(f, "</linearGradient></defs>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
               "height=\"10\" stroke=\"#888888\" fill=\"url(#", x, y, width);
    kve_html_text(f, id);
    fprintf(f, ")\"/>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", x - 8, y + 9);
    kve_html_text(f, label);
    fputs("</text>\n", f);
    for (int t = 0; t <= 4; t++) {
        double px = x + width * t / 4;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\"/>"
                   "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                px, y + 10, px, y + 13, px, y + 23, t / 4.0);
    }
    fputs("</g>\n", f);
}

void kve_fig_label(kve_fig *g, double x, double y, const char *anchor, const char *text)
{
    fprintf(g->f, "<text x=\"%.2f\" y=\"%.2f\"", kve_fig_px(g, x), kve_fig_py(g, y));
    kve_attr(g->f, "text-anchor", anchor);
    fputc('>', g->f);
    kve_html_text(g->f, text);
    fputs("</text>\n", g->f);
}

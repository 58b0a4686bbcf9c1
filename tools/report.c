/* report.c — the HTML page and SVG figures of report.h. */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

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
                   const char *ylabel, double x0, double x1, double y0, double y1, int xticks)
{
    *g = (kve_fig){f, x0, x1, y0, y1, 860, 320, 70, 20, 30, 40, xticks};
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

void kve_fig_line(kve_fig *g, const char *series, const char *color, const double *x,
                  const double *y, size_t n, int dashed)
{
    FILE *f = g->f;
    fputs("<polyline fill=\"none\" stroke-width=\"1.5\"", f);
    kve_attr(f, "stroke", color);
    kve_attr(f, "data-series", series);
    if (dashed)
        fputs(" stroke-dasharray=\"5,3\"", f);
    fputs(" data-x=\"", f);
    kve_nums(f, x, n);
    fputs("\" data-y=\"", f);
    kve_nums(f, y, n);
    fputs("\" points=\"", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%.2f,%.2f", i ? " " : "", kve_fig_px(g, isfinite(x[i]) ? x[i] : 0),
                kve_fig_py(g, isfinite(y[i]) ? y[i] : 0));
    fputs("\"/>\n", f);
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

void kve_fig_legend(kve_fig *g, const char *const *names, const char *const *colors, size_t n,
                    double at)
{
    double x = g->left + at * (g->w - g->left - g->right), y = g->top + 14;
    for (size_t i = 0; i < n; i++, y += 15) {
        int dashed = colors[i][0] == '-';
        fprintf(g->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"3\"%s",
                x, y - 4, x + 16, y - 4, dashed ? " stroke-dasharray=\"4,2\"" : "");
        kve_attr(g->f, "stroke", colors[i] + dashed);
        fprintf(g->f, "/><text x=\"%.1f\" y=\"%.1f\">", x + 20, y);
        kve_html_text(g->f, names[i]);
        fputs("</text>\n", g->f);
    }
}

void kve_fig_label(kve_fig *g, double x, double y, const char *anchor, const char *text)
{
    fprintf(g->f, "<text x=\"%.2f\" y=\"%.2f\"", kve_fig_px(g, x), kve_fig_py(g, y));
    kve_attr(g->f, "text-anchor", anchor);
    fputc('>', g->f);
    kve_html_text(g->f, text);
    fputs("</text>\n", g->f);
}

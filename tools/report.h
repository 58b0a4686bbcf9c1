/* report.h — a self-contained HTML page with inline SVG figures, no
 * dependencies: every text is escaped, every number printed with a fixed
 * precision (kve_num), and every figure carries the numbers it draws as
 * data-* attributes, so a test can check the drawing against the run. */
#ifndef KVE_REPORT_H
#define KVE_REPORT_H

#include <stddef.h>
#include <stdio.h>

/* Opens the page: doctype, title (escaped), a small stylesheet. */
void kve_html_begin(FILE *f, const char *title);
/* Closes the page. */
void kve_html_end(FILE *f);
/* Writes @p s with & < > " ' escaped. */
void kve_html_text(FILE *f, const char *s);
/* printf, then escaped (at most 1023 characters). */
void kve_html_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One number with 6 significant digits ("%.6g"); a non-finite value is
 * written as 0, so that no attribute or coordinate is ever "nan". */
void kve_num(FILE *f, double v);
/* @p n numbers, space-separated, each as kve_num. */
void kve_nums(FILE *f, const double *v, size_t n);

/* One figure: an <svg> of w x h pixels with a plot area inside margins,
 * mapping data x0..x1, y0..y1 onto it (y upwards); a figure with a legend
 * keeps a column right of the plot area for it, so no legend covers data. */
#define KVE_FIG_NOTES 512
typedef struct kve_fig {
    FILE *f;
    double x0, x1, y0, y1;
    double w, h, left, right, top, bottom;
    int xticks;
    /* the legend's notes ("a = b (identical)"), one a line, from kve_fig_lines */
    char notes[KVE_FIG_NOTES];
} kve_fig;

/* Opens <figure><svg id=@p id data-x0.. data-y1..> with a <title>, the
 * axes (at most 8 ticks each; none on x when @p xticks is 0) and their
 * labels; @p legend reserves the legend's column (kve_fig_legend). */
void kve_fig_begin(kve_fig *g, FILE *f, const char *id, const char *title, const char *xlabel,
                   const char *ylabel, double x0, double x1, double y0, double y1, int xticks,
                   int legend);
/* Closes the svg and writes @p caption (escaped) as the figcaption. */
void kve_fig_end(kve_fig *g, const char *caption);
/* Pixel coordinates of data values. */
double kve_fig_px(const kve_fig *g, double x);
double kve_fig_py(const kve_fig *g, double y);
/* One line of a figure: data-series @p series, its points, dashed or not. */
typedef struct kve_line {
    const char *series, *color;
    const double *x, *y;
    size_t n;
    int dashed;
} kve_line;
/* Polylines of @p n lines, data-x / data-y = the values. A line whose
 * points equal an earlier one's would hide it: it gets data-same-as = the
 * first such line's series, a solid one is drawn in dashes that leave the
 * others of its group showing in turn, and the legend notes the group as
 * "a = b (identical)". */
void kve_fig_lines(kve_fig *g, const kve_line *lines, size_t n);
/* A bar from y0 up to @p value at data x @p x (width @p width in data
 * units), with data-series and data-value. */
void kve_fig_bar(kve_fig *g, const char *series, const char *color, double x, double width,
                 double value);
/* The legend, in the column right of the plot area: a box (<g class=
 * "legend" data-box="x0 y0 x1 y1">) of entries and then the notes of
 * kve_fig_lines; a color starting with '-' is drawn dashed (the rest is the
 * color). */
void kve_fig_legend(kve_fig *g, const char *const *names, const char *const *colors, size_t n);
/* A colour scale from 0 to 1 (<g class="colour-scale" data-min="0"
 * data-max="1">): a bar of @p width pixels at (@p x, @p y), @p color from
 * transparent to opaque (as fill-opacity shades a cell), ticks at 0, 0.25,
 * .. 1 below it and @p label left of it; @p id names its gradient. */
void kve_fig_colour_scale(FILE *f, const char *id, const char *color, double x, double y,
                          double width, const char *label);
/* A text label at data (x, y), escaped. */
void kve_fig_label(kve_fig *g, double x, double y, const char *anchor, const char *text);

#endif

/*
 * fuzz_score_stats.c — the fuzz_score harness's part on
 * kve_triattention_stats_load: the input's tail written to a file, or a
 * calibration file (docs/SCORERS.md) written from decoded sizes and values,
 * well formed or damaged one way; files by mkstemp in /tmp, unlinked.
 */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "fuzz_score.h"

static void fz_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* @p n bytes at @p p in a fresh file of this process; its path in @p path
 * ("" when none could be made). */
static void fz_write_file(char *path, size_t cap, const unsigned char *p, size_t n)
{
    snprintf(path, cap, "/tmp/fuzz_score_%d_XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, p + done, n - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(fd);
}

/* A finite float32 of any bits (subnormals, -0, huge ones among them). */
static float fz_any_finite(uint64_t *mix, int nonneg)
{
    uint32_t b = (uint32_t)fz_mix(mix);
    if (((b >> 23) & 255) == 255)
        b &= ~(1u << 30);
    if (nonneg)
        b &= 0x7fffffffu;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* A calibration file being written: its bytes (with room for 16 past the
 * statistics), its well-formed and written lengths, its sizes. */
typedef struct {
    unsigned char *bytes;
    size_t total, len;
    size_t per; /* statistics per array: n_layers x n_q_heads x head_dim / 2 */
    uint32_t nl, nh, hd;
} fz_calibration;

/* The well-formed file of sizes @p c and statistics @p vals (q_mean, then
 * q_abs_mean), little-endian as docs/SCORERS.md lays it out. */
static void fz_calibration_write(fz_calibration *c, double theta, const float *vals)
{
    unsigned char *file = c->bytes;
    memcpy(file, "KVETRIST", 8);
    fz_put32(file + 8, 1);
    fz_put32(file + 12, c->nl);
    fz_put32(file + 16, c->nh);
    fz_put32(file + 20, c->hd);
    uint64_t tb;
    memcpy(&tb, &theta, 8);
    fz_put32(file + 24, (uint32_t)tb);
    fz_put32(file + 28, (uint32_t)(tb >> 32));
    for (size_t i = 0; i < c->per * 3; i++) {
        uint32_t b;
        memcpy(&b, &vals[i], 4);
        fz_put32(file + 32 + 4 * i, b);
    }
    c->len = c->total;
}

/* Damage @p kind (2 to 6, 9) to the file's header fields: 0 the file must
 * be refused, -1 the docs leave it open. */
static int fz_damage_header(fz_bytes *in, fz_calibration *c, uint32_t kind)
{
    unsigned char *file = c->bytes;
    switch (kind) {
    case 2: { /* a size that does not match the statistics */
        uint32_t which = fz_below(in, 3), at = 12 + 4 * which;
        uint32_t v = which == 0 ? c->nl : which == 1 ? c->nh : c->hd;
        v = fz_u8(in) & 1 && v > (which == 2 ? 2u : 1u) ? v - (which == 2 ? 2 : 1)
                                                         : v + (which == 2 ? 2 : 1);
        fz_put32(file + at, v);
        break;
    }
    case 3: /* bad magic */
        file[fz_below(in, 8)] ^= (unsigned char)(1 + fz_below(in, 255));
        break;
    case 4: /* bad version */
        fz_put32(file + 8, fz_u8(in) & 1 ? 0 : 2 + fz_u32(in) % 0xfffffffdu);
        break;
    case 5: { /* a size out of range */
        static const uint32_t bad_sizes[] = {0, 65537, 0xffffffffu, 0x80000000u};
        uint32_t which = fz_below(in, 3);
        uint32_t v = which == 2 ? (fz_u8(in) & 1 ? 514 + 2 * fz_below(in, 8) : c->hd + 1)
                                : bad_sizes[fz_below(in, 4)];
        if (which == 2 && fz_u8(in) < 64)
            v = 0;
        fz_put32(file + 12 + 4 * which, v);
        break;
    }
    case 6: /* sizes at the top of their range, a file far too short */
        fz_put32(file + 12, 65536);
        fz_put32(file + 16, 65536);
        fz_put32(file + 20, 512);
        break;
    case 9: { /* a rope_theta that is no number, or negative */
        static const uint64_t bad_theta[] = {0x7ff8000000000000ull, 0x7ff0000000000000ull,
                                             0xfff0000000000000ull, 0xbff0000000000000ull};
        uint32_t sel = fz_below(in, 4);
        fz_put32(file + 24, (uint32_t)bad_theta[sel]);
        fz_put32(file + 28, (uint32_t)(bad_theta[sel] >> 32));
        return sel == 3 ? -1 : 0; /* negative: the docs do not say */
    }
    }
    return 0;
}

/* Damage @p kind (0, 1, 7, 8, 10) to the file's length or statistics, or
 * none (any other kind): 1 the file must load, 0 it must be refused, -1 the
 * docs leave it open. */
static int fz_damage_body(fz_bytes *in, uint64_t *mix, fz_calibration *c, uint32_t kind)
{
    unsigned char *file = c->bytes;
    size_t per = c->per;
    switch (kind) {
    case 0: /* truncated, the header's promise unkept */
        c->len = fz_below(in, (uint32_t)c->total);
        return 0;
    case 1: /* bytes after the statistics */
        c->len = c->total + 1 + fz_below(in, 16);
        for (size_t i = c->total; i < c->len; i++)
            file[i] = (unsigned char)fz_mix(mix);
        return 0;
    case 7: { /* a q_mean that is no number */
        uint32_t b = fz_u8(in) & 1 ? 0x7f800000u : 0xffc00001u;
        fz_put32(file + 32 + 4 * fz_below(in, (uint32_t)(per * 2)), b);
        return 0;
    }
    case 8: { /* a q_abs_mean below 0 or no number */
        static const uint32_t bad_abs[] = {0xbf800000u, 0x80000001u, 0x7fc00000u, 0xff800000u,
                                           0x80000000u};
        uint32_t sel = fz_below(in, 5);
        fz_put32(file + 32 + 4 * (per * 2 + fz_below(in, (uint32_t)per)), bad_abs[sel]);
        return sel == 4 ? -1 : 0; /* -0.0: ">= 0" as a number, but the docs do not say */
    }
    case 10: /* shorter than the header */
        c->len = fz_below(in, 32);
        return 0;
    default: /* well formed */
        return 1;
    }
}

/* The load of the file at @p path: a well-formed one (@p good 1) loads with
 * exactly its sizes, rope_theta and statistics @p vals; a damaged one (0) is
 * refused with a message and no arrays; any load has the file's sizes. */
static void fz_check_calibration_load(const char *path, const fz_calibration *c, double theta,
                                      const float *vals, int good, uint32_t kind)
{
    uint32_t nl = c->nl, nh = c->nh, hd = c->hd;
    kve_triattention_stats s;
    memset(&s, 0x5a, sizeof s);
    kve_status st = kve_triattention_stats_load(path, &s);
    if (good == 1) {
        FZ_CHECK(st == KVE_OK, "a well-formed calibration file (%u x %u x %u) was refused: %s",
                 nl, nh, hd, kve_status_string(st));
    } else if (good == 0) {
        FZ_CHECK(st != KVE_OK, "a damaged calibration file (damage %u) was accepted", kind);
    }
    if (st == KVE_OK) {
        FZ_CHECK(s.n_layers == nl && s.n_q_heads == nh && s.head_dim == hd,
                 "loaded sizes %u x %u x %u, written %u x %u x %u", s.n_layers, s.n_q_heads,
                 s.head_dim, nl, nh, hd);
        FZ_CHECK(s.q_mean && s.q_abs_mean, "a load without arrays");
        if (good == 1) {
            FZ_CHECK(memcmp(&s.rope_theta, &theta, 8) == 0, "rope_theta %g, written %g",
                     s.rope_theta, theta);
            FZ_CHECK(memcmp(s.q_mean, vals, c->per * 8) == 0, "q_mean differs from the file's");
            FZ_CHECK(memcmp(s.q_abs_mean, vals + c->per * 2, c->per * 4) == 0,
                     "q_abs_mean differs from the file's");
        }
    } else {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!s.q_mean && !s.q_abs_mean, "a failed load left arrays");
    }
    kve_triattention_stats_free(&s);
}

/* A calibration file from decoded sizes and values, well formed or damaged
 * one way (a damage byte below 96, or kind 11, leaves it well formed). */
static void fz_stats_written(fz_bytes *in, uint64_t *mix)
{
    fz_calibration c;
    c.nl = 1 + fz_below(in, 3);
    c.nh = 1 + fz_below(in, 4);
    c.hd = 2 * (1 + fz_below(in, 8));
    uint8_t tsel = fz_u8(in), damage = fz_u8(in);
    static const double thetas[] = {0.0, 10000.0, 500000.0, 1e6, 0.5, 1.0, 1e300, 5e-324};
    double theta = thetas[tsel & 7];
    c.per = (size_t)c.nl * c.nh * (c.hd / 2);
    c.total = 32 + c.per * 12;
    c.bytes = (unsigned char *)calloc(c.total + 16, 1);
    float *vals = (float *)malloc(c.per * 12);
    if (!c.bytes || !vals) {
        free(c.bytes);
        free(vals);
        return;
    }
    for (size_t i = 0; i < c.per * 3; i++)
        vals[i] = fz_any_finite(mix, i >= c.per * 2);
    fz_calibration_write(&c, theta, vals);
    uint32_t kind = damage % 12;
    int header_damage = damage >= 96 && ((kind >= 2 && kind <= 6) || kind == 9);
    int good = header_damage ? fz_damage_header(in, &c, kind)
                             : fz_damage_body(in, mix, &c, damage < 96 ? 99 : kind);
    char path[64];
    fz_write_file(path, sizeof path, c.bytes, c.len);
    if (path[0]) {
        fz_check_calibration_load(path, &c, theta, vals, good, kind);
        unlink(path);
    }
    free(c.bytes);
    free(vals);
}

/* The first byte picks: the input's tail as the file (after a valid header
 * prefix or not; the tail stays unread for what follows), or a file written
 * from decoded sizes and values. */
void fz_stats_file(fz_bytes *in, uint64_t *mix)
{
    uint8_t sel = fz_u8(in);
    if (sel >= 192) {
        fz_stats_written(in, mix);
        return;
    }
    size_t n = in->n + 12;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf)
        return;
    size_t at = 0;
    if (sel < 128) {
        memcpy(buf, "KVETRIST\x01\0\0\0", 12);
        at = 12;
    }
    if (in->n)
        memcpy(buf + at, in->p, in->n);
    char path[64];
    fz_write_file(path, sizeof path, buf, at + in->n);
    free(buf);
    if (!path[0])
        return;
    kve_triattention_stats s;
    kve_status st = kve_triattention_stats_load(path, &s);
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!s.q_mean && !s.q_abs_mean, "a failed load left arrays");
    } else {
        size_t n_st = (size_t)s.n_layers * s.n_q_heads * (s.head_dim / 2);
        FZ_CHECK(at + in->n == 32 + n_st * 12, "a load of %zu bytes for %zu statistics",
                 at + in->n, n_st * 3);
        volatile float sink = 0;
        for (size_t i = 0; i < n_st; i++)
            sink += s.q_mean[2 * i] + s.q_mean[2 * i + 1] + s.q_abs_mean[i];
        (void)sink;
    }
    kve_triattention_stats_free(&s);
    unlink(path);
}

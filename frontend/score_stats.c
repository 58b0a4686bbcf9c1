/*
 * score_stats.c — TriAttention's calibration file (docs/SCORERS.md
 * "Calibration file"): little-endian, a 32-byte header, then the float32
 * statistics, nothing after them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_error.h"
#include "kvevict.h"

#define KVE_STATS_MAGIC "KVETRIST"
#define KVE_STATS_VERSION 1u
#define KVE_STATS_HEADER 32u

static uint32_t kve_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t kve_le64(const unsigned char *p)
{
    return (uint64_t)kve_le32(p) | (uint64_t)kve_le32(p + 4) << 32;
}

/* @p n little-endian float32 values from @p f; 0 when the file ends first. */
static int kve_read_floats(FILE *f, float *out, size_t n)
{
    unsigned char buf[4096];
    for (size_t done = 0; done < n;) {
        size_t take = n - done < sizeof buf / 4 ? n - done : sizeof buf / 4;
        if (fread(buf, 4, take, f) != take)
            return 0;
        for (size_t i = 0; i < take; i++) {
            uint32_t v = kve_le32(buf + 4 * i);
            memcpy(&out[done + i], &v, 4);
        }
        done += take;
    }
    return 1;
}

static kve_status kve_stats_body(FILE *f, const char *path, kve_triattention_stats *o)
{
    unsigned char h[KVE_STATS_HEADER];
    KVE_RETURN_ERROR_IF(fread(h, 1, sizeof h, f) != sizeof h, KVE_ERR_INVALID,
                        "path = \"%s\": shorter than the %u-byte header", path, KVE_STATS_HEADER);
    KVE_RETURN_ERROR_IF(memcmp(h, KVE_STATS_MAGIC, 8) != 0, KVE_ERR_INVALID,
                        "path = \"%s\": not a calibration file (magic is not \"%s\")", path,
                        KVE_STATS_MAGIC);
    uint32_t version = kve_le32(h + 8);
    KVE_RETURN_ERROR_IF(version != KVE_STATS_VERSION, KVE_ERR_INVALID,
                        "path = \"%s\": version %u, this library reads version %u", path, version,
                        KVE_STATS_VERSION);
    o->n_layers = kve_le32(h + 12);
    o->n_q_heads = kve_le32(h + 16);
    o->head_dim = kve_le32(h + 20);
    uint64_t theta = kve_le64(h + 24);
    memcpy(&o->rope_theta, &theta, 8);
    KVE_RETURN_ERROR_IF(o->n_layers == 0 || o->n_layers > 65536, KVE_ERR_INVALID,
                        "path = \"%s\": n_layers = %u: must be 1..65536", path, o->n_layers);
    KVE_RETURN_ERROR_IF(o->n_q_heads == 0 || o->n_q_heads > 65536, KVE_ERR_INVALID,
                        "path = \"%s\": n_q_heads = %u: must be 1..65536", path, o->n_q_heads);
    KVE_RETURN_ERROR_IF(o->head_dim < 2 || o->head_dim % 2 || o->head_dim > 2 * KVE_SCORE_MAX_FREQS,
                        KVE_ERR_INVALID, "path = \"%s\": head_dim = %u: must be even, 2..%d", path,
                        o->head_dim, 2 * KVE_SCORE_MAX_FREQS);
    KVE_RETURN_ERROR_IF(!isfinite(o->rope_theta) || o->rope_theta < 0, KVE_ERR_INVALID,
                        "path = \"%s\": rope_theta = %g: must be finite and >= 0", path,
                        o->rope_theta);
    size_t per = (size_t)o->n_layers * o->n_q_heads * (o->head_dim / 2);
    /* The length the header promises, before allocating for it (a seekable
     * file; a pipe is read as far as it goes). */
    long here = ftell(f);
    if (here >= 0 && fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        KVE_RETURN_ERROR_IF(fseek(f, here, SEEK_SET) != 0, KVE_ERR_INVALID,
                            "path = \"%s\": cannot seek back to its statistics", path);
        uint64_t want = (uint64_t)here + (uint64_t)per * 3 * sizeof(float);
        KVE_RETURN_ERROR_IF(end >= 0 && (uint64_t)end != want, KVE_ERR_INVALID,
                            "path = \"%s\": %ld bytes, the header (%u layers x %u query heads x "
                            "head_dim %u) promises %llu",
                            path, end, o->n_layers, o->n_q_heads, o->head_dim,
                            (unsigned long long)want);
    }
    o->q_mean = (float *)malloc(per * 2 * sizeof(float));
    o->q_abs_mean = (float *)malloc(per * sizeof(float));
    KVE_RETURN_ERROR_IF(!o->q_mean || !o->q_abs_mean, KVE_ERR_NOMEM,
                        "path = \"%s\": cannot allocate %zu statistics", path, per * 3);
    KVE_RETURN_ERROR_IF(!kve_read_floats(f, o->q_mean, per * 2) ||
                            !kve_read_floats(f, o->q_abs_mean, per),
                        KVE_ERR_INVALID, "path = \"%s\": truncated: the header promises %zu floats",
                        path, per * 3);
    KVE_RETURN_ERROR_IF(fgetc(f) != EOF, KVE_ERR_INVALID,
                        "path = \"%s\": bytes after the %zu floats the header promises", path,
                        per * 3);
    for (size_t i = 0; i < per * 2; i++)
        KVE_RETURN_ERROR_IF(!isfinite(o->q_mean[i]), KVE_ERR_INVALID,
                            "path = \"%s\": q_mean[%zu] = %g is not finite", path, i,
                            o->q_mean[i]);
    for (size_t i = 0; i < per; i++)
        KVE_RETURN_ERROR_IF(!isfinite(o->q_abs_mean[i]) || o->q_abs_mean[i] < 0, KVE_ERR_INVALID,
                            "path = \"%s\": q_abs_mean[%zu] = %g: must be finite and >= 0", path,
                            i, o->q_abs_mean[i]);
    return KVE_OK;
}

kve_status kve_triattention_stats_load(const char *path, kve_triattention_stats *out)
{
    KVE_RETURN_ERROR_IF(!path, KVE_ERR_NULL, "path is NULL");
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    KVE_RETURN_ERROR_IF(!f, KVE_ERR_INVALID, "path = \"%s\": cannot open it", path);
    kve_status st = kve_stats_body(f, path, out);
    fclose(f);
    if (st != KVE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kve_last_error());
        kve_triattention_stats_free(out);
        return kve_error_set(st, "%s", msg);
    }
    return KVE_OK;
}

kve_status kve_triattention_stats_free(kve_triattention_stats *stats)
{
    if (stats) {
        free(stats->q_mean);
        free(stats->q_abs_mean);
        memset(stats, 0, sizeof *stats);
    }
    return KVE_OK;
}

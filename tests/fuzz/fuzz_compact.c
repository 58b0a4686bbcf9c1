/*
 * fuzz_compact — kve_compact on adversarial descriptors: a KVE_OK must
 * match a plain reference move byte for byte (kept entries to the front in
 * slot order, the slot tables rewritten, every other byte — padding, the
 * tail, evicted lists — untouched); an error must change nothing; an
 * accepted view must truly have no two overlapping entries (checked by
 * brute force), and one built without overlap must be accepted.
 */
#include "fuzz_common.h"

#define MAX_SLOTS 70u

typedef struct {
    size_t stride[4]; /* seq, layer, head, slot */
    size_t span;
    int by_construction; /* 1: no overlap by construction */
} view_shape;

/* Dimensions nested in a random order, each padded a little; sometimes one
 * stride is then shrunk, which may or may not make entries overlap. */
static void pick_shape(fz_bytes *b, const size_t extent[4], size_t entry, view_shape *v)
{
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
        int j = (int)fz_below(b, (uint32_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    size_t inner = entry;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        v->stride[d] = inner + fz_below(b, 3) * (fz_u8(b) & 1 ? 1 : entry);
        inner = v->stride[d] * (extent[d] ? extent[d] : 1);
    }
    v->by_construction = 1;
    if (fz_u8(b) >= 240) {
        int d = (int)fz_below(b, 4);
        v->stride[d] = fz_below(b, (uint32_t)v->stride[d] + 1);
        v->by_construction = 0;
    }
    v->span = entry;
    for (int d = 0; d < 4; d++)
        if (extent[d] > 1)
            v->span += (extent[d] - 1) * v->stride[d];
}

/* Brute force: do two entries of the view overlap? */
static int view_overlaps(const size_t extent[4], const view_shape *v, size_t entry)
{
    size_t n = extent[0] * extent[1] * extent[2] * extent[3], k = 0;
    if (n < 2)
        return 0;
    size_t *off = (size_t *)malloc(n * sizeof *off);
    for (size_t s = 0; s < extent[0]; s++)
        for (size_t l = 0; l < extent[1]; l++)
            for (size_t h = 0; h < extent[2]; h++)
                for (size_t t = 0; t < extent[3]; t++)
                    off[k++] = s * v->stride[0] + l * v->stride[1] + h * v->stride[2] +
                               t * v->stride[3];
    qsort(off, n, sizeof *off, fz_cmp_size);
    int overlap = 0;
    for (size_t i = 1; i < n; i++)
        overlap |= off[i] - off[i - 1] < entry;
    free(off);
    return overlap;
}

static size_t entry_at(const view_shape *v, size_t s, size_t l, size_t h, size_t t)
{
    return s * v->stride[0] + l * v->stride[1] + h * v->stride[2] + t * v->stride[3];
}

/* One decoded compaction: the descriptor, its buffers and snapshots, and
 * the harness's verdicts. */
typedef struct {
    kve_compact_desc d;
    size_t heads, sp_len, ev_len, extent[4];
    uint32_t n, caches; /* slots and caches the harness models */
    int bad, work;      /* work: whether anything can move */
    int out_of_place, overlap, constructed;
    uint64_t rng;
    int32_t *slot_pos, *evicted, *sp0, *ev0;
    uint32_t *n_evicted;
    view_shape shape[2][KVE_MAX_CACHES];
    uint8_t *buf[2][KVE_MAX_CACHES], *snap[2][KVE_MAX_CACHES];
} cp_case;

/* Counts, strides and the tables' buffers. 0: valid but too large to afford. */
static int decode_counts(fz_bytes *in, cp_case *c)
{
    kve_compact_desc *d = &c->d;
    d->n_seqs = fz_below(in, 3);
    d->n_layers = fz_below(in, 3);
    d->n_heads = fz_below(in, 4);
    d->n_slots = fz_count(in, MAX_SLOTS + 1);
    size_t heads = c->heads = (size_t)d->n_seqs * d->n_layers * d->n_heads;
    if (heads && d->n_slots > MAX_SLOTS && d->n_slots <= 0x7fffffffu)
        return 0;
    uint32_t n = c->n = heads && d->n_slots <= MAX_SLOTS ? d->n_slots : 0;
    d->entry_bytes = fz_u8(in) < 250 ? 1 + fz_below(in, 20) : 0;
    d->n_caches = fz_u8(in) < 250 ? 1 + fz_below(in, 3) : fz_below(in, 10);
    c->bad = d->n_slots > 0x7fffffffu || d->entry_bytes == 0 || d->n_caches < 1 ||
             d->n_caches > KVE_MAX_CACHES;
    c->work = !c->bad && heads && n;
    c->caches = c->bad ? 0 : d->n_caches;
    d->slot_pos_stride = n + (fz_u8(in) < 240 ? fz_below(in, 3) : 0) - (fz_u8(in) >= 250 && n);
    d->evicted_stride = n + fz_below(in, 3) - (fz_u8(in) >= 250 && n);
    if (c->work && (d->slot_pos_stride < n || d->evicted_stride == 0))
        c->bad = 1;
    c->sp_len = c->work ? (heads - 1) * d->slot_pos_stride + n : 0;
    c->ev_len = c->work ? (heads - 1) * d->evicted_stride + d->evicted_stride : 0;
    c->slot_pos = (int32_t *)fz_alloc(c->sp_len * 4, 0xee);
    c->evicted = (int32_t *)fz_alloc(c->ev_len * 4, 0xee);
    c->n_evicted = (uint32_t *)fz_alloc(heads * 4, 0);
    c->rng = fz_u64(in);
    return 1;
}

/* Tables: distinct positions (or holes), and evicted lists that are mostly
 * valid and sometimes broken in one place. */
static void decode_tables(fz_bytes *in, cp_case *c)
{
    const kve_compact_desc *d = &c->d;
    uint32_t n = c->n;
    for (size_t i = 0; i < c->heads && !c->bad && n; i++) {
        int32_t *row = c->slot_pos + i * d->slot_pos_stride;
        int32_t *ev = c->evicted + i * d->evicted_stride;
        uint32_t ne = 0;
        for (uint32_t t = 0; t < n; t++)
            row[t] = fz_mix(&c->rng) % 4 == 0 ? -1 : (int32_t)(t * 3 + fz_mix(&c->rng) % 3);
        uint8_t density = fz_u8(in);
        for (uint32_t t = 0; t < n && ne < d->evicted_stride; t++)
            if (row[t] >= 0 && (uint8_t)fz_mix(&c->rng) < density)
                ev[ne++] = (int32_t)t;
        c->n_evicted[i] = ne;
        uint8_t harm = fz_u8(in);
        if (harm >= 248) {
            switch (harm & 7) {
            case 0: c->n_evicted[i] = d->evicted_stride + 1; break;
            case 1: if (ne) ev[fz_mix(&c->rng) % ne] = (int32_t)n; break;
            case 2: if (ne) ev[fz_mix(&c->rng) % ne] = -1; break;
            case 3: if (ne > 1) ev[1] = ev[0]; break;
            case 4: row[fz_mix(&c->rng) % n] = -2 - (int32_t)(fz_mix(&c->rng) % 5); break;
            case 5: if (ne) row[ev[0]] = -1; break;
            case 6: c->n_evicted[i] = n + 1; break;
            default: if (ne > 1) { int32_t x = ev[0]; ev[0] = ev[ne - 1]; ev[ne - 1] = x; } break;
            }
        }
    }
}

/* The reference's own view of validity of the contents. */
static int tables_bad(const cp_case *c)
{
    const kve_compact_desc *d = &c->d;
    uint32_t n = c->n;
    int bad = 0;
    for (size_t i = 0; i < c->heads && !bad && n; i++) {
        const int32_t *row = c->slot_pos + i * d->slot_pos_stride;
        const int32_t *ev = c->evicted + i * d->evicted_stride;
        uint32_t ne = c->n_evicted[i];
        if (ne > n || ne > d->evicted_stride)
            return 1;
        for (uint32_t k = 0; k < ne && !bad; k++)
            bad = ev[k] < 0 || (uint32_t)ev[k] >= n || (k && ev[k] <= ev[k - 1]) || row[ev[k]] < 0;
        for (uint32_t t = 0; t < n && !bad; t++)
            bad = row[t] < -1;
    }
    return bad;
}

/* Each cache's source (and, out of place, destination) view and bytes;
 * rarely an inconsistent in/out-of-place request. */
static void decode_views(fz_bytes *in, cp_case *c)
{
    kve_compact_desc *d = &c->d;
    c->out_of_place = fz_u8(in) & 1;
    c->constructed = 1;
    for (uint32_t k = 0; k < c->caches; k++)
        for (int side = 0; side < 1 + c->out_of_place; side++) {
            view_shape *v = &c->shape[side][k];
            pick_shape(in, c->extent, d->entry_bytes, v);
            if (!c->work)
                v->span = 0;
            if (v->span > (1u << 20))
                v->span = 0, c->bad = 1; /* cannot be valid at these extents */
            c->buf[side][k] = (uint8_t *)fz_alloc(v->span, 0);
            for (size_t i = 0; i < v->span; i++)
                c->buf[side][k][i] = (uint8_t)fz_mix(&c->rng);
            c->overlap |= c->work && view_overlaps(c->extent, v, d->entry_bytes);
            c->constructed &= v->by_construction;
            kve_cache_view *cv = side ? &d->dst[k] : &d->src[k];
            cv->base = c->buf[side][k];
            memcpy(&cv->stride_seq, v->stride, sizeof v->stride);
        }
    uint8_t harm = fz_u8(in);
    if (c->caches > 1 && harm >= 250) {
        if (c->out_of_place)
            d->dst[1 + fz_below(in, c->caches - 1)].base = NULL;
        else
            d->dst[c->caches - 1].base = c->buf[0][0];
        c->bad |= c->work;
    }
    d->slot_pos = c->slot_pos;
    d->evicted = c->evicted;
    d->n_evicted = c->n_evicted;
    /* read last: rarely a required pointer NULL, refused when there is work */
    uint8_t null_sel = fz_u8(in);
    if (null_sel >= 250) {
        switch (null_sel % 4) {
        case 0: d->slot_pos = NULL; break;
        case 1: d->evicted = NULL; break;
        case 2: d->n_evicted = NULL; break;
        default: d->src[fz_below(in, c->caches ? c->caches : 1)].base = NULL; break;
        }
        c->bad |= c->heads && d->n_slots;
    }
}

/* Snapshots: the reference result starts from them. */
static void take_snapshots(cp_case *c)
{
    c->sp0 = (int32_t *)fz_dup(c->slot_pos, c->sp_len * 4);
    c->ev0 = (int32_t *)fz_dup(c->evicted, c->ev_len * 4);
    for (uint32_t k = 0; k < c->caches; k++)
        for (int side = 0; side < 1 + c->out_of_place; side++)
            c->snap[side][k] = (uint8_t *)fz_dup(c->buf[side][k], c->shape[side][k].span);
}

/* The reference move, on the snapshots. */
static void reference_move(cp_case *c)
{
    const kve_compact_desc *d = &c->d;
    int dst_side = c->out_of_place;
    size_t i = 0;
    for (size_t s = 0; s < d->n_seqs; s++)
        for (size_t l = 0; l < d->n_layers; l++)
            for (size_t h = 0; h < d->n_heads; h++, i++) {
                int32_t *row = c->sp0 + i * d->slot_pos_stride;
                const int32_t *ev = c->ev0 + i * d->evicted_stride;
                uint32_t e = 0, k = 0;
                for (uint32_t t = 0; t < c->n; t++) {
                    if (e < c->n_evicted[i] && ev[e] == (int32_t)t) {
                        e++;
                        continue;
                    }
                    if (row[t] < 0)
                        continue;
                    for (uint32_t x = 0; x < c->caches; x++)
                        memmove(c->snap[dst_side][x] + entry_at(&c->shape[dst_side][x], s, l, h, k),
                                c->snap[0][x] + entry_at(&c->shape[0][x], s, l, h, t),
                                d->entry_bytes);
                    row[k++] = row[t];
                }
                for (; k < c->n; k++)
                    row[k] = -1;
            }
}

static void report_overlap(const cp_case *c)
{
    for (uint32_t k = 0; k < c->caches; k++)
        for (int side = 0; side < 1 + c->out_of_place; side++) {
            const view_shape *v = &c->shape[side][k];
            fprintf(stderr, "%s[%u]: extents %zu %zu %zu %zu, strides %zu %zu %zu %zu, entry %zu\n",
                    side ? "dst" : "src", k, c->extent[0], c->extent[1], c->extent[2],
                    c->extent[3], v->stride[0], v->stride[1], v->stride[2], v->stride[3],
                    c->d.entry_bytes);
        }
    FZ_FAIL("a view with overlapping entries was accepted");
}

/* The library's answer against the verdicts, the snapshots, the reference. */
static void check_compact(cp_case *c, kve_status st)
{
    if (st == KVE_OK && c->work && c->overlap)
        report_overlap(c);
    if (!c->bad && !c->overlap && c->constructed)
        FZ_CHECK(st == KVE_OK, "a valid compaction was rejected: %s", kve_status_string(st));
    if (c->bad)
        FZ_CHECK(st != KVE_OK, "an invalid compaction was accepted");
    FZ_CHECK(!memcmp(c->ev0, c->evicted, c->ev_len * 4), "evicted lists were written");
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!memcmp(c->sp0, c->slot_pos, c->sp_len * 4), "an error (%s) changed slot_pos",
                 kve_status_string(st));
        for (uint32_t k = 0; k < c->caches; k++)
            for (int side = 0; side < 1 + c->out_of_place; side++)
                FZ_CHECK(!memcmp(c->snap[side][k], c->buf[side][k], c->shape[side][k].span),
                         "an error (%s) changed a cache", kve_status_string(st));
    } else if (c->work) {
        reference_move(c);
        FZ_CHECK(!memcmp(c->sp0, c->slot_pos, c->sp_len * 4), "slot_pos differs from the reference");
        for (uint32_t k = 0; k < c->caches; k++)
            for (int side = 0; side < 1 + c->out_of_place; side++)
                FZ_CHECK(!memcmp(c->snap[side][k], c->buf[side][k], c->shape[side][k].span),
                         "cache %u (%s) differs from the reference move", k, side ? "dst" : "src");
    }
}

static void free_case(cp_case *c)
{
    for (uint32_t k = 0; k < KVE_MAX_CACHES; k++)
        for (int side = 0; side < 2; side++) {
            free(c->buf[side][k]);
            free(c->snap[side][k]);
        }
    free(c->sp0);
    free(c->ev0);
    free(c->slot_pos);
    free(c->evicted);
    free(c->n_evicted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    cp_case c;
    memset(&c, 0, sizeof c);
    if (!decode_counts(&in, &c))
        return 0; /* valid but too large to afford */
    decode_tables(&in, &c);
    c.bad |= !c.bad && tables_bad(&c);
    const size_t extent[4] = {c.d.n_seqs, c.d.n_layers, c.d.n_heads, c.n};
    memcpy(c.extent, extent, sizeof extent);
    decode_views(&in, &c);
    take_snapshots(&c);
    check_compact(&c, kve_compact(ctx, &c.d));
    free_case(&c);
    return 0;
}

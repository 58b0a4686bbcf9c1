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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    kve_compact_desc d;
    memset(&d, 0, sizeof d);
    d.n_seqs = fz_below(&in, 3);
    d.n_layers = fz_below(&in, 3);
    d.n_heads = fz_below(&in, 4);
    d.n_slots = fz_count(&in, MAX_SLOTS + 1);
    size_t heads = (size_t)d.n_seqs * d.n_layers * d.n_heads;
    if (heads && d.n_slots > MAX_SLOTS && d.n_slots <= 0x7fffffffu)
        return 0; /* valid but too large to afford */
    uint32_t n = heads && d.n_slots <= MAX_SLOTS ? d.n_slots : 0;
    d.entry_bytes = fz_u8(&in) < 250 ? 1 + fz_below(&in, 20) : 0;
    d.n_caches = fz_u8(&in) < 250 ? 1 + fz_below(&in, 3) : fz_below(&in, 10);
    int bad = d.n_slots > 0x7fffffffu || d.entry_bytes == 0 || d.n_caches < 1 ||
              d.n_caches > KVE_MAX_CACHES;
    int work = !bad && heads && n; /* whether anything can move */
    uint32_t caches = bad ? 0 : d.n_caches;
    d.slot_pos_stride = n + (fz_u8(&in) < 240 ? fz_below(&in, 3) : 0) - (fz_u8(&in) >= 250 && n);
    d.evicted_stride = n + fz_below(&in, 3) - (fz_u8(&in) >= 250 && n);
    if (work && (d.slot_pos_stride < n || d.evicted_stride == 0))
        bad = 1;
    size_t sp_len = work ? (heads - 1) * d.slot_pos_stride + n : 0;
    size_t ev_len = work ? (heads - 1) * d.evicted_stride + d.evicted_stride : 0;
    int32_t *slot_pos = (int32_t *)fz_alloc(sp_len * 4, 0xee);
    int32_t *evicted = (int32_t *)fz_alloc(ev_len * 4, 0xee);
    uint32_t *n_evicted = (uint32_t *)fz_alloc(heads * 4, 0);
    uint64_t rng = fz_u64(&in);
    /* Tables: distinct positions (or holes), and evicted lists that are
     * mostly valid and sometimes broken in one place. */
    for (size_t i = 0; i < heads && !bad && n; i++) {
        int32_t *row = slot_pos + i * d.slot_pos_stride;
        int32_t *ev = evicted + i * d.evicted_stride;
        uint32_t ne = 0;
        for (uint32_t t = 0; t < n; t++)
            row[t] = fz_mix(&rng) % 4 == 0 ? -1 : (int32_t)(t * 3 + fz_mix(&rng) % 3);
        uint8_t density = fz_u8(&in);
        for (uint32_t t = 0; t < n && ne < d.evicted_stride; t++)
            if (row[t] >= 0 && (uint8_t)fz_mix(&rng) < density)
                ev[ne++] = (int32_t)t;
        n_evicted[i] = ne;
        uint8_t harm = fz_u8(&in);
        if (harm >= 248) {
            switch (harm & 7) {
            case 0: n_evicted[i] = d.evicted_stride + 1; break;
            case 1: if (ne) ev[fz_mix(&rng) % ne] = (int32_t)n; break;
            case 2: if (ne) ev[fz_mix(&rng) % ne] = -1; break;
            case 3: if (ne > 1) ev[1] = ev[0]; break;
            case 4: row[fz_mix(&rng) % n] = -2 - (int32_t)(fz_mix(&rng) % 5); break;
            case 5: if (ne) row[ev[0]] = -1; break;
            case 6: n_evicted[i] = n + 1; break;
            default: if (ne > 1) { int32_t x = ev[0]; ev[0] = ev[ne - 1]; ev[ne - 1] = x; } break;
            }
        }
    }
    /* The reference's own view of validity of the contents. */
    for (size_t i = 0; i < heads && !bad && n; i++) {
        const int32_t *row = slot_pos + i * d.slot_pos_stride;
        const int32_t *ev = evicted + i * d.evicted_stride;
        uint32_t ne = n_evicted[i];
        if (ne > n || ne > d.evicted_stride) {
            bad = 1;
            break;
        }
        for (uint32_t k = 0; k < ne && !bad; k++)
            bad = ev[k] < 0 || (uint32_t)ev[k] >= n || (k && ev[k] <= ev[k - 1]) || row[ev[k]] < 0;
        for (uint32_t t = 0; t < n && !bad; t++)
            bad = row[t] < -1;
    }
    const size_t extent[4] = {d.n_seqs, d.n_layers, d.n_heads, n};
    int out_of_place = fz_u8(&in) & 1;
    view_shape shape[2][KVE_MAX_CACHES];
    uint8_t *buf[2][KVE_MAX_CACHES] = {{0}};
    int overlap = 0, constructed = 1;
    for (uint32_t c = 0; c < caches; c++)
        for (int side = 0; side < 1 + out_of_place; side++) {
            view_shape *v = &shape[side][c];
            pick_shape(&in, extent, d.entry_bytes, v);
            if (!work)
                v->span = 0;
            if (v->span > (1u << 20))
                v->span = 0, bad = 1; /* cannot be valid at these extents */
            buf[side][c] = (uint8_t *)fz_alloc(v->span, 0);
            for (size_t k = 0; k < v->span; k++)
                buf[side][c][k] = (uint8_t)fz_mix(&rng);
            overlap |= work && view_overlaps(extent, v, d.entry_bytes);
            constructed &= v->by_construction;
            kve_cache_view *cv = side ? &d.dst[c] : &d.src[c];
            cv->base = buf[side][c];
            memcpy(&cv->stride_seq, v->stride, sizeof v->stride);
        }
    uint8_t harm = fz_u8(&in);
    if (caches > 1 && harm >= 250) { /* an inconsistent in/out-of-place request */
        if (out_of_place)
            d.dst[1 + fz_below(&in, caches - 1)].base = NULL;
        else
            d.dst[caches - 1].base = buf[0][0];
        bad |= work;
    }
    d.slot_pos = slot_pos;
    d.evicted = evicted;
    d.n_evicted = n_evicted;

    /* Snapshots: the reference result starts from them. */
    int32_t *sp0 = (int32_t *)fz_dup(slot_pos, sp_len * 4);
    int32_t *ev0 = (int32_t *)fz_dup(evicted, ev_len * 4);
    uint8_t *snap[2][KVE_MAX_CACHES] = {{0}};
    for (uint32_t c = 0; c < caches; c++)
        for (int side = 0; side < 1 + out_of_place; side++)
            snap[side][c] = (uint8_t *)fz_dup(buf[side][c], shape[side][c].span);

    kve_status st = kve_compact(ctx, &d);
    if (st == KVE_OK && work && overlap) {
        for (uint32_t c = 0; c < caches; c++)
            for (int side = 0; side < 1 + out_of_place; side++)
                fprintf(stderr, "%s[%u]: extents %zu %zu %zu %zu, strides %zu %zu %zu %zu, entry %zu\n",
                        side ? "dst" : "src", c, extent[0], extent[1], extent[2], extent[3],
                        shape[side][c].stride[0], shape[side][c].stride[1], shape[side][c].stride[2],
                        shape[side][c].stride[3], d.entry_bytes);
        FZ_FAIL("a view with overlapping entries was accepted");
    }
    if (!bad && !overlap && constructed)
        FZ_CHECK(st == KVE_OK, "a valid compaction was rejected: %s", kve_status_string(st));
    if (bad)
        FZ_CHECK(st != KVE_OK, "an invalid compaction was accepted");
    FZ_CHECK(!memcmp(ev0, evicted, ev_len * 4), "evicted lists were written");
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!memcmp(sp0, slot_pos, sp_len * 4), "an error (%s) changed slot_pos",
                 kve_status_string(st));
        for (uint32_t c = 0; c < caches; c++)
            for (int side = 0; side < 1 + out_of_place; side++)
                FZ_CHECK(!memcmp(snap[side][c], buf[side][c], shape[side][c].span),
                         "an error (%s) changed a cache", kve_status_string(st));
    } else if (work) {
        /* The reference move, on the snapshots. */
        int dst_side = out_of_place;
        size_t i = 0;
        for (size_t s = 0; s < d.n_seqs; s++)
            for (size_t l = 0; l < d.n_layers; l++)
                for (size_t h = 0; h < d.n_heads; h++, i++) {
                    int32_t *row = sp0 + i * d.slot_pos_stride;
                    const int32_t *ev = ev0 + i * d.evicted_stride;
                    uint32_t e = 0, k = 0;
                    for (uint32_t t = 0; t < n; t++) {
                        if (e < n_evicted[i] && ev[e] == (int32_t)t) {
                            e++;
                            continue;
                        }
                        if (row[t] < 0)
                            continue;
                        for (uint32_t c = 0; c < caches; c++)
                            memmove(snap[dst_side][c] + entry_at(&shape[dst_side][c], s, l, h, k),
                                    snap[0][c] + entry_at(&shape[0][c], s, l, h, t),
                                    d.entry_bytes);
                        row[k++] = row[t];
                    }
                    for (; k < n; k++)
                        row[k] = -1;
                }
        FZ_CHECK(!memcmp(sp0, slot_pos, sp_len * 4), "slot_pos differs from the reference");
        for (uint32_t c = 0; c < caches; c++)
            for (int side = 0; side < 1 + out_of_place; side++)
                FZ_CHECK(!memcmp(snap[side][c], buf[side][c], shape[side][c].span),
                         "cache %u (%s) differs from the reference move", c, side ? "dst" : "src");
    }
    for (uint32_t c = 0; c < caches; c++)
        for (int side = 0; side < 2; side++) {
            free(buf[side][c]);
            free(snap[side][c]);
        }
    free(sp0);
    free(ev0);
    free(slot_pos);
    free(evicted);
    free(n_evicted);
    return 0;
}

/* validate.c — the argument checks of the public API (shapes, pointers,
 * strides, ranges, overlaps), done once before any backend runs. What the
 * tables hold is checked by the backend that reads them, in the pass that
 * reads them (the CPU: inside the AVX2 and AVX-512 hashing pass, else
 * kernels_cpu/check_rows.c just before the head's eviction; a GPU: on the
 * device). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kve_check.h"
#include "kve_error.h"
#include "kve_validate.h"

static int kve_mul_overflows(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

/* KVE_SCORED batches: not with KVE_PERSISTENT, scores given, stride >= n_slots. */
kve_status kve_validate_batch_scores(const kve_batch *b, size_t heads)
{
    if (!(b->flags & KVE_SCORED))
        return KVE_OK;
    KVE_RETURN_ERROR_IF(b->flags & KVE_PERSISTENT, KVE_ERR_INVALID,
                        "batch.flags = 0x%x: KVE_SCORED and KVE_PERSISTENT exclude each other "
                        "(scores have no persistent key)",
                        b->flags);
    if (!heads || !b->n_slots)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!b->scores, KVE_ERR_NULL, "batch.scores is NULL (flags has KVE_SCORED)");
    KVE_RETURN_ERROR_IF(b->scores_stride < b->n_slots, KVE_ERR_RANGE,
                        "batch.scores_stride = %zu: must be >= n_slots = %u", b->scores_stride,
                        b->n_slots);
    size_t span;
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, b->scores_stride, b->n_slots, sizeof(float), &span),
                        KVE_ERR_OVERFLOW,
                        "batch.scores_stride = %zu: %zu heads overflow the address space",
                        b->scores_stride, heads);
    return KVE_OK;
}

kve_status kve_validate_batch(const kve_batch *b, size_t *out_heads)
{
    KVE_RETURN_ERROR_IF(!b, KVE_ERR_NULL, "batch is NULL");
    const uint32_t known = KVE_KEY_FLAGS | KVE_TRUSTED_SLOTS | KVE_SCORED;
    KVE_RETURN_ERROR_IF(b->flags & ~known, KVE_ERR_INVALID, "batch.flags = 0x%x: unknown bits 0x%x",
                        b->flags, b->flags & ~known);
    size_t heads;
    KVE_RETURN_ERROR_IF(kve_mul_overflows((size_t)b->n_seqs * b->n_layers, b->n_heads, &heads),
                        KVE_ERR_OVERFLOW, "batch: n_seqs %u x n_layers %u x n_heads %u overflows",
                        b->n_seqs, b->n_layers, b->n_heads);
    KVE_RETURN_ERROR_IF(b->n_layers && b->layer_offset > UINT32_MAX - (b->n_layers - 1),
                        KVE_ERR_OVERFLOW,
                        "batch.layer_offset = %u: layer_offset + n_layers - 1 exceeds 2^32-1",
                        b->layer_offset);
    KVE_RETURN_ERROR_IF(b->n_heads && b->head_offset > UINT32_MAX - (b->n_heads - 1),
                        KVE_ERR_OVERFLOW,
                        "batch.head_offset = %u: head_offset + n_heads - 1 exceeds 2^32-1",
                        b->head_offset);
    KVE_TRY(kve_check_i32("batch.n_slots", b->n_slots));
    KVE_TRY(kve_check_i32("batch.budget", b->budget));
    KVE_TRY(kve_check_i32("batch.window", b->window));
    KVE_RETURN_ERROR_IF(b->n_seqs && !b->seqs, KVE_ERR_NULL, "batch.seqs is NULL (n_seqs = %u)",
                        b->n_seqs);
    if (heads && b->n_slots) {
        KVE_RETURN_ERROR_IF(!b->slot_pos, KVE_ERR_NULL, "batch.slot_pos is NULL");
        KVE_RETURN_ERROR_IF(b->slot_pos_stride < b->n_slots, KVE_ERR_ALIAS,
                            "batch.slot_pos_stride = %zu < n_slots = %u: head rows overlap",
                            b->slot_pos_stride, b->n_slots);
        size_t span;
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, b->slot_pos_stride, b->n_slots, sizeof(int32_t), &span),
                            KVE_ERR_OVERFLOW,
                            "batch.slot_pos_stride = %zu: %zu heads overflow the address space",
                            b->slot_pos_stride, heads);
    }
    KVE_TRY(kve_validate_batch_scores(b, heads));
    *out_heads = heads;
    return KVE_OK;
}

typedef struct {
    const char *name;
    const char *lo;
    size_t bytes;
} kve_range;

static kve_status kve_check_disjoint(const kve_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (!r[i].bytes || !r[j].bytes)
                continue;
            /* integer addresses, ends saturated: a span too large for the
             * address space (its stride is refused later) must not wrap */
            uintptr_t li = (uintptr_t)r[i].lo, lj = (uintptr_t)r[j].lo;
            uintptr_t ei = r[i].bytes > UINTPTR_MAX - li ? UINTPTR_MAX : li + r[i].bytes;
            uintptr_t ej = r[j].bytes > UINTPTR_MAX - lj ? UINTPTR_MAX : lj + r[j].bytes;
            int overlap = li < ej && lj < ei;
            KVE_RETURN_ERROR_IF(overlap, KVE_ERR_ALIAS, "%s (%p, %zu bytes) overlaps %s (%p, %zu bytes)",
                                r[i].name, (const void *)r[i].lo, r[i].bytes, r[j].name,
                                (const void *)r[j].lo, r[j].bytes);
        }
    return KVE_OK;
}

kve_status kve_validate_evict_out(const kve_batch *b, size_t heads, const kve_evict_out *o)
{
    KVE_RETURN_ERROR_IF(!o, KVE_ERR_NULL, "out is NULL");
    if (heads == 0)
        return KVE_OK;
    size_t max_evicted = b->n_slots > b->budget ? (size_t)(b->n_slots - b->budget) : 0;
    size_t min_stride = max_evicted ? max_evicted : 1;
    KVE_RETURN_ERROR_IF(!o->evicted, KVE_ERR_NULL, "out.evicted is NULL");
    KVE_RETURN_ERROR_IF(!o->n_evicted, KVE_ERR_NULL, "out.n_evicted is NULL");
    KVE_RETURN_ERROR_IF(!o->n_kept, KVE_ERR_NULL, "out.n_kept is NULL");
    KVE_RETURN_ERROR_IF(o->evicted_stride < min_stride, KVE_ERR_RANGE,
                        "out.evicted_stride = %zu: must be >= max(1, n_slots - budget) = %zu",
                        o->evicted_stride, min_stride);
    KVE_RETURN_ERROR_IF(o->kept && o->kept_stride < b->n_slots, KVE_ERR_RANGE,
                        "out.kept_stride = %zu: must be >= n_slots = %u", o->kept_stride,
                        b->n_slots);
    size_t ev_span = 0, kept_span = 0, in_span = 0;
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, o->evicted_stride, max_evicted, 4, &ev_span),
                        KVE_ERR_OVERFLOW, "out.evicted_stride = %zu overflows over %zu heads",
                        o->evicted_stride, heads);
    if (o->kept)
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, o->kept_stride, b->n_slots, 4, &kept_span),
                            KVE_ERR_OVERFLOW, "out.kept_stride = %zu overflows over %zu heads",
                            o->kept_stride, heads);
    KVE_RETURN_ERROR_IF(heads > SIZE_MAX / 8, KVE_ERR_OVERFLOW, "%zu heads overflow", heads);
    size_t sc_span = 0;
    if (b->n_slots)
        kve_rows_span(heads, b->slot_pos_stride, b->n_slots, 4, &in_span);
    if (b->n_slots && (b->flags & KVE_SCORED))
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, b->scores_stride, b->n_slots, 4, &sc_span),
                            KVE_ERR_OVERFLOW, "batch.scores_stride = %zu overflows over %zu heads",
                            b->scores_stride, heads);
    const kve_range r[] = {
        {"batch.slot_pos", (const char *)b->slot_pos, in_span * 4},
        {"out.evicted", (const char *)o->evicted, ev_span * 4},
        {"out.n_evicted", (const char *)o->n_evicted, heads * 4},
        {"out.n_kept", (const char *)o->n_kept, heads * 4},
        {"out.head_flags", (const char *)o->head_flags, o->head_flags ? heads : 0},
        {"out.kept", (const char *)o->kept, kept_span * 4},
        {"out.round_digest", (const char *)o->round_digest, o->round_digest ? heads * 8 : 0},
        {"out.run_digest", (const char *)o->run_digest, o->run_digest ? (size_t)b->n_seqs * 8 : 0},
        {"batch.scores", (const char *)b->scores, sc_span * 4},
    };
    return kve_check_disjoint(r, sizeof r / sizeof r[0]);
}

/* ---- compaction --------------------------------------------------------- */

kve_status kve_view_span(const char *what, const size_t extent[4], const size_t stride[4],
                         size_t entry_bytes, size_t *out_span)
{
    int order[4] = {0, 1, 2, 3};
    /* Sort the dimensions by stride; each must step past all inner ones. */
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    static const char *const dim_names[4] = {"stride_seq", "stride_layer", "stride_head",
                                             "stride_slot"};
    size_t span = entry_bytes;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (extent[d] <= 1)
            continue;
        KVE_RETURN_ERROR_IF(stride[d] < span, KVE_ERR_ALIAS,
                            "%s.%s = %zu: entries overlap (needs >= %zu bytes)", what,
                            dim_names[d], stride[d], span);
        KVE_RETURN_ERROR_IF(kve_rows_span(extent[d], stride[d], span, 1, &span),
                            KVE_ERR_OVERFLOW, "%s.%s = %zu overflows the address space", what,
                            dim_names[d], stride[d]);
    }
    *out_span = span;
    return KVE_OK;
}

kve_status kve_validate_compact(const kve_compact_desc *d, size_t *out_heads)
{
    KVE_RETURN_ERROR_IF(!d, KVE_ERR_NULL, "desc is NULL");
    size_t heads;
    KVE_RETURN_ERROR_IF(kve_mul_overflows((size_t)d->n_seqs * d->n_layers, d->n_heads, &heads),
                        KVE_ERR_OVERFLOW, "desc: n_seqs %u x n_layers %u x n_heads %u overflows",
                        d->n_seqs, d->n_layers, d->n_heads);
    KVE_RETURN_ERROR_IF(d->n_slots > KVE_I32_MAX, KVE_ERR_RANGE,
                        "desc.n_slots = %u: must be <= 2^31-1", d->n_slots);
    KVE_RETURN_ERROR_IF(d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES, KVE_ERR_RANGE,
                        "desc.n_caches = %u: must be 1..%d", d->n_caches, KVE_MAX_CACHES);
    KVE_RETURN_ERROR_IF(d->entry_bytes == 0, KVE_ERR_RANGE, "desc.entry_bytes = 0: must be > 0");
    *out_heads = heads;
    if (heads == 0 || d->n_slots == 0)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!d->slot_pos, KVE_ERR_NULL, "desc.slot_pos is NULL");
    KVE_RETURN_ERROR_IF(!d->evicted, KVE_ERR_NULL, "desc.evicted is NULL");
    KVE_RETURN_ERROR_IF(!d->n_evicted, KVE_ERR_NULL, "desc.n_evicted is NULL");
    KVE_RETURN_ERROR_IF(d->slot_pos_stride < d->n_slots, KVE_ERR_ALIAS,
                        "desc.slot_pos_stride = %zu < n_slots = %u: head rows overlap",
                        d->slot_pos_stride, d->n_slots);
    KVE_RETURN_ERROR_IF(d->evicted_stride == 0, KVE_ERR_RANGE,
                        "desc.evicted_stride = 0: must be >= 1");
    size_t sp_span, ev_span;
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, d->slot_pos_stride, d->n_slots, 4, &sp_span),
                        KVE_ERR_OVERFLOW, "desc.slot_pos_stride = %zu overflows", d->slot_pos_stride);
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, d->evicted_stride, d->evicted_stride, 4, &ev_span),
                        KVE_ERR_OVERFLOW, "desc.evicted_stride = %zu overflows", d->evicted_stride);
    const size_t extent[4] = {d->n_seqs, d->n_layers, d->n_heads, d->n_slots};
    int out_of_place = d->dst[0].base != NULL;
    size_t spans[KVE_MAX_CACHES][2];
    for (uint32_t c = 0; c < d->n_caches; c++) {
        for (int side = 0; side < 1 + out_of_place; side++) {
            const kve_cache_view *v = side ? &d->dst[c] : &d->src[c];
            char what[16];
            snprintf(what, sizeof what, "%s[%u]", side ? "dst" : "src", c);
            KVE_RETURN_ERROR_IF(!v->base, KVE_ERR_NULL, "desc.%s.base is NULL%s", what,
                                side ? " (dst[0] is set, so every dst must be)" : "");
            const size_t stride[4] = {v->stride_seq, v->stride_layer, v->stride_head,
                                      v->stride_slot};
            KVE_TRY(kve_view_span(what, extent, stride, d->entry_bytes, &spans[c][side]));
        }
        if (!out_of_place)
            KVE_RETURN_ERROR_IF(d->dst[c].base != NULL, KVE_ERR_INVALID,
                                "desc.dst[%u].base is set but dst[0].base is NULL: give every dst "
                                "or none",
                                c);
    }
    if (out_of_place)
        for (uint32_t c = 0; c < d->n_caches; c++)
            for (uint32_t s = 0; s < d->n_caches; s++) {
                const char *a = (const char *)d->dst[c].base, *b = (const char *)d->src[s].base;
                KVE_RETURN_ERROR_IF(a < b + spans[s][0] && b < a + spans[c][1], KVE_ERR_ALIAS,
                                    "desc.dst[%u] (%p, %zu bytes) overlaps desc.src[%u] (%p, %zu "
                                    "bytes)",
                                    c, (const void *)a, spans[c][1], s, (const void *)b,
                                    spans[s][0]);
            }
    return KVE_OK;
}

kve_status kve_validate_compact_contents(const kve_compact_desc *d, size_t heads)
{
    if (heads == 0 || d->n_slots == 0)
        return KVE_OK;
    for (size_t i = 0; i < heads; i++) {
        uint32_t ne = d->n_evicted[i];
        KVE_RETURN_ERROR_IF(ne > d->n_slots || ne > d->evicted_stride, KVE_ERR_RANGE,
                            "desc.n_evicted[%zu] = %u: exceeds n_slots %u or evicted_stride %zu",
                            i, ne, d->n_slots, d->evicted_stride);
        const int32_t *ev = d->evicted + i * d->evicted_stride;
        const int32_t *row = d->slot_pos + i * d->slot_pos_stride;
        for (uint32_t k = 0; k < ne; k++) {
            KVE_RETURN_ERROR_IF(ev[k] < 0 || (uint32_t)ev[k] >= d->n_slots, KVE_ERR_RANGE,
                                "desc.evicted[head %zu][%u] = %d: not a slot in 0..%u", i, k,
                                ev[k], d->n_slots - 1);
            KVE_RETURN_ERROR_IF(k && ev[k] <= ev[k - 1], KVE_ERR_INVALID,
                                "desc.evicted[head %zu][%u] = %d: evicted slots must be strictly "
                                "ascending (previous %d)",
                                i, k, ev[k], ev[k - 1]);
            KVE_RETURN_ERROR_IF(row[ev[k]] < 0, KVE_ERR_INVALID,
                                "desc.evicted[head %zu][%u] = slot %d, which is empty "
                                "(slot_pos = %d)",
                                i, k, ev[k], row[ev[k]]);
        }
        for (uint32_t t = 0; t < d->n_slots; t++)
            KVE_RETURN_ERROR_IF(row[t] < -1, KVE_ERR_RANGE,
                                "desc.slot_pos[head %zu][slot %u] = %d: must be >= -1", i, t,
                                row[t]);
    }
    return KVE_OK;
}

/*
 * cache_write.c — kve_cache_write: validate once (shape, element types,
 * strides, overlaps entry by entry, and on host-memory backends every row,
 * slot and page id), resolve each cache's part (kve_cache_part), then call
 * the backend's cache_write op.
 */
#include <stdint.h>
#include <stdio.h>

#include "cache_write_body.h"
#include "kve_backend.h"
#include "kve_check.h"
#include "kve_error.h"

static int kve_mul(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }

static const char *const kve_dtype_names[] = {"raw", "f32", "f16", "bf16", "fp8_e4m3",
                                               "fp8_e5m2"};

/* Bytes of cache c's source and destination entries (part resolved). */
static size_t kve_src_entry(const kve_cache_part *p)
{
    return (size_t)p->dim * kve_dtype_size(p->src_dtype);
}
static size_t kve_dst_entry(const kve_cache_part *p)
{
    return (size_t)p->dim * kve_dtype_size(p->dst_dtype);
}

static size_t kve_or(size_t a, size_t b) { return a ? a : b; }

/* A destination is a lattice of elements in four dims: page, slot, head
 * and the entry's element (dst_stride_elem), each with its extent and
 * byte stride (part resolved). */
#define KVE_DST_DIMS 4
static void kve_dst_dims(const kve_cache_write_desc *r, uint32_t c, size_t *extent, size_t *stride)
{
    const kve_cache_part *p = &r->part[c];
    extent[0] = r->pages.n_pages;
    extent[1] = r->pages.page_size;
    extent[2] = r->n_heads;
    extent[3] = p->dim;
    stride[0] = p->dst_stride_page;
    stride[1] = p->dst_stride_slot;
    stride[2] = p->dst_stride_head;
    stride[3] = p->dst_stride_elem;
}

static void kve_cache_write_resolve(const kve_cache_write_desc *in, kve_cache_write_desc *out)
{
    *out = *in;
    size_t h = in->n_heads, ps = in->pages.page_size;
    int nhd = in->layout == KVE_LAYOUT_NHD;
    for (uint32_t c = 0; c < in->n_caches; c++) {
        kve_cache_part *p = &out->part[c];
        if (!p->dim)
            p->dim = (uint32_t)(in->entry_bytes / kve_dtype_size(p->dst_dtype));
        size_t se = kve_src_entry(p), e = kve_dst_entry(p);
        p->src_stride_head = kve_or(p->src_stride_head, kve_or(in->src_stride_head, se));
        p->src_stride_token = kve_or(p->src_stride_token, kve_or(in->src_stride_token, h * se));
        p->dst_stride_head =
            kve_or(p->dst_stride_head, kve_or(in->dst_stride_head, nhd ? e : ps * e));
        p->dst_stride_slot =
            kve_or(p->dst_stride_slot, kve_or(in->dst_stride_slot, nhd ? h * e : e));
        p->dst_stride_page = kve_or(p->dst_stride_page, kve_or(in->dst_stride_page, ps * h * e));
        p->dst_stride_elem = kve_or(p->dst_stride_elem, kve_dtype_size(p->dst_dtype));
    }
    /* The desc-wide fields mirror cache 0 for callers that read them. */
    out->entry_bytes = kve_dst_entry(&out->part[0]);
    out->src_stride_token = out->part[0].src_stride_token;
    out->src_stride_head = out->part[0].src_stride_head;
    out->dst_stride_page = out->part[0].dst_stride_page;
    out->dst_stride_slot = out->part[0].dst_stride_slot;
    out->dst_stride_head = out->part[0].dst_stride_head;
}

/* The caller's name and value of cache @p c's destination stride @p i
 * (page, slot, head, elem): its part's field, the desc-wide one (none for
 * elem), or the dense value taken where both are 0. */
static const char *kve_dst_stride_name(const kve_cache_write_desc *d, const kve_cache_write_desc *r,
                                       uint32_t c, int i, char *buf, size_t size)
{
    static const char *const names[KVE_DST_DIMS] = {"page", "slot", "head", "elem"};
    const kve_cache_part *p = &d->part[c], *q = &r->part[c];
    const size_t own[KVE_DST_DIMS] = {p->dst_stride_page, p->dst_stride_slot, p->dst_stride_head,
                                      p->dst_stride_elem},
                 wide[KVE_DST_DIMS] = {d->dst_stride_page, d->dst_stride_slot,
                                       d->dst_stride_head, 0},
                 used[KVE_DST_DIMS] = {q->dst_stride_page, q->dst_stride_slot,
                                       q->dst_stride_head, q->dst_stride_elem};
    if (own[i])
        snprintf(buf, size, "desc.part[%u].dst_stride_%s = %zu", c, names[i], own[i]);
    else if (wide[i])
        snprintf(buf, size, "desc.dst_stride_%s = %zu", names[i], wide[i]);
    else
        snprintf(buf, size, "desc.dst_stride_%s = 0 (the dense %zu bytes of cache %u)", names[i],
                 used[i], c);
    return buf;
}

/* Bytes spanned by cache @p c's destination (kve_rows_span per dim, inner
 * first, from one element); KVE_ERR_ALIAS when its strides do not nest (in
 * increasing order each must step past every inner element: else entries
 * overlap or interleave), named as the caller set them (@p d). */
static kve_status kve_dst_span(const kve_cache_write_desc *d, const kve_cache_write_desc *r,
                               uint32_t c, size_t *out)
{
    const kve_cache_part *p = &r->part[c];
    size_t extent[KVE_DST_DIMS], stride[KVE_DST_DIMS];
    kve_dst_dims(r, c, extent, stride);
    int order[KVE_DST_DIMS] = {0, 1, 2, 3};
    for (int i = 1; i < KVE_DST_DIMS; i++)
        for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t span = kve_dtype_size(p->dst_dtype);
    int inner = -1; /* the widest dim nested so far */
    char a[96], b[96];
    for (int k = 0; k < KVE_DST_DIMS; k++) {
        int i = order[k];
        if (extent[i] <= 1)
            continue;
        KVE_RETURN_ERROR_IF(stride[i] < span && inner < 0, KVE_ERR_ALIAS,
                            "%s: below cache %u's element of %zu bytes: its entries overlap",
                            kve_dst_stride_name(d, r, c, i, a, sizeof a), c, span);
        KVE_RETURN_ERROR_IF(stride[i] < span, KVE_ERR_ALIAS,
                            "%s and %s interleave: cache %u's entries overlap or interleave (a "
                            "stride must step past the %zu bytes of the entries inside it)",
                            kve_dst_stride_name(d, r, c, i, a, sizeof a),
                            kve_dst_stride_name(d, r, c, inner, b, sizeof b), c, span);
        KVE_RETURN_ERROR_IF(kve_rows_span(extent[i], stride[i], span, 1, &span), KVE_ERR_OVERFLOW,
                            "%s overflows the address space",
                            kve_dst_stride_name(d, r, c, i, a, sizeof a));
        inner = i;
    }
    *out = span;
    return KVE_OK;
}

static int kve_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return na && nb && x < y + nb && y < x + na;
}

/* Whether some entry of cache a (ea bytes) and some entry of cache b (eb
 * bytes) share a byte, when both lie on one lattice: extent[i] entries
 * stride[i] bytes apart in each of n dims, dims sorted by descending stride
 * and nested (each stride past the span of the inner ones, kve_span), b's
 * base delta bytes after a's. Entries meet when delta + sum q_i stride_i
 * lies in (-eb, ea) for some |q_i| < extent_i; nesting leaves at most three
 * q_i per dim to try. */
static int kve_lattice_meet(__int128 delta, size_t ea, size_t eb, int n, const size_t *extent,
                            const size_t *stride, long *budget)
{
    if (n == 0)
        return delta > -(__int128)eb && delta < (__int128)ea;
    if (extent[0] <= 1)
        return kve_lattice_meet(delta, ea, eb, n - 1, extent + 1, stride + 1, budget);
    if (--*budget < 0)
        return 1; /* too many points to try: taken as a meet (a refusal, never a miss) */
    __int128 reach = 0, s = (__int128)stride[0], top = (__int128)extent[0] - 1;
    for (int i = 1; i < n; i++)
        reach += ((__int128)(extent[i] ? extent[i] : 1) - 1) * (__int128)stride[i];
    /* q * s in (-eb - reach - delta, ea + reach - delta) */
    __int128 lo = -(__int128)eb - reach - delta, hi = (__int128)ea + reach - delta;
    __int128 q0 = lo / s - (lo % s < 0) + 1, q1 = hi / s + (hi % s > 0) - 1; /* floor+1, ceil-1 */
    q0 = q0 < -top ? -top : q0;
    q1 = q1 > top ? top : q1;
    for (__int128 q = q0; q <= q1; q++)
        if (kve_lattice_meet(delta + q * s, ea, eb, n - 1, extent + 1, stride + 1, budget))
            return 1;
    return 0;
}

/* Whether destinations c and k share a byte. The dims where both have the
 * same extent and stride form a common lattice; each cache's other dims
 * fill a block of bytes from its lattice point (its hull: the span of those
 * dims from one element). Two hulls that never meet on the common lattice
 * (kve_lattice_meet) keep the bytes apart: entry by entry for one tensor
 * holding both with equal strides, block by block for vLLM's CPU cache (K
 * transposed and V side by side in a block). Else they are taken to meet. */
static int kve_dst_meet(const kve_cache_write_desc *r, uint32_t c, uint32_t k, size_t span_c,
                        size_t span_k)
{
    if (!kve_overlap(r->dst[c], span_c, r->dst[k], span_k))
        return 0;
    size_t ea[KVE_DST_DIMS], sa[KVE_DST_DIMS], eb[KVE_DST_DIMS], sb[KVE_DST_DIMS];
    kve_dst_dims(r, c, ea, sa);
    kve_dst_dims(r, k, eb, sb);
    size_t ext[KVE_DST_DIMS], st[KVE_DST_DIMS];
    __int128 hull_a = kve_dtype_size(r->part[c].dst_dtype);
    __int128 hull_b = kve_dtype_size(r->part[k].dst_dtype);
    int n = 0;
    for (int i = 0; i < KVE_DST_DIMS; i++) {
        if (ea[i] > 1 && ea[i] == eb[i] && sa[i] == sb[i]) {
            ext[n] = ea[i];
            st[n++] = sa[i];
            continue;
        }
        hull_a += ea[i] > 1 ? (__int128)(ea[i] - 1) * sa[i] : 0;
        hull_b += eb[i] > 1 ? (__int128)(eb[i] - 1) * sb[i] : 0;
    }
    if (hull_a > (__int128)SIZE_MAX || hull_b > (__int128)SIZE_MAX)
        return 1;
    for (int i = 1; i < n; i++) /* descending strides */
        for (int j = i; j > 0 && st[j] > st[j - 1]; j--) {
            size_t t = st[j];
            st[j] = st[j - 1];
            st[j - 1] = t;
            t = ext[j];
            ext[j] = ext[j - 1];
            ext[j - 1] = t;
        }
    __int128 delta = (__int128)(intptr_t)r->dst[k] - (__int128)(intptr_t)r->dst[c];
    long budget = 1L << 20;
    return kve_lattice_meet(delta, (size_t)hull_a, (size_t)hull_b, n, ext, st, &budget);
}

static int kve_dtype_valid(kve_dtype t) { return t >= KVE_DTYPE_RAW && t <= KVE_DTYPE_FP8_E5M2; }

/* Cache c's types, conversion, scale and entry size (before resolving). */
static kve_status kve_check_part(const kve_cache_write_desc *d, uint32_t c)
{
    const kve_cache_part *p = &d->part[c];
    KVE_RETURN_ERROR_IF(!kve_dtype_valid(p->src_dtype), KVE_ERR_INVALID,
                        "desc.part[%u].src_dtype = %d: not a kve_dtype value", c,
                        (int)p->src_dtype);
    KVE_RETURN_ERROR_IF(!kve_dtype_valid(p->dst_dtype), KVE_ERR_INVALID,
                        "desc.part[%u].dst_dtype = %d: not a kve_dtype value", c,
                        (int)p->dst_dtype);
    const char *sn = kve_dtype_names[p->src_dtype], *dn = kve_dtype_names[p->dst_dtype];
    KVE_RETURN_ERROR_IF(p->convert > 1, KVE_ERR_INVALID,
                        "desc.part[%u].convert = %u: must be 0 or 1", c, p->convert);
    KVE_RETURN_ERROR_IF(!p->convert && p->src_dtype != p->dst_dtype, KVE_ERR_INVALID,
                        "desc.part[%u]: source type %s and cache type %s differ, and convert is 0 "
                        "(set convert = 1 to convert)",
                        c, sn, dn);
    int raw = p->src_dtype == KVE_DTYPE_RAW || p->dst_dtype == KVE_DTYPE_RAW;
    KVE_RETURN_ERROR_IF(p->convert && raw, KVE_ERR_INVALID,
                        "desc.part[%u]: convert = 1 from %s to %s: raw bytes have no type to "
                        "convert",
                        c, sn, dn);
    KVE_RETURN_ERROR_IF(
        p->scale && (!p->convert || (p->dst_dtype != KVE_DTYPE_FP8_E4M3 &&
                                     p->dst_dtype != KVE_DTYPE_FP8_E5M2)),
        KVE_ERR_INVALID,
        "desc.part[%u].scale: a scale needs convert = 1 and an fp8 cache (convert = %u, cache %s)",
        c, p->convert, dn);
    KVE_RETURN_ERROR_IF(p->scale_per_head > 1, KVE_ERR_INVALID,
                        "desc.part[%u].scale_per_head = %u: must be 0 or 1", c, p->scale_per_head);
    if (!p->dim) {
        size_t es = kve_dtype_size(p->dst_dtype), dim = d->entry_bytes / es;
        KVE_RETURN_ERROR_IF(d->entry_bytes == 0, KVE_ERR_RANGE,
                            "desc.entry_bytes = 0: must be >= 1 (or set desc.part[%u].dim)", c);
        KVE_RETURN_ERROR_IF(d->entry_bytes % es, KVE_ERR_RANGE,
                            "desc.entry_bytes = %zu: not a whole number of %s elements (cache %u)",
                            d->entry_bytes, dn, c);
        KVE_RETURN_ERROR_IF(dim > UINT32_MAX, KVE_ERR_RANGE,
                            "desc.entry_bytes = %zu: more than 2^32-1 elements (cache %u)",
                            d->entry_bytes, c);
    }
    return KVE_OK;
}

static kve_status kve_check_shape(const kve_cache_write_desc *d)
{
    KVE_RETURN_ERROR_IF(d->n_heads == 0, KVE_ERR_RANGE, "desc.n_heads = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES, KVE_ERR_RANGE,
                        "desc.n_caches = %u: must be 1..%d", d->n_caches, KVE_MAX_CACHES);
    KVE_RETURN_ERROR_IF(d->layout != KVE_LAYOUT_NHD && d->layout != KVE_LAYOUT_HND, KVE_ERR_INVALID,
                        "desc.layout = %d: not a kve_cache_layout value", (int)d->layout);
    KVE_TRY(kve_check_pages("desc.pages", &d->pages));
    for (uint32_t c = 0; c < d->n_caches; c++) {
        KVE_TRY(kve_check_part(d, c));
        size_t dense, es = kve_dtype_size(d->part[c].dst_dtype);
        size_t dim = d->part[c].dim ? d->part[c].dim : d->entry_bytes / es;
        KVE_RETURN_ERROR_IF(kve_mul(dim, 4, &dense) || kve_mul(dense, d->n_heads, &dense) ||
                                kve_mul(dense, d->pages.page_size, &dense),
                            KVE_ERR_OVERFLOW,
                            "desc: cache %u's entry (%zu elements) x n_heads %u x page_size %u "
                            "overflows",
                            c, dim, d->n_heads, d->pages.page_size);
        KVE_RETURN_ERROR_IF(!d->src[c] && !d->src_slots, KVE_ERR_NULL,
                            "desc.src[%u] is NULL (and desc.src_slots too)", c);
        KVE_RETURN_ERROR_IF(!d->dst[c], KVE_ERR_NULL, "desc.dst[%u] is NULL", c);
    }
    KVE_RETURN_ERROR_IF(d->pages.kind != KVE_PAGES_FLAT && !d->token_row, KVE_ERR_NULL,
                        "desc.token_row is NULL");
    KVE_RETURN_ERROR_IF(!d->slots, KVE_ERR_NULL, "desc.slots is NULL");
    KVE_RETURN_ERROR_IF(d->slots_stride_token == 0, KVE_ERR_RANGE,
                        "desc.slots_stride_token = 0: must be >= 1");
    return KVE_OK;
}

/* Typed elements are loaded whole: bases and strides must keep them aligned. */
static kve_status kve_check_align(const char *what, uint32_t c, const void *base,
                                  const size_t *strides, int n, kve_dtype t)
{
    size_t a = kve_dtype_size(t), all = (size_t)(uintptr_t)base;
    for (int i = 0; i < n; i++)
        all |= strides[i];
    KVE_RETURN_ERROR_IF(all % a, KVE_ERR_INVALID,
                        "desc.%s[%u] (%p) or its strides are not a multiple of %zu bytes, the "
                        "size of a %s element",
                        what, c, base, a, kve_dtype_names[t]);
    return KVE_OK;
}

static kve_status kve_check_strides(const kve_cache_write_desc *d, const kve_cache_write_desc *r)
{
    size_t src_span[KVE_MAX_CACHES], dst_span[KVE_MAX_CACHES], head_span;
    for (uint32_t c = 0; c < r->n_caches; c++) {
        const kve_cache_part *p = &r->part[c];
        size_t dst_st[4] = {p->dst_stride_page, p->dst_stride_slot, p->dst_stride_head,
                            p->dst_stride_elem},
               src_st[2] = {p->src_stride_token, p->src_stride_head};
        if (!r->src_slots) /* with src_slots the sources are the caches' own slots */
            KVE_TRY(kve_check_align("src", c, r->src[c], src_st, 2, p->src_dtype));
        KVE_TRY(kve_check_align("dst", c, r->dst[c], dst_st, 4, p->dst_dtype));
        /* Source entries may overlap (they are only read): span to the last
         * entry's end; without tokens (moves alone), or with src_slots,
         * nothing of src is read. */
        src_span[c] = 0;
        KVE_RETURN_ERROR_IF(
            !r->src_slots &&
                (kve_rows_span(r->n_heads, p->src_stride_head, kve_src_entry(p), 1, &head_span) ||
                 kve_rows_span(r->n_tokens, p->src_stride_token, head_span, 1, &src_span[c])),
            KVE_ERR_OVERFLOW, "desc.src[%u] strides (%zu, %zu) overflow over %u tokens", c,
            p->src_stride_token, p->src_stride_head, r->n_tokens);
        KVE_TRY(kve_dst_span(d, r, c, &dst_span[c]));
    }
    for (uint32_t c = 0; c < r->n_caches; c++)
        for (uint32_t k = 0; k < r->n_caches; k++) {
            KVE_RETURN_ERROR_IF(
                kve_overlap(r->src[k], src_span[k], r->dst[c], dst_span[c]), KVE_ERR_ALIAS,
                "desc.src[%u] (%p, %zu bytes) overlaps desc.dst[%u] (%p, %zu bytes)", k, r->src[k],
                src_span[k], c, r->dst[c], dst_span[c]);
            KVE_RETURN_ERROR_IF(k > c && kve_dst_meet(r, c, k, dst_span[c], dst_span[k]),
                                KVE_ERR_ALIAS,
                                "desc.dst[%u] (%p) and desc.dst[%u] (%p) share entry bytes "
                                "(spans %zu and %zu bytes)",
                                k, r->dst[k], c, r->dst[c], dst_span[k], dst_span[c]);
        }
    return KVE_OK;
}

/* The slots' and the move lists' views: their sizes, from the caller's
 * strides, fit size_t (kve_rows_span), so no offset into them wraps. */
static kve_status kve_check_lists(const kve_cache_write_desc *d)
{
    size_t head, span;
    KVE_RETURN_ERROR_IF(kve_rows_span(d->n_tokens ? d->n_heads : 0, d->slots_stride_head, 1, 8,
                                      &head),
                        KVE_ERR_OVERFLOW,
                        "desc.slots_stride_head = %zu: %u heads of int64 slots overflow size_t",
                        d->slots_stride_head, d->n_heads);
    KVE_RETURN_ERROR_IF(kve_rows_span(d->n_tokens, d->slots_stride_token, head, 8, &span),
                        KVE_ERR_OVERFLOW,
                        "desc.slots_stride_token = %zu: %u tokens of int64 slots overflow size_t",
                        d->slots_stride_token, d->n_tokens);
    if (!d->moves)
        return KVE_OK;
    size_t pairs = 2 * (size_t)d->max_moves;
    KVE_RETURN_ERROR_IF(kve_rows_span(d->n_move_rows ? d->n_heads : 0, d->moves_stride_head, 1, 4,
                                      &head),
                        KVE_ERR_OVERFLOW, "desc.moves_stride_head = %zu: %u heads of lists overflow",
                        d->moves_stride_head, d->n_heads);
    KVE_RETURN_ERROR_IF(kve_rows_span(d->n_move_rows, d->moves_stride_row, head, 4, &span) ||
                            kve_rows_span(span, pairs, pairs, 4, &span),
                        KVE_ERR_OVERFLOW,
                        "desc.moves_stride_row = %zu: %u move rows of lists (max_moves = %u pairs "
                        "each) overflow size_t",
                        d->moves_stride_row, d->n_move_rows, d->max_moves);
    return KVE_OK;
}

/* With KVE_PAGES_INDPTR on host memory: indptr starts at 0 and never
 * decreases, whichever rows the call's slots use (the header's promise). */
static kve_status kve_check_indptr(const kve_cache_write_desc *d)
{
    KVE_RETURN_ERROR_IF(d->pages.indptr[0] != 0, KVE_ERR_RANGE,
                        "desc.pages.indptr[0] = %d: must be 0 (row 0's pages start indices)",
                        d->pages.indptr[0]);
    for (uint32_t r = 0; r < d->pages.n_rows; r++)
        KVE_RETURN_ERROR_IF(d->pages.indptr[r + 1] < d->pages.indptr[r], KVE_ERR_RANGE,
                            "desc.pages.indptr[%u] = %d, indptr[%u] = %d: indptr must not decrease", r,
                            d->pages.indptr[r], r + 1, d->pages.indptr[r + 1]);
    return KVE_OK;
}

/* Slots a row may use and the page of each: host-memory checks, by the
 * device's own lookup (kve_cw_lookup), each rule it finds broken named. */
/* Which entry of the call a slot comes from: token t's head h, or pair k
 * of move row t's list of head h (its source when !dst). */
typedef struct {
    uint32_t t, h, k;
    int move, dst;
    int src; /* token t's head h in desc.src_slots */
} kve_slot_ref;

/* The name of @p r's field in the desc, for a message. */
static const char *kve_slot_name(const kve_slot_ref *r, char *buf, size_t size)
{
    if (r->move)
        snprintf(buf, size, "desc.moves[move row %u][head %u][pair %u].%s", r->t, r->h, r->k,
                 r->dst ? "dst" : "src");
    else
        snprintf(buf, size, "desc.%s[token %u][head %u]", r->src ? "src_slots" : "slots", r->t,
                 r->h);
    return buf;
}

static kve_status kve_check_slot(const kve_cache_write_desc *d, const kve_slot_ref *ref, int32_t row,
                                 int64_t slot)
{
    kve_cw_place at;
    int fault = kve_cw_lookup(&d->pages, row, slot, &at);
    if (fault == KVE_CW_FOUND)
        return KVE_OK;
    int32_t lo = 0, hi = 0, last = 0, end = 0;
    if (d->pages.kind == KVE_PAGES_INDPTR) {
        lo = d->pages.indptr[row];
        hi = d->pages.indptr[row + 1];
        last = d->pages.last_page_len[row];
        end = d->pages.indptr[d->pages.n_rows];
    }
    static const char *const rules[] = {"page_size", "blocks_per_row * page_size",
                                        "the row's length by indptr and last_page_len",
                                        "n_pages * page_size, flat slots"};
    char name[96];
    kve_slot_name(ref, name, sizeof name);
    switch (fault) {
    case KVE_CW_INDPTR_FIRST:
        return kve_error_set(KVE_ERR_RANGE,
                             "desc.pages.indptr[0] = %d: must be 0 (row 0's pages start indices; %s uses "
                             "row %d)",
                             d->pages.indptr[0], name, row);
    case KVE_CW_INDPTR_ORDER:
        return kve_error_set(KVE_ERR_RANGE,
                             "desc.pages.indptr[%d] = %d, indptr[%d] = %d: row %d ends before it starts "
                             "(indptr must not decrease)",
                             row, lo, row + 1, hi, row);
    case KVE_CW_INDPTR_END:
        return kve_error_set(KVE_ERR_RANGE,
                             "desc.pages.indptr[%d] = %d, indptr[%u] = %d: row %d ends past "
                             "indptr[n_rows], the length of indices",
                             row + 1, hi, d->pages.n_rows, end, row);
    case KVE_CW_LAST_LEN:
        return kve_error_set(KVE_ERR_RANGE,
                             "desc.pages.last_page_len[%d] = %d: must be 1..page_size (%u)", row, last,
                             d->pages.page_size);
    case KVE_CW_SLOT:
        /* A round's moves read slots past the row's new length, up to its
         * capacity: an indptr sized for n_valid does not reach them. */
        return kve_error_set(KVE_ERR_RANGE, "%s = %lld: must be %s0..%lld (%s, row %d)%s", name,
                             (long long)slot, ref->move ? "" : "-1 or ", (long long)at.limit - 1,
                             rules[d->pages.kind], row,
                             ref->move && d->pages.kind == KVE_PAGES_INDPTR
                                 ? "; a round moves entries from slots up to the row's capacity, "
                                   "so describe every reserved page of the row to kve_cache_write "
                                   "(docs/INTEGRATION.md, FlashInfer)"
                                 : "");
    default: /* KVE_CW_PAGE */
        return kve_error_set(KVE_ERR_RANGE,
                             "page %lld of row %d, slot %lld (%s, from desc.pages.%s): must be 0..%u",
                             (long long)at.page, row, (long long)slot, name,
                             d->pages.kind == KVE_PAGES_BLOCK_TABLE ? "block_table" : "indices",
                             d->pages.n_pages - 1);
    }
}

static kve_status kve_check_contents(const kve_cache_write_desc *d)
{
    int flat = d->pages.kind == KVE_PAGES_FLAT;
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        int32_t row = -1;
        int row_read = flat; /* the row is read once a slot needs it: padding needs none */
        for (uint32_t h = 0; h < d->n_heads; h++) {
            /* desc.slots itself: a -1 source skips the write, not the checks */
            size_t at = (size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head;
            int64_t slot = d->slots[at];
            if (slot == -1)
                continue;
            if (!row_read) {
                row = d->token_row[t];
                KVE_RETURN_ERROR_IF(row < 0 || (uint32_t)row >= d->pages.n_rows, KVE_ERR_RANGE,
                                    "desc.token_row[%u] = %d: must be 0..%u (n_rows - 1) for a "
                                    "token with a slot (head %u: %lld)",
                                    t, row, d->pages.n_rows - 1, h, (long long)slot);
                row_read = 1;
            }
            const kve_slot_ref ref = {t, h, 0, 0, 0, 0};
            KVE_TRY(kve_check_slot(d, &ref, row, slot));
            if (d->src_slots && d->src_slots[at] != -1) {
                const kve_slot_ref from = {t, h, 0, 0, 0, 1};
                KVE_TRY(kve_check_slot(d, &from, row, d->src_slots[at]));
            }
        }
    }
    return KVE_OK;
}

/* The moves' shape (always) and, on host-memory backends, every move row,
 * count and slot. */
static kve_status kve_check_moves(const kve_cache_write_desc *d, int contents)
{
    KVE_RETURN_ERROR_IF(!d->n_moves, KVE_ERR_NULL, "desc.n_moves is NULL (desc.moves is not)");
    /* max_moves = 0 (kve_state_max_moves of a step without tokens): lists
     * of no pair, every count 0. */
    for (uint32_t i = 0; contents && i < d->n_move_rows; i++) {
        int32_t row = d->move_row ? d->move_row[i] : (int32_t)i;
        uint32_t pairs = 0; /* a row whose lists are empty (a padding call row) moves nothing */
        for (uint32_t h = 0; h < d->n_heads; h++) {
            size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
            uint32_t n = d->n_moves[list];
            KVE_RETURN_ERROR_IF(n > d->max_moves, KVE_ERR_RANGE,
                                "desc.n_moves[move row %u][head %u] = %u: exceeds max_moves = %u",
                                i, h, n, d->max_moves);
            pairs |= n;
        }
        KVE_RETURN_ERROR_IF(pairs && d->pages.kind != KVE_PAGES_FLAT &&
                                (row < 0 || (uint32_t)row >= d->pages.n_rows),
                            KVE_ERR_RANGE,
                            "desc.move_row[%u] = %d: must be 0..%u (n_rows - 1)", i, row,
                            d->pages.n_rows - 1);
        for (uint32_t h = 0; h < d->n_heads; h++) {
            size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
            uint32_t n = d->n_moves[list];
            const int32_t *pair = d->moves + 2 * list * d->max_moves;
            for (uint32_t k = 0; k < 2 * n; k++) {
                const kve_slot_ref ref = {i, h, k / 2, 1, (int)(k & 1), 0};
                KVE_TRY(kve_check_slot(d, &ref, row, pair[k]));
            }
        }
    }
    return KVE_OK;
}

kve_status kve_cache_write(kve_context *ctx, const kve_cache_write_desc *desc)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(!desc, KVE_ERR_NULL, "desc is NULL");
    KVE_TRY(kve_check_shape(desc));
    KVE_RETURN_ERROR_IF(!ctx->ops->cache_write, KVE_ERR_UNAVAILABLE,
                        "kve_cache_write: the %s backend does not implement it yet",
                        ctx->ops->name);
    /* Checked whole even when nothing is written (every token padding, no
     * moves): the header promises these checks. */
    kve_cache_write_desc r;
    kve_cache_write_resolve(desc, &r);
    KVE_TRY(kve_check_strides(desc, &r));
    KVE_TRY(kve_check_lists(&r));
    if (r.moves)
        KVE_TRY(kve_check_moves(&r, ctx->ops->host_memory));
    if (ctx->ops->host_memory)
        KVE_TRY(kve_check_contents(&r));
    if (ctx->ops->host_memory && r.pages.kind == KVE_PAGES_INDPTR)
        KVE_TRY(kve_check_indptr(&r));
    if (r.n_tokens == 0 && (!r.moves || !r.n_move_rows))
        return KVE_OK;
    return ctx->ops->cache_write(ctx, &r);
}

/*
 * cache_write.c — kve_cache_write: validate once (shape, strides, overlaps,
 * and on host-memory backends every row, slot and page id), resolve dense
 * strides, then call the backend's cache_write op.
 */
#include <stdint.h>

#include "kve_backend_impl.h"
#include "kve_error.h"

static int kve_mul(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }

void kve_cache_write_resolve(const kve_cache_write_desc *in, kve_cache_write_desc *out)
{
    *out = *in;
    size_t e = in->entry_bytes, h = in->n_heads, ps = in->page_size;
    if (!out->src_stride_head)
        out->src_stride_head = e;
    if (!out->src_stride_token)
        out->src_stride_token = h * e;
    int nhd = in->layout == KVE_LAYOUT_NHD;
    if (!out->dst_stride_head)
        out->dst_stride_head = nhd ? e : ps * e;
    if (!out->dst_stride_slot)
        out->dst_stride_slot = nhd ? h * e : e;
    if (!out->dst_stride_page)
        out->dst_stride_page = ps * h * e;
}

/* Bytes spanned by an n-d strided view of entries; KVE_ERR_ALIAS when two
 * entries overlap (each stride, in increasing order, must step past every
 * inner entry). */
static kve_status kve_span(const char *what, int n, const size_t *extent, const size_t *stride,
                           const char *const *names, size_t entry, size_t *out)
{
    int order[3] = {0, 1, 2};
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t span = entry, add;
    for (int k = 0; k < n; k++) {
        int d = order[k];
        if (extent[d] <= 1)
            continue;
        KVE_RETURN_ERROR_IF(stride[d] < span, KVE_ERR_ALIAS,
                            "desc.%s_stride_%s = %zu: %s entries overlap (needs >= %zu bytes)",
                            what, names[d], stride[d], what, span);
        KVE_RETURN_ERROR_IF(kve_mul(extent[d] - 1, stride[d], &add) ||
                                __builtin_add_overflow(span, add, &span),
                            KVE_ERR_OVERFLOW, "desc.%s_stride_%s = %zu overflows the address space",
                            what, names[d], stride[d]);
    }
    *out = span;
    return KVE_OK;
}

static int kve_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return na && nb && x < y + nb && y < x + na;
}

static kve_status kve_check_shape(const kve_cache_write_desc *d)
{
    KVE_RETURN_ERROR_IF(d->n_heads == 0, KVE_ERR_RANGE, "desc.n_heads = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->entry_bytes == 0, KVE_ERR_RANGE, "desc.entry_bytes = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES, KVE_ERR_RANGE,
                        "desc.n_caches = %u: must be 1..%d", d->n_caches, KVE_MAX_CACHES);
    KVE_RETURN_ERROR_IF(d->layout != KVE_LAYOUT_NHD && d->layout != KVE_LAYOUT_HND, KVE_ERR_INVALID,
                        "desc.layout = %d: not a kve_cache_layout value", (int)d->layout);
    KVE_RETURN_ERROR_IF(d->page_table < KVE_PAGES_NONE || d->page_table > KVE_PAGES_INDPTR,
                        KVE_ERR_INVALID, "desc.page_table = %d: not a kve_page_table value",
                        (int)d->page_table);
    KVE_RETURN_ERROR_IF(d->page_size == 0, KVE_ERR_RANGE, "desc.page_size = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->n_pages == 0, KVE_ERR_RANGE, "desc.n_pages = 0: must be >= 1");
    size_t dense;
    KVE_RETURN_ERROR_IF(kve_mul(d->entry_bytes, d->n_heads, &dense) ||
                            kve_mul(dense, d->page_size, &dense),
                        KVE_ERR_OVERFLOW,
                        "desc: entry_bytes %zu x n_heads %u x page_size %u "
                        "overflows",
                        d->entry_bytes, d->n_heads, d->page_size);
    KVE_RETURN_ERROR_IF(d->n_rows == 0, KVE_ERR_RANGE, "desc.n_rows = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->page_table == KVE_PAGES_NONE && d->n_rows > d->n_pages, KVE_ERR_RANGE,
                        "desc.n_rows = %u: with KVE_PAGES_NONE row r is page r, and n_pages = %u",
                        d->n_rows, d->n_pages);
    for (uint32_t c = 0; c < d->n_caches; c++) {
        KVE_RETURN_ERROR_IF(!d->src[c], KVE_ERR_NULL, "desc.src[%u] is NULL", c);
        KVE_RETURN_ERROR_IF(!d->dst[c], KVE_ERR_NULL, "desc.dst[%u] is NULL", c);
    }
    KVE_RETURN_ERROR_IF(!d->slots, KVE_ERR_NULL, "desc.slots is NULL");
    KVE_RETURN_ERROR_IF(!d->token_row, KVE_ERR_NULL, "desc.token_row is NULL");
    KVE_RETURN_ERROR_IF(d->slots_stride_token == 0, KVE_ERR_RANGE,
                        "desc.slots_stride_token = 0: must be >= 1");
    if (d->page_table == KVE_PAGES_BLOCK_TABLE) {
        KVE_RETURN_ERROR_IF(!d->block_table, KVE_ERR_NULL, "desc.block_table is NULL");
        KVE_RETURN_ERROR_IF(d->blocks_per_row == 0, KVE_ERR_RANGE,
                            "desc.blocks_per_row = 0: must be >= 1");
    }
    if (d->page_table == KVE_PAGES_INDPTR) {
        KVE_RETURN_ERROR_IF(!d->indptr, KVE_ERR_NULL, "desc.indptr is NULL");
        KVE_RETURN_ERROR_IF(!d->indices, KVE_ERR_NULL, "desc.indices is NULL");
        KVE_RETURN_ERROR_IF(!d->last_page_len, KVE_ERR_NULL, "desc.last_page_len is NULL");
    }
    return KVE_OK;
}

static kve_status kve_check_strides(const kve_cache_write_desc *r)
{
    static const char *const dst_names[3] = {"page", "slot", "head"};
    size_t dst_ext[3] = {r->n_pages, r->page_size, r->n_heads},
           dst_st[3] = {r->dst_stride_page, r->dst_stride_slot, r->dst_stride_head};
    size_t src_span = 0, dst_span = 0, add;
    /* Source entries may overlap (they are only read): span to the last entry's end. */
    KVE_RETURN_ERROR_IF(kve_mul(r->n_tokens - 1, r->src_stride_token, &src_span) ||
                            kve_mul(r->n_heads - 1, r->src_stride_head, &add) ||
                            __builtin_add_overflow(src_span, add, &src_span) ||
                            __builtin_add_overflow(src_span, r->entry_bytes, &src_span),
                        KVE_ERR_OVERFLOW, "desc.src strides (%zu, %zu) overflow over %u tokens",
                        r->src_stride_token, r->src_stride_head, r->n_tokens);
    KVE_TRY(kve_span("dst", 3, dst_ext, dst_st, dst_names, r->entry_bytes, &dst_span));
    for (uint32_t c = 0; c < r->n_caches; c++)
        for (uint32_t k = 0; k < r->n_caches; k++) {
            KVE_RETURN_ERROR_IF(
                kve_overlap(r->src[k], src_span, r->dst[c], dst_span), KVE_ERR_ALIAS,
                "desc.src[%u] (%p, %zu bytes) overlaps desc.dst[%u] (%p, %zu bytes)", k, r->src[k],
                src_span, c, r->dst[c], dst_span);
            KVE_RETURN_ERROR_IF(k > c && kve_overlap(r->dst[k], dst_span, r->dst[c], dst_span),
                                KVE_ERR_ALIAS,
                                "desc.dst[%u] (%p) overlaps desc.dst[%u] (%p) over "
                                "%zu bytes each",
                                k, r->dst[k], c, r->dst[c], dst_span);
        }
    return KVE_OK;
}

/* Slots a row may use and the page of each: host-memory checks. */
static kve_status kve_check_slot(const kve_cache_write_desc *d, uint32_t t, uint32_t h, int32_t row,
                                 int64_t slot)
{
    int64_t limit = d->page_size;
    int64_t blk = slot / d->page_size;
    int64_t page = row;
    const char *rule = "page_size";
    if (d->page_table == KVE_PAGES_BLOCK_TABLE) {
        limit = (int64_t)d->blocks_per_row * d->page_size;
        rule = "blocks_per_row * page_size";
        if (slot >= 0 && slot < limit)
            page = d->block_table[(size_t)row * d->blocks_per_row + (size_t)blk];
    } else if (d->page_table == KVE_PAGES_INDPTR) {
        /* indptr[0] = 0 and 0 <= lo <= hi <= indptr[n_rows], the length of
         * indices: the row's pages are read within indices. Checked for the
         * rows tokens use, token by token, as the device checks them. */
        int32_t lo = d->indptr[row], hi = d->indptr[row + 1], last = d->last_page_len[row];
        int32_t end = d->indptr[d->n_rows];
        KVE_RETURN_ERROR_IF(d->indptr[0] != 0, KVE_ERR_RANGE,
                            "desc.indptr[0] = %d: must be 0 (row 0's pages start indices; token "
                            "%u uses row %d)",
                            d->indptr[0], t, row);
        KVE_RETURN_ERROR_IF(lo < 0 || hi < lo, KVE_ERR_RANGE,
                            "desc.indptr[%d] = %d, indptr[%d] = %d: row %d ends before it starts "
                            "(indptr must not decrease)",
                            row, lo, row + 1, hi, row);
        KVE_RETURN_ERROR_IF(hi > end, KVE_ERR_RANGE,
                            "desc.indptr[%d] = %d, indptr[%u] = %d: row %d ends past "
                            "indptr[n_rows], the length of indices",
                            row + 1, hi, d->n_rows, end, row);
        KVE_RETURN_ERROR_IF(hi > lo && (last < 1 || (uint32_t)last > d->page_size), KVE_ERR_RANGE,
                            "desc.last_page_len[%d] = %d: must be 1..page_size (%u)", row, last,
                            d->page_size);
        limit = hi > lo ? (int64_t)(hi - lo - 1) * d->page_size + last : 0;
        rule = "the row's length by indptr and last_page_len";
        if (slot >= 0 && slot < limit)
            page = d->indices[lo + blk];
    }
    KVE_RETURN_ERROR_IF(slot < -1 || slot >= limit, KVE_ERR_RANGE,
                        "desc.slots[token %u][head %u] = %lld: must be -1 or 0..%lld (%s, row %d)",
                        t, h, (long long)slot, (long long)limit - 1, rule, row);
    KVE_RETURN_ERROR_IF(page < 0 || page >= d->n_pages, KVE_ERR_RANGE,
                        "page %lld of row %d, slot %lld (from desc.%s): must be 0..%u",
                        (long long)page, row, (long long)slot,
                        d->page_table == KVE_PAGES_BLOCK_TABLE ? "block_table" : "indices",
                        d->n_pages - 1);
    return KVE_OK;
}

static kve_status kve_check_contents(const kve_cache_write_desc *d)
{
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        int32_t row = d->token_row[t];
        KVE_RETURN_ERROR_IF(row < 0 || (uint32_t)row >= d->n_rows, KVE_ERR_RANGE,
                            "desc.token_row[%u] = %d: must be 0..%u (n_rows - 1)", t, row,
                            d->n_rows - 1);
        for (uint32_t h = 0; h < d->n_heads; h++) {
            int64_t slot =
                d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
            if (slot != -1)
                KVE_TRY(kve_check_slot(d, t, h, row, slot));
        }
    }
    return KVE_OK;
}

kve_status kve_cache_write(kve_context *ctx, const kve_cache_write_desc *desc)
{
    KVE_RETURN_ERROR_IF(!ctx, KVE_ERR_NULL, "ctx is NULL");
    KVE_RETURN_ERROR_IF(!desc, KVE_ERR_NULL, "desc is NULL");
    KVE_TRY(kve_check_shape(desc));
    KVE_RETURN_ERROR_IF(!ctx->ops->cache_write, KVE_ERR_UNAVAILABLE,
                        "kve_cache_write: the %s backend does not implement it yet",
                        ctx->ops->name);
    if (desc->n_tokens == 0)
        return KVE_OK;
    kve_cache_write_desc r;
    kve_cache_write_resolve(desc, &r);
    KVE_TRY(kve_check_strides(&r));
    if (ctx->ops->host_memory)
        KVE_TRY(kve_check_contents(&r));
    return ctx->ops->cache_write(ctx, &r);
}

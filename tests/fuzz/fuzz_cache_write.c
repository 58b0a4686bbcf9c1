/*
 * fuzz_cache_write — kve_cache_write over every layout and page table, with
 * out-of-range rows, slots and pages: a KVE_OK must equal a plain reference
 * write byte for byte (every byte not written left as it was), an error
 * must change nothing, accepted destination strides must truly keep
 * entries apart (brute force), and valid requests must be accepted.
 */
#include "fuzz_common.h"

/* A byte stride: 0 (the layout's dense value) or dense + padding; rarely
 * shrunk below dense. *exact is cleared when it may make entries overlap. */
static size_t pick_stride(fz_bytes *b, size_t dense, int *exact)
{
    uint8_t sel = fz_u8(b);
    if (sel < 128)
        return 0;
    if (sel < 248)
        return dense + fz_below(b, 4);
    *exact = 0;
    return fz_below(b, (uint32_t)dense + 1);
}

static int32_t pick_i32(fz_bytes *b, uint32_t limit)
{
    uint8_t sel = fz_u8(b);
    if (sel < 245)
        return (int32_t)fz_below(b, limit);
    static const int32_t edges[] = {-1, INT32_MAX, INT32_MIN, -2};
    return sel < 253 ? edges[sel & 3] : (int32_t)(limit + fz_below(b, 3));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    int bad = 0, exact = 1, unsure = 0; /* unsure: validity not asserted */
    d.n_tokens = fz_below(&in, 13);
    d.n_heads = fz_u8(&in) < 250 ? 1 + fz_below(&in, 4) : 0;
    d.entry_bytes = fz_u8(&in) < 250 ? 1 + fz_below(&in, 12) : 0;
    d.n_caches = fz_u8(&in) < 250 ? 1 + fz_below(&in, 2) : fz_below(&in, 10);
    uint8_t sel = fz_u8(&in);
    d.layout = sel < 250 ? (kve_cache_layout)(sel & 1) : (kve_cache_layout)(2 + (sel & 1));
    sel = fz_u8(&in);
    /* 3 is KVE_PAGES_FLAT, which this harness does not model: 4 and 5 are not tables */
    d.page_table = sel < 250 ? (kve_page_table)(sel % 3) : (kve_page_table)(4 + (sel & 1));
    d.page_size = fz_u8(&in) < 250 ? 1 + fz_below(&in, 8) : 0;
    d.n_pages = fz_u8(&in) < 250 ? 1 + fz_below(&in, 6) : 0;
    d.n_rows = fz_u8(&in) < 250 ? 1 + fz_below(&in, 4) : 0;
    if (d.page_table == KVE_PAGES_NONE && d.n_rows > d.n_pages && fz_u8(&in) < 200)
        d.n_rows = d.n_pages;
    bad = !d.n_heads || !d.entry_bytes || d.n_caches < 1 || d.n_caches > KVE_MAX_CACHES ||
          (unsigned)d.layout > 1 || (unsigned)d.page_table > 3 || !d.page_size || !d.n_pages ||
          !d.n_rows || (d.page_table == KVE_PAGES_NONE && d.n_rows > d.n_pages);
    if (bad) { /* shape errors come before any pointer is read */
        kve_status st = kve_cache_write(ctx, &d);
        FZ_CHECK(st != KVE_OK, "an invalid shape was accepted");
        FZ_CHECK_ERROR_MESSAGE(st);
        return 0;
    }
    size_t e = d.entry_bytes, H = d.n_heads, ps = d.page_size, T = d.n_tokens;
    int nhd = d.layout == KVE_LAYOUT_NHD;
    /* Strides as the header resolves 0: the layout's dense values. */
    d.src_stride_head = pick_stride(&in, e, &exact);
    size_t s_head = d.src_stride_head ? d.src_stride_head : e;
    d.src_stride_token = pick_stride(&in, H * s_head, &exact);
    size_t s_tok = d.src_stride_token ? d.src_stride_token : H * e;
    /* Destination strides nested (inner, middle, page), as the header's
     * layouts are: 0 only while every inner stride is dense too. */
    size_t d_head, d_slot, d_page;
    {
        int dense = 1;
        size_t *st_inner = nhd ? &d.dst_stride_head : &d.dst_stride_slot;
        size_t *st_mid = nhd ? &d.dst_stride_slot : &d.dst_stride_head;
        size_t n_inner = nhd ? H : ps, n_mid = nhd ? ps : H;
        size_t inner = pick_stride(&in, e, &exact);
        dense &= inner == 0;
        size_t v_inner = inner ? inner : e;
        size_t mid = pick_stride(&in, (n_inner - 1) * v_inner + e, &exact);
        if (!mid && !dense)
            mid = (n_inner - 1) * v_inner + e;
        dense &= mid == 0;
        size_t v_mid = mid ? mid : n_inner * e;
        size_t page = pick_stride(&in, (n_mid - 1) * v_mid + (n_inner - 1) * v_inner + e, &exact);
        if (!page && !dense)
            page = (n_mid - 1) * v_mid + (n_inner - 1) * v_inner + e;
        *st_inner = inner;
        *st_mid = mid;
        d.dst_stride_page = page;
        d_page = page ? page : ps * H * e;
        d_head = nhd ? v_inner : v_mid;
        d_slot = nhd ? v_mid : v_inner;
    }
    size_t src_span = T ? (T - 1) * s_tok + (H - 1) * s_head + e : 0;
    size_t dst_span = (d.n_pages - 1) * d_page + (ps - 1) * d_slot + (H - 1) * d_head + e;
    if (src_span > (1u << 20) || dst_span > (1u << 20))
        return 0;
    /* Brute force: do two destination entries overlap? */
    int dst_overlap = 0;
    {
        size_t n = d.n_pages * ps * H, k = 0;
        size_t *off = (size_t *)malloc(n * sizeof *off);
        for (size_t p = 0; p < d.n_pages; p++)
            for (size_t s = 0; s < ps; s++)
                for (size_t h = 0; h < H; h++)
                    off[k++] = p * d_page + s * d_slot + h * d_head;
        qsort(off, n, sizeof *off, fz_cmp_size);
        for (size_t i = 1; i < n; i++)
            dst_overlap |= off[i] - off[i - 1] < e;
        free(off);
    }
    uint64_t rng = fz_u64(&in);
    uint8_t *src[KVE_MAX_CACHES] = {0}, *dst[KVE_MAX_CACHES] = {0}, *ref[KVE_MAX_CACHES] = {0},
            *before[KVE_MAX_CACHES] = {0};
    for (uint32_t c = 0; c < d.n_caches; c++) {
        src[c] = (uint8_t *)fz_alloc(src_span, 0);
        dst[c] = (uint8_t *)fz_alloc(dst_span, 0);
        for (size_t k = 0; k < src_span; k++)
            src[c][k] = (uint8_t)fz_mix(&rng);
        for (size_t k = 0; k < dst_span; k++)
            dst[c][k] = (uint8_t)fz_mix(&rng);
        ref[c] = (uint8_t *)fz_dup(dst[c], dst_span);
        before[c] = (uint8_t *)fz_dup(dst[c], dst_span);
        d.src[c] = src[c];
        d.dst[c] = dst[c];
    }
    /* Page tables, each exactly as long as the header says. */
    int32_t *block_table = NULL, *indptr = NULL, *indices = NULL, *last = NULL;
    uint32_t R = d.n_rows;
    int64_t row_limit[4]; /* slots a row may use */
    if (d.page_table == KVE_PAGES_BLOCK_TABLE) {
        d.blocks_per_row = fz_u8(&in) < 250 ? 1 + fz_below(&in, 3) : 0;
        size_t len = (size_t)R * d.blocks_per_row;
        block_table = (int32_t *)fz_alloc(len * 4, 0);
        for (size_t k = 0; k < len; k++)
            block_table[k] = pick_i32(&in, d.n_pages);
        for (uint32_t r = 0; r < R; r++)
            row_limit[r] = (int64_t)d.blocks_per_row * ps;
        bad |= !d.blocks_per_row;
    } else if (d.page_table == KVE_PAGES_INDPTR) {
        indptr = (int32_t *)fz_alloc((R + 1) * 4, 0);
        last = (int32_t *)fz_alloc(R * 4, 0);
        indptr[0] = 0;
        for (uint32_t r = 0; r < R; r++) {
            indptr[r + 1] = indptr[r] + (int32_t)fz_below(&in, 3);
            last[r] = 1 + (int32_t)fz_below(&in, (uint32_t)ps);
        }
        if (fz_u8(&in) >= 245) { /* broken: not ascending, negative, bad last page */
            uint32_t k = fz_below(&in, R + 1);
            indptr[k] = fz_u8(&in) & 1 ? indptr[k] - 1 - (int32_t)fz_below(&in, 4) : -1;
            if (fz_u8(&in) & 1)
                last[fz_below(&in, R)] = fz_u8(&in) & 1 ? 0 : (int32_t)ps + 1;
            unsure = 1;
        }
        size_t n_ind = indptr[R] > 0 ? (size_t)indptr[R] : 0;
        indices = (int32_t *)fz_alloc(n_ind * 4, 0);
        for (size_t k = 0; k < n_ind; k++)
            indices[k] = pick_i32(&in, d.n_pages);
        for (uint32_t r = 0; r < R; r++) {
            int32_t len = indptr[r + 1] - indptr[r];
            row_limit[r] = len > 0 ? (int64_t)(len - 1) * ps + last[r] : 0;
        }
    } else
        for (uint32_t r = 0; r < R; r++)
            row_limit[r] = ps;
    d.block_table = block_table;
    d.indptr = indptr;
    d.indices = indices;
    d.last_page_len = last;
    /* Tokens: rows and slots, mostly in range. */
    d.slots_stride_token = fz_u8(&in) < 250 ? 1 + fz_below(&in, 5) : 0;
    d.slots_stride_head = fz_u8(&in) & 1 ? 0 : fz_below(&in, 3);
    size_t n_slots_el = T ? (T - 1) * d.slots_stride_token + (H - 1) * d.slots_stride_head + 1 : 0;
    int64_t *slots = (int64_t *)fz_alloc(n_slots_el * 8, 0);
    int32_t *token_row = (int32_t *)fz_alloc(T * 4, 0);
    for (size_t t = 0; t < T; t++)
        token_row[t] = fz_u8(&in) < 250 ? (int32_t)fz_below(&in, R) : (int32_t)R + fz_u8(&in) % 2 - 3 * (fz_u8(&in) & 1);
    for (size_t k = 0; k < n_slots_el; k++) {
        sel = fz_u8(&in);
        slots[k] = sel < 40 ? -1 : sel < 245 ? (int64_t)fz_below(&in, 24) : sel < 250 ? INT64_MIN + sel : -2;
    }
    d.slots = slots;
    d.token_row = token_row;
    bad |= !d.slots_stride_token; /* checked even without tokens */
    /* The reference write, and its verdict on every row, slot and page. */
    uint8_t *hit = (uint8_t *)calloc(dst_span + 1, 1);
    int conflict = 0;
    for (size_t t = 0; t < T && !bad; t++) {
        int32_t row = token_row[t];
        int padding = 1; /* every slot -1: vLLM's padding, whose row is never read */
        for (size_t h = 0; h < H; h++)
            padding &= slots[t * d.slots_stride_token + h * d.slots_stride_head] == -1;
        if (padding)
            continue;
        if (row < 0 || (uint32_t)row >= R) {
            bad = 1;
            break;
        }
        for (size_t h = 0; h < H && !bad; h++) {
            int64_t s = slots[t * d.slots_stride_token + h * d.slots_stride_head];
            if (s == -1)
                continue;
            if (d.page_table == KVE_PAGES_INDPTR) {
                int32_t lo = indptr[row], hi = indptr[row + 1];
                if (lo < 0 || hi < lo || (hi > lo && (last[row] < 1 || (uint32_t)last[row] > ps))) {
                    bad = 1;
                    break;
                }
            }
            if (s < 0 || s >= row_limit[row]) {
                bad = 1;
                break;
            }
            int64_t page = row;
            if (d.page_table == KVE_PAGES_BLOCK_TABLE)
                page = block_table[(size_t)row * d.blocks_per_row + (size_t)(s / ps)];
            else if (d.page_table == KVE_PAGES_INDPTR) {
                /* indices holds indptr[n_rows] ids: a row past them is an error */
                int64_t k = indptr[row] + s / (int64_t)ps;
                if (k >= indptr[R]) {
                    bad = 1;
                    break;
                }
                page = indices[k];
            }
            if (page < 0 || page >= d.n_pages) {
                bad = 1;
                break;
            }
            size_t at = (size_t)page * d_page + (size_t)(s % ps) * d_slot + h * d_head;
            conflict |= hit[at];
            hit[at] = 1;
            for (uint32_t c = 0; c < d.n_caches; c++)
                memcpy(ref[c] + at, src[c] + t * s_tok + h * s_head, e);
        }
    }
    free(hit);
    kve_status st = kve_cache_write(ctx, &d);
    if (st == KVE_OK && T)
        FZ_CHECK(!dst_overlap, "destination strides with overlapping entries were accepted");
    if (!unsure) {
        if (bad)
            FZ_CHECK(st != KVE_OK, "an invalid write was accepted");
        else if (exact && !dst_overlap)
            FZ_CHECK(st == KVE_OK, "a valid write was rejected: %s", kve_status_string(st));
    }
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        for (uint32_t c = 0; c < d.n_caches; c++)
            FZ_CHECK(!memcmp(before[c], dst[c], dst_span), "an error (%s) wrote cache %u",
                     kve_status_string(st), c);
    }
    if (st == KVE_OK && !bad && !conflict)
        for (uint32_t c = 0; c < d.n_caches; c++)
            FZ_CHECK(!memcmp(ref[c], dst[c], dst_span), "cache %u differs from the reference write", c);
    for (uint32_t c = 0; c < d.n_caches; c++) {
        free(src[c]);
        free(dst[c]);
        free(ref[c]);
        free(before[c]);
    }
    free(block_table);
    free(indptr);
    free(indices);
    free(last);
    free(slots);
    free(token_row);
    return 0;
}

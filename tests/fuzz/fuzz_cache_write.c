/*
 * fuzz_cache_write — kve_cache_write over every layout and page table, with
 * out-of-range rows, slots and pages, and optional move lists (run before
 * the writes, each reading the cache as it was): a KVE_OK must equal a
 * plain reference write byte for byte (every byte not written left as it
 * was), an error must change nothing, accepted destination strides must
 * truly keep entries apart (brute force), and valid requests must be
 * accepted. Every array is exactly as long as the header says. Optional
 * per-cache parts (kve_cache_part, decoded last: an input that runs out has
 * none) give each cache its element types, conversion, dim, strides and fp8
 * scale; the reference converts by tests/state/kve_convert_ref.h, and every
 * source, cache and scale array is as long as its part says. Element strides
 * (dst_stride_elem: vLLM's CPU layout with K transposed in a block, other
 * nestings, overlapping or misaligned ones) come from the input's last
 * bytes, after everything older inputs hold, so those decode as before;
 * after them, now and then, two caches in one tensor (vLLM's CPU layout with
 * V beside the transposed K, equal strides, or anywhere): their elements
 * must not meet.
 *
 * The decoders are here; the parts' in fuzz_cache_write_parts.c, the
 * reference write and the checks in fuzz_cache_write_ref.c.
 */
#include "fuzz_cache_write.h"

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

/* The shape: counts, layout, page table. Whether it is invalid. */
static int decode_shape(fz_bytes *in, kve_cache_write_desc *d)
{
    d->n_tokens = fz_below(in, 13);
    d->n_heads = fz_u8(in) < 250 ? 1 + fz_below(in, 4) : 0;
    d->entry_bytes = fz_u8(in) < 250 ? 1 + fz_below(in, 12) : 0;
    d->n_caches = fz_u8(in) < 250 ? 1 + fz_below(in, 2) : fz_below(in, 10);
    uint8_t sel = fz_u8(in);
    d->layout = sel < 250 ? (kve_cache_layout)(sel & 1) : (kve_cache_layout)(2 + (sel & 1));
    sel = fz_u8(in);
    /* 3 is KVE_PAGES_FLAT, which this harness does not model: 4 and 5 are not tables */
    d->pages.kind = sel < 250 ? (kve_page_kind)(sel % 3) : (kve_page_kind)(4 + (sel & 1));
    d->pages.page_size = fz_u8(in) < 250 ? 1 + fz_below(in, 8) : 0;
    d->pages.n_pages = fz_u8(in) < 250 ? 1 + fz_below(in, 6) : 0;
    d->pages.n_rows = fz_u8(in) < 250 ? 1 + fz_below(in, 4) : 0;
    if (d->pages.kind == KVE_PAGES_NONE && d->pages.n_rows > d->pages.n_pages && fz_u8(in) < 200)
        d->pages.n_rows = d->pages.n_pages;
    return !d->n_heads || !d->entry_bytes || d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES ||
           (unsigned)d->layout > 1 || (unsigned)d->pages.kind > 3 || !d->pages.page_size ||
           !d->pages.n_pages || !d->pages.n_rows || (d->pages.kind == KVE_PAGES_NONE && d->pages.n_rows > d->pages.n_pages);
}

/* Strides as the header resolves 0: the layout's dense values. Destination
 * strides nested (inner, middle, page), as the header's layouts are: 0 only
 * while every inner stride is dense too. Then the spans. */
static void decode_strides(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t e = d->entry_bytes, H = d->n_heads, ps = d->pages.page_size, T = d->n_tokens;
    int nhd = d->layout == KVE_LAYOUT_NHD;
    d->src_stride_head = pick_stride(in, e, &c->exact);
    c->s_head = d->src_stride_head ? d->src_stride_head : e;
    d->src_stride_token = pick_stride(in, H * c->s_head, &c->exact);
    c->s_tok = d->src_stride_token ? d->src_stride_token : H * e;
    int dense = 1;
    size_t *st_inner = nhd ? &d->dst_stride_head : &d->dst_stride_slot;
    size_t *st_mid = nhd ? &d->dst_stride_slot : &d->dst_stride_head;
    size_t n_inner = nhd ? H : ps, n_mid = nhd ? ps : H;
    size_t inner = pick_stride(in, e, &c->exact);
    dense &= inner == 0;
    size_t v_inner = inner ? inner : e;
    size_t mid = pick_stride(in, (n_inner - 1) * v_inner + e, &c->exact);
    if (!mid && !dense)
        mid = (n_inner - 1) * v_inner + e;
    dense &= mid == 0;
    size_t v_mid = mid ? mid : n_inner * e;
    size_t page = pick_stride(in, (n_mid - 1) * v_mid + (n_inner - 1) * v_inner + e, &c->exact);
    if (!page && !dense)
        page = (n_mid - 1) * v_mid + (n_inner - 1) * v_inner + e;
    *st_inner = inner;
    *st_mid = mid;
    d->dst_stride_page = page;
    c->d_page = page ? page : ps * H * e;
    c->d_head = nhd ? v_inner : v_mid;
    c->d_slot = nhd ? v_mid : v_inner;
    c->src_span = T ? (T - 1) * c->s_tok + (H - 1) * c->s_head + e : 0;
    c->dst_span = (d->pages.n_pages - 1) * c->d_page + (ps - 1) * c->d_slot + (H - 1) * c->d_head + e;
}

/* The caches' bytes from the input's seed (read where the harness always
 * read it); the reference and the "before" copies start as the destination.
 * Each cache's arrays are as long as its part makes them. */
static void fill_caches(cw_case *c)
{
    uint64_t rng = c->seed;
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        size_t len = dst_len(c, k);
        c->src[k] = (uint8_t *)fz_alloc(g->src_span, 0);
        for (size_t i = 0; i < g->src_span; i++)
            c->src[k][i] = (uint8_t)fz_mix(&rng);
        if (c->shared && k == 1) { /* inside cache 0's tensor */
            c->dst[1] = c->dst[0] + c->shared_off;
            c->ref[1] = c->ref[0] + c->shared_off;
            c->before[1] = c->before[0] + c->shared_off;
        } else {
            c->dst[k] = (uint8_t *)fz_alloc(len, 0);
            for (size_t i = 0; i < len; i++)
                c->dst[k][i] = (uint8_t)fz_mix(&rng);
            c->ref[k] = (uint8_t *)fz_dup(c->dst[k], len);
            c->before[k] = (uint8_t *)fz_dup(c->dst[k], len);
        }
        c->d.src[k] = c->src[k];
        c->d.dst[k] = c->dst[k];
    }
}

/* Page tables, each exactly as long as the header says; each row's limit. */
static void decode_pages(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t R = d->pages.n_rows, ps = d->pages.page_size;
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE) {
        d->pages.blocks_per_row = fz_u8(in) < 250 ? 1 + fz_below(in, 3) : 0;
        size_t len = (size_t)R * d->pages.blocks_per_row;
        c->block_table = (int32_t *)fz_alloc(len * 4, 0);
        for (size_t k = 0; k < len; k++)
            c->block_table[k] = pick_i32(in, d->pages.n_pages);
        for (uint32_t r = 0; r < R; r++)
            c->row_limit[r] = (int64_t)d->pages.blocks_per_row * ps;
        c->bad |= !d->pages.blocks_per_row;
    } else if (d->pages.kind == KVE_PAGES_INDPTR) {
        int32_t *indptr = c->indptr = (int32_t *)fz_alloc((R + 1) * 4, 0);
        int32_t *last = c->last = (int32_t *)fz_alloc(R * 4, 0);
        indptr[0] = 0;
        for (uint32_t r = 0; r < R; r++) {
            indptr[r + 1] = indptr[r] + (int32_t)fz_below(in, 3);
            last[r] = 1 + (int32_t)fz_below(in, ps);
        }
        if (fz_u8(in) >= 245) { /* broken: not ascending, negative, bad last page */
            uint32_t k = fz_below(in, R + 1);
            indptr[k] = fz_u8(in) & 1 ? indptr[k] - 1 - (int32_t)fz_below(in, 4) : -1;
            if (fz_u8(in) & 1) {
                last[fz_below(in, R)] = fz_u8(in) & 1 ? 0 : (int32_t)ps + 1;
                c->unsure = 1; /* refused only where a slot reads the row */
            }
            /* The header: indptr starts at 0 and never decreases, checked
             * whole whichever rows the slots use (issue 36). */
            for (uint32_t r = 0; r <= R; r++)
                c->refuse |= r ? indptr[r] < indptr[r - 1] : indptr[0] != 0;
            c->bad |= c->refuse;
        }
        size_t n_ind = indptr[R] > 0 ? (size_t)indptr[R] : 0;
        c->indices = (int32_t *)fz_alloc(n_ind * 4, 0);
        for (size_t k = 0; k < n_ind; k++)
            c->indices[k] = pick_i32(in, d->pages.n_pages);
        for (uint32_t r = 0; r < R; r++) {
            int32_t len = indptr[r + 1] - indptr[r];
            c->row_limit[r] = len > 0 ? (int64_t)(len - 1) * ps + last[r] : 0;
        }
    } else
        for (uint32_t r = 0; r < R; r++)
            c->row_limit[r] = ps;
    d->pages.block_table = c->block_table;
    d->pages.indptr = c->indptr;
    d->pages.indices = c->indices;
    d->pages.last_page_len = c->last;
}

/* Tokens: rows and slots, mostly in range. */
static void decode_tokens(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t T = d->n_tokens, H = d->n_heads;
    uint32_t R = d->pages.n_rows;
    uint8_t sel = fz_u8(in);
    d->slots_stride_token = sel < 250 ? 1 + fz_below(in, 5) : sel < 252 ? 0 : fz_huge_stride(sel);
    sel = fz_u8(in);
    d->slots_stride_head = sel & 1 ? 0 : sel < 250 ? fz_below(in, 3) : fz_huge_stride(sel >> 1);
    /* Strides near SIZE_MAX: the slots' view past SIZE_MAX bytes must be
     * refused (one element allocated); a huge stride that goes unused (one
     * token, one head) must not be. */
    unsigned __int128 el = fz_span128(T, d->slots_stride_token, H, d->slots_stride_head);
    int over = el * 8 > SIZE_MAX;
    size_t n_slots_el = over ? 1 : el > (1u << 20) ? 0 : (size_t)el;
    c->refuse |= over;
    c->bad |= over;
    c->skip |= !over && el > (1u << 20);
    c->slots = (int64_t *)fz_alloc(n_slots_el * 8, 0);
    c->n_slots_el = n_slots_el;
    c->token_row = (int32_t *)fz_alloc(T * 4, 0);
    for (size_t t = 0; t < T; t++)
        c->token_row[t] = fz_u8(in) < 250 ? (int32_t)fz_below(in, R)
                                          : (int32_t)R + fz_u8(in) % 2 - 3 * (fz_u8(in) & 1);
    for (size_t k = 0; k < n_slots_el; k++) {
        uint8_t sel = fz_u8(in);
        c->slots[k] = sel < 40 ? -1 : sel < 245 ? (int64_t)fz_below(in, 24)
                                : sel < 250 ? INT64_MIN + sel : -2;
    }
    d->slots = c->slots;
    d->token_row = c->token_row;
    c->bad |= !d->slots_stride_token; /* checked even without tokens */
}

/* Move lists (about half the inputs; none once the input runs out): rows,
 * counts and pairs mostly valid, each array exactly as long as the lists'
 * strides need. */
static void decode_moves(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t R = d->pages.n_rows, H = d->n_heads;
    if (fz_u8(in) < 128)
        return;
    d->n_move_rows = fz_below(in, R + 2);
    d->max_moves = fz_u8(in) < 245 ? 1 + fz_below(in, 3) : 0;
    uint8_t sel = fz_u8(in);
    d->moves_stride_head = sel & 1 ? 0 : 1;
    d->moves_stride_row = (d->moves_stride_head ? H : 1) + fz_below(in, 2);
    if (sel >= 248) /* rarely near SIZE_MAX: lists or pairs past SIZE_MAX bytes */
        *(sel & 2 ? &d->moves_stride_row : &d->moves_stride_head) = fz_huge_stride(sel >> 2);
    unsigned __int128 lists =
        fz_span128(d->n_move_rows, d->moves_stride_row, H, d->moves_stride_head);
    int over = lists * 4 > SIZE_MAX || lists * d->max_moves * 8 > SIZE_MAX;
    c->refuse |= over;
    c->bad |= over;
    c->skip |= !over && lists > (1u << 20);
    c->n_lists = over || lists > (1u << 20) ? 1 : (size_t)lists;
    c->moves = (int32_t *)fz_alloc(c->n_lists * d->max_moves * 8, 0);
    c->n_moves = (uint32_t *)fz_alloc(c->n_lists * 4, 0);
    if (fz_u8(in) & 1) {
        c->move_row = (int32_t *)fz_alloc((size_t)d->n_move_rows * 4, 0);
        for (uint32_t i = 0; i < d->n_move_rows; i++)
            c->move_row[i] = pick_i32(in, R);
    }
    for (size_t l = 0; l < c->n_lists; l++)
        c->n_moves[l] = fz_u8(in) < 250 ? fz_below(in, d->max_moves + 1) : d->max_moves + 1;
    /* now and then a planned call's padding row (issue 47 item 2): every
     * list empty, its move_row no page-table row (the call's rows[i], not
     * read: 0xFFFFFFFF) */
    uint8_t pad = fz_u8(in);
    if (c->move_row && d->n_move_rows && !over && lists <= (1u << 20) && (pad & 3) == 3) {
        uint32_t p = fz_below(in, d->n_move_rows);
        c->move_row[p] = pad & 4 ? -1 : (int32_t)(R + (pad >> 3));
        for (uint32_t h = 0; h < H; h++)
            c->n_moves[(size_t)p * d->moves_stride_row + (size_t)h * d->moves_stride_head] = 0;
    }
    for (size_t k = 0; k < c->n_lists * d->max_moves * 2; k++) {
        uint8_t sel = fz_u8(in);
        c->moves[k] = sel < 245 ? (int32_t)fz_below(in, 24) : sel < 250 ? -1 : INT32_MAX - sel;
    }
    d->moves = c->moves;
    d->n_moves = fz_u8(in) < 252 || !d->n_move_rows ? c->n_moves : NULL;
    d->move_row = c->move_row;
}

/* Now and then (issue 38's commit of drafts) the entries come from the
 * caches' own slots, desc.src_slots, shaped as slots: mostly in range,
 * some -1 (not written, the entry still checked: issue 47), rarely
 * outside the row. Only where every part is a plain copy, so that the
 * parts' source types and src[] play no part in the verdict either way. */
static void decode_src_slots(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    if (fz_u8(in) < 192 || c->refuse)
        return;
    for (uint32_t k = 0; k < d->n_caches; k++)
        if (d->part[k].convert || c->g[k].st != c->g[k].dt)
            return;
    c->src_slots = (int64_t *)fz_alloc(c->n_slots_el * 8, 0);
    for (size_t k = 0; k < c->n_slots_el; k++) {
        uint8_t sel = fz_u8(in);
        c->src_slots[k] = sel < 30 ? -1 : sel < 250 ? (int64_t)fz_below(in, 24) : -2 - sel % 3;
    }
    d->src_slots = c->src_slots;
}

static void free_case(cw_case *c)
{
    for (uint32_t k = 0; k < KVE_MAX_CACHES; k++) {
        free(c->src[k]);
        if (c->shared && k == 1)
            continue; /* inside cache 0's */
        free(c->dst[k]);
        free(c->ref[k]);
        free(c->before[k]);
    }
    free(c->block_table);
    free(c->indptr);
    free(c->indices);
    free(c->last);
    free(c->slots);
    free(c->src_slots);
    free(c->token_row);
    free(c->moves);
    free(c->move_row);
    free(c->n_moves);
    free(c->amb);
    for (uint32_t k = 0; k < KVE_MAX_CACHES; k++)
        free(c->scale[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    cw_case c;
    memset(&c, 0, sizeof c);
    c.exact = 1;
    if (decode_shape(&in, &c.d)) { /* shape errors come before any pointer is read */
        kve_status st = kve_cache_write(ctx, &c.d);
        FZ_CHECK(st != KVE_OK, "an invalid shape was accepted");
        FZ_CHECK_ERROR_MESSAGE(st);
        return 0;
    }
    decode_strides(&in, &c);
    if (c.src_span > (1u << 20) || c.dst_span > (1u << 20))
        return 0;
    c.seed = fz_u64(&in);
    decode_pages(&in, &c);
    decode_tokens(&in, &c);
    decode_moves(&in, &c);
    if (c.skip) { /* a huge view that is valid: more than the harness allocates */
        free_case(&c);
        return 0;
    }
    decode_parts(&in, &c);
    resolve_parts(&c);
    for (uint32_t k = 0; k < c.d.n_caches; k++)
        if (c.g[k].src_span > (1u << 20) || c.g[k].dst_span > (1u << 20)) {
            free_case(&c);
            return 0;
        }
    decode_style(&in, &c);
    decode_src_slots(&in, &c);
    decode_elem_strides(&in, &c);
    decode_shared(&in, &c);
    for (uint32_t k = 0; k < c.d.n_caches; k++)
        if (c.g[k].dst_span > (1u << 20) || dst_len(&c, k) > (1u << 20)) {
            free_case(&c);
            return 0;
        }
    fill_caches(&c);
    style_sources(&c);
    check_geometry(&c);
    reference_write(&c);
    check_write(&c, kve_cache_write(ctx, &c.d));
    free_case(&c);
    return 0;
}

/*
 * fuzz_cache_write — kve_cache_write over every layout and page table, with
 * out-of-range rows, slots and pages, and optional move lists (run before
 * the writes, each reading the cache as it was): a KVE_OK must equal a
 * plain reference write byte for byte (every byte not written left as it
 * was), an error must change nothing, accepted destination strides must
 * truly keep entries apart (brute force), and valid requests must be
 * accepted. Every array is exactly as long as the header says.
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

/* One decoded request: the descriptor, what the harness allocated for it,
 * the reference write and its verdicts. */
typedef struct {
    kve_cache_write_desc d;
    int bad, exact, unsure;  /* unsure: validity not asserted */
    size_t d_head, d_slot, d_page, s_head, s_tok;
    size_t src_span, dst_span;
    int dst_overlap, conflict;
    uint8_t *src[KVE_MAX_CACHES], *dst[KVE_MAX_CACHES], *ref[KVE_MAX_CACHES],
        *before[KVE_MAX_CACHES];
    int32_t *block_table, *indptr, *indices, *last, *token_row;
    int32_t *moves, *move_row;
    uint32_t *n_moves;
    size_t n_lists;
    int64_t *slots;
    int64_t row_limit[4]; /* slots a row may use */
} cw_case;

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
    d->page_table = sel < 250 ? (kve_page_table)(sel % 3) : (kve_page_table)(4 + (sel & 1));
    d->page_size = fz_u8(in) < 250 ? 1 + fz_below(in, 8) : 0;
    d->n_pages = fz_u8(in) < 250 ? 1 + fz_below(in, 6) : 0;
    d->n_rows = fz_u8(in) < 250 ? 1 + fz_below(in, 4) : 0;
    if (d->page_table == KVE_PAGES_NONE && d->n_rows > d->n_pages && fz_u8(in) < 200)
        d->n_rows = d->n_pages;
    return !d->n_heads || !d->entry_bytes || d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES ||
           (unsigned)d->layout > 1 || (unsigned)d->page_table > 3 || !d->page_size ||
           !d->n_pages || !d->n_rows || (d->page_table == KVE_PAGES_NONE && d->n_rows > d->n_pages);
}

/* Strides as the header resolves 0: the layout's dense values. Destination
 * strides nested (inner, middle, page), as the header's layouts are: 0 only
 * while every inner stride is dense too. Then the spans. */
static void decode_strides(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t e = d->entry_bytes, H = d->n_heads, ps = d->page_size, T = d->n_tokens;
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
    c->dst_span = (d->n_pages - 1) * c->d_page + (ps - 1) * c->d_slot + (H - 1) * c->d_head + e;
}

/* Brute force: do two destination entries overlap? */
static int dst_overlaps(const cw_case *c)
{
    size_t ps = c->d.page_size, H = c->d.n_heads;
    size_t n = c->d.n_pages * ps * H, k = 0;
    size_t *off = (size_t *)malloc(n * sizeof *off);
    for (size_t p = 0; p < c->d.n_pages; p++)
        for (size_t s = 0; s < ps; s++)
            for (size_t h = 0; h < H; h++)
                off[k++] = p * c->d_page + s * c->d_slot + h * c->d_head;
    qsort(off, n, sizeof *off, fz_cmp_size);
    int overlap = 0;
    for (size_t i = 1; i < n; i++)
        overlap |= off[i] - off[i - 1] < c->d.entry_bytes;
    free(off);
    return overlap;
}

/* Source and destination bytes from the input's seed; the reference and
 * the "before" copies start as the destination. */
static void fill_caches(fz_bytes *in, cw_case *c)
{
    uint64_t rng = fz_u64(in);
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        c->src[k] = (uint8_t *)fz_alloc(c->src_span, 0);
        c->dst[k] = (uint8_t *)fz_alloc(c->dst_span, 0);
        for (size_t i = 0; i < c->src_span; i++)
            c->src[k][i] = (uint8_t)fz_mix(&rng);
        for (size_t i = 0; i < c->dst_span; i++)
            c->dst[k][i] = (uint8_t)fz_mix(&rng);
        c->ref[k] = (uint8_t *)fz_dup(c->dst[k], c->dst_span);
        c->before[k] = (uint8_t *)fz_dup(c->dst[k], c->dst_span);
        c->d.src[k] = c->src[k];
        c->d.dst[k] = c->dst[k];
    }
}

/* Page tables, each exactly as long as the header says; each row's limit. */
static void decode_pages(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t R = d->n_rows, ps = d->page_size;
    if (d->page_table == KVE_PAGES_BLOCK_TABLE) {
        d->blocks_per_row = fz_u8(in) < 250 ? 1 + fz_below(in, 3) : 0;
        size_t len = (size_t)R * d->blocks_per_row;
        c->block_table = (int32_t *)fz_alloc(len * 4, 0);
        for (size_t k = 0; k < len; k++)
            c->block_table[k] = pick_i32(in, d->n_pages);
        for (uint32_t r = 0; r < R; r++)
            c->row_limit[r] = (int64_t)d->blocks_per_row * ps;
        c->bad |= !d->blocks_per_row;
    } else if (d->page_table == KVE_PAGES_INDPTR) {
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
            if (fz_u8(in) & 1)
                last[fz_below(in, R)] = fz_u8(in) & 1 ? 0 : (int32_t)ps + 1;
            c->unsure = 1;
        }
        size_t n_ind = indptr[R] > 0 ? (size_t)indptr[R] : 0;
        c->indices = (int32_t *)fz_alloc(n_ind * 4, 0);
        for (size_t k = 0; k < n_ind; k++)
            c->indices[k] = pick_i32(in, d->n_pages);
        for (uint32_t r = 0; r < R; r++) {
            int32_t len = indptr[r + 1] - indptr[r];
            c->row_limit[r] = len > 0 ? (int64_t)(len - 1) * ps + last[r] : 0;
        }
    } else
        for (uint32_t r = 0; r < R; r++)
            c->row_limit[r] = ps;
    d->block_table = c->block_table;
    d->indptr = c->indptr;
    d->indices = c->indices;
    d->last_page_len = c->last;
}

/* Tokens: rows and slots, mostly in range. */
static void decode_tokens(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t T = d->n_tokens, H = d->n_heads;
    uint32_t R = d->n_rows;
    d->slots_stride_token = fz_u8(in) < 250 ? 1 + fz_below(in, 5) : 0;
    d->slots_stride_head = fz_u8(in) & 1 ? 0 : fz_below(in, 3);
    size_t n_slots_el = T ? (T - 1) * d->slots_stride_token + (H - 1) * d->slots_stride_head + 1 : 0;
    c->slots = (int64_t *)fz_alloc(n_slots_el * 8, 0);
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

/* The page of (row, slot s) by the reference's reading of the table, or -1
 * when the table cannot give one (an error). */
static int64_t ref_page(const cw_case *c, int32_t row, int64_t s)
{
    const kve_cache_write_desc *d = &c->d;
    if (d->page_table == KVE_PAGES_INDPTR) {
        int32_t lo = c->indptr[row], hi = c->indptr[row + 1];
        if (lo < 0 || hi < lo || (hi > lo && (c->last[row] < 1 || (uint32_t)c->last[row] > d->page_size)))
            return -1;
    }
    if (s < 0 || s >= c->row_limit[row])
        return -1;
    int64_t page = row;
    if (d->page_table == KVE_PAGES_BLOCK_TABLE)
        page = c->block_table[(size_t)row * d->blocks_per_row + (size_t)(s / d->page_size)];
    else if (d->page_table == KVE_PAGES_INDPTR) {
        /* indices holds indptr[n_rows] ids: a row past them is an error */
        int64_t k = c->indptr[row] + s / (int64_t)d->page_size;
        if (k >= c->indptr[d->n_rows])
            return -1;
        page = c->indices[k];
    }
    return page < 0 || page >= d->n_pages ? -1 : page;
}

/* Move lists (about half the inputs; none once the input runs out): rows,
 * counts and pairs mostly valid, each array exactly as long as the lists'
 * strides need. */
static void decode_moves(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t R = d->n_rows, H = d->n_heads;
    if (fz_u8(in) < 128)
        return;
    d->n_move_rows = fz_below(in, R + 2);
    d->max_moves = fz_u8(in) < 245 ? 1 + fz_below(in, 3) : 0;
    d->moves_stride_head = fz_u8(in) & 1 ? 0 : 1;
    d->moves_stride_row = (d->moves_stride_head ? H : 1) + fz_below(in, 2);
    c->n_lists = d->n_move_rows
                     ? (d->n_move_rows - 1) * d->moves_stride_row + (H - 1) * d->moves_stride_head + 1
                     : 0;
    c->moves = (int32_t *)fz_alloc(c->n_lists * d->max_moves * 8, 0);
    c->n_moves = (uint32_t *)fz_alloc(c->n_lists * 4, 0);
    if (fz_u8(in) & 1) {
        c->move_row = (int32_t *)fz_alloc((size_t)d->n_move_rows * 4, 0);
        for (uint32_t i = 0; i < d->n_move_rows; i++)
            c->move_row[i] = pick_i32(in, R);
    }
    for (size_t l = 0; l < c->n_lists; l++)
        c->n_moves[l] = fz_u8(in) < 250 ? fz_below(in, d->max_moves + 1) : d->max_moves + 1;
    for (size_t k = 0; k < c->n_lists * d->max_moves * 2; k++) {
        uint8_t sel = fz_u8(in);
        c->moves[k] = sel < 245 ? (int32_t)fz_below(in, 24) : sel < 250 ? -1 : INT32_MAX - sel;
    }
    d->moves = c->moves;
    d->n_moves = fz_u8(in) < 252 || !d->n_move_rows ? c->n_moves : NULL;
    d->move_row = c->move_row;
}

/* The reference's moves: every valid pair's entry, in every cache, from the
 * cache as it was before the call; c->bad for what the library must
 * refuse, c->conflict where the outcome would depend on the order (an
 * entry moved to twice, or both moved from and to). */
static void reference_moves(cw_case *c, uint8_t *hit)
{
    const kve_cache_write_desc *d = &c->d;
    if (!d->moves || c->bad)
        return;
    if (!d->n_moves) {
        c->bad = d->n_tokens || d->n_move_rows;
        return;
    }
    c->bad |= d->n_move_rows && !d->max_moves;
    uint8_t *from = (uint8_t *)calloc(c->dst_span + 1, 1);
    for (uint32_t i = 0; i < d->n_move_rows && !c->bad; i++) {
        int32_t row = c->move_row ? c->move_row[i] : (int32_t)i;
        c->bad |= row < 0 || (uint32_t)row >= d->n_rows;
        for (uint32_t h = 0; h < d->n_heads && !c->bad; h++) {
            size_t l = i * d->moves_stride_row + h * d->moves_stride_head;
            uint32_t n = d->n_moves[l];
            c->bad |= n > d->max_moves;
            for (uint32_t k = 0; k < n && !c->bad; k++) {
                const int32_t *pair = c->moves + 2 * (l * d->max_moves + k);
                int64_t ps = ref_page(c, row, pair[0]), pd = ref_page(c, row, pair[1]);
                if (ps < 0 || pd < 0) {
                    c->bad = 1;
                    break;
                }
                size_t a = (size_t)ps * c->d_page + (size_t)(pair[0] % d->page_size) * c->d_slot +
                           h * c->d_head;
                size_t b = (size_t)pd * c->d_page + (size_t)(pair[1] % d->page_size) * c->d_slot +
                           h * c->d_head;
                c->conflict |= hit[b] || a == b;
                hit[b] = 1;
                from[a] = 1;
                for (uint32_t q = 0; q < d->n_caches; q++)
                    memcpy(c->ref[q] + b, c->before[q] + a, d->entry_bytes);
            }
        }
    }
    for (size_t x = 0; x < c->dst_span && !c->conflict; x++)
        c->conflict |= hit[x] && from[x];
    memset(hit, 0, c->dst_span + 1); /* the writes then overwrite what they hit */
    free(from);
}

/* The reference write, and its verdict on every row, slot and page. */
static void reference_write(cw_case *c)
{
    const kve_cache_write_desc *d = &c->d;
    size_t H = d->n_heads;
    uint8_t *hit = (uint8_t *)calloc(c->dst_span + 1, 1);
    reference_moves(c, hit);
    for (size_t t = 0; t < d->n_tokens && !c->bad; t++) {
        int32_t row = c->token_row[t];
        int padding = 1; /* every slot -1: vLLM's padding, whose row is never read */
        for (size_t h = 0; h < H; h++)
            padding &= c->slots[t * d->slots_stride_token + h * d->slots_stride_head] == -1;
        if (padding)
            continue;
        if (row < 0 || (uint32_t)row >= d->n_rows) {
            c->bad = 1;
            break;
        }
        for (size_t h = 0; h < H && !c->bad; h++) {
            int64_t s = c->slots[t * d->slots_stride_token + h * d->slots_stride_head];
            if (s == -1)
                continue;
            int64_t page = ref_page(c, row, s);
            if (page < 0) {
                c->bad = 1;
                break;
            }
            size_t at = (size_t)page * c->d_page + (size_t)(s % d->page_size) * c->d_slot + h * c->d_head;
            c->conflict |= hit[at];
            hit[at] = 1;
            for (uint32_t k = 0; k < d->n_caches; k++)
                memcpy(c->ref[k] + at, c->src[k] + t * c->s_tok + h * c->s_head, d->entry_bytes);
        }
    }
    free(hit);
}

/* The library's answer against the reference's verdicts and bytes. */
static void check_write(const cw_case *c, kve_status st)
{
    if (st == KVE_OK && (c->d.n_tokens || (c->d.moves && c->d.n_move_rows)))
        FZ_CHECK(!c->dst_overlap, "destination strides with overlapping entries were accepted");
    if (!c->unsure) {
        if (c->bad)
            FZ_CHECK(st != KVE_OK, "an invalid write was accepted");
        else if (c->exact && !c->dst_overlap)
            FZ_CHECK(st == KVE_OK, "a valid write was rejected: %s", kve_status_string(st));
    }
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        for (uint32_t k = 0; k < c->d.n_caches; k++)
            FZ_CHECK(!memcmp(c->before[k], c->dst[k], c->dst_span), "an error (%s) wrote cache %u",
                     kve_status_string(st), k);
    }
    if (st == KVE_OK && !c->bad && !c->conflict)
        for (uint32_t k = 0; k < c->d.n_caches; k++)
            FZ_CHECK(!memcmp(c->ref[k], c->dst[k], c->dst_span),
                     "cache %u differs from the reference write", k);
}

static void free_case(cw_case *c)
{
    for (uint32_t k = 0; k < KVE_MAX_CACHES; k++) {
        free(c->src[k]);
        free(c->dst[k]);
        free(c->ref[k]);
        free(c->before[k]);
    }
    free(c->block_table);
    free(c->indptr);
    free(c->indices);
    free(c->last);
    free(c->slots);
    free(c->token_row);
    free(c->moves);
    free(c->move_row);
    free(c->n_moves);
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
    c.dst_overlap = dst_overlaps(&c);
    fill_caches(&in, &c);
    decode_pages(&in, &c);
    decode_tokens(&in, &c);
    decode_moves(&in, &c);
    reference_write(&c);
    check_write(&c, kve_cache_write(ctx, &c.d));
    free_case(&c);
    return 0;
}

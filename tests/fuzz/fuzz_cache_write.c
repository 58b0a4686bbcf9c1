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
 * source, cache and scale array is as long as its part says.
 */
#include "fuzz_common.h"
#include "../state/kve_convert_ref.h"

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

/* One cache's geometry with its part resolved as the header says: element
 * types and sizes, dim, entry bytes of source and cache, byte strides (0
 * taken from the desc-wide value, then the dense one of this cache's entry),
 * spans, its scale. */
typedef struct {
    kve_dtype st, dt;
    uint32_t ss, ds, dim;
    int conv;
    size_t se, de, s_head, s_tok, d_head, d_slot, d_page;
    size_t src_span, dst_span;
    const float *scale; /* NULL: no division */
} cw_cache;

/* One decoded request: the descriptor, what the harness allocated for it,
 * the reference write and its verdicts. */
typedef struct {
    kve_cache_write_desc d;
    int bad, exact, unsure;  /* unsure: validity not asserted */
    size_t d_head, d_slot, d_page, s_head, s_tok;
    size_t src_span, dst_span; /* desc-wide, before parts */
    uint64_t seed;             /* the caches' bytes */
    int has_parts;
    cw_cache g[KVE_MAX_CACHES];
    float *scale[KVE_MAX_CACHES];
    int dst_overlap;
    /* [entries]: entries whose bytes depend on an order the header leaves
     * open (two tokens writing one, or moves against its @pre) */
    uint8_t *amb;
    size_t n_entries;
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

/* Brute force: do two entries of cache k's destination overlap? */
static int dst_overlaps(const cw_case *c, uint32_t k)
{
    const cw_cache *g = &c->g[k];
    size_t ps = c->d.page_size, H = c->d.n_heads;
    size_t n = c->d.n_pages * ps * H, i = 0;
    size_t *off = (size_t *)malloc(n * sizeof *off);
    for (size_t p = 0; p < c->d.n_pages; p++)
        for (size_t s = 0; s < ps; s++)
            for (size_t h = 0; h < H; h++)
                off[i++] = p * g->d_page + s * g->d_slot + h * g->d_head;
    qsort(off, n, sizeof *off, fz_cmp_size);
    int overlap = 0;
    for (size_t j = 1; j < n; j++)
        overlap |= off[j] - off[j - 1] < g->de;
    free(off);
    return overlap;
}

/* Whether cache k's destination strides nest (each, in increasing order,
 * steps past every inner entry): the layouts the library must accept
 * (docs/FUZZING.md: it may refuse some interleaved ones that do not overlap). */
static int dst_nested(const cw_case *c, uint32_t k)
{
    const cw_cache *g = &c->g[k];
    size_t ext[3] = {c->d.n_pages, c->d.page_size, c->d.n_heads},
           st[3] = {g->d_page, g->d_slot, g->d_head};
    int used[3] = {0, 0, 0};
    size_t span = g->de;
    for (int n = 0; n < 3; n++) {
        int best = -1;
        for (int i = 0; i < 3; i++)
            if (!used[i] && (best < 0 || st[i] < st[best]))
                best = i;
        used[best] = 1;
        if (ext[best] <= 1)
            continue;
        if (st[best] < span)
            return 0;
        span += (ext[best] - 1) * st[best];
    }
    return 1;
}

/* The caches' bytes from the input's seed (read where the harness always
 * read it); the reference and the "before" copies start as the destination.
 * Each cache's arrays are as long as its part makes them. */
static void fill_caches(cw_case *c)
{
    uint64_t rng = c->seed;
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        c->src[k] = (uint8_t *)fz_alloc(g->src_span, 0);
        c->dst[k] = (uint8_t *)fz_alloc(g->dst_span, 0);
        for (size_t i = 0; i < g->src_span; i++)
            c->src[k][i] = (uint8_t)fz_mix(&rng);
        for (size_t i = 0; i < g->dst_span; i++)
            c->dst[k][i] = (uint8_t)fz_mix(&rng);
        c->ref[k] = (uint8_t *)fz_dup(c->dst[k], g->dst_span);
        c->before[k] = (uint8_t *)fz_dup(c->dst[k], g->dst_span);
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

/* An element type: mostly a float type, sometimes raw bytes, rarely no
 * kve_dtype at all. */
static kve_dtype pick_dtype(fz_bytes *b)
{
    uint8_t sel = fz_u8(b);
    if (sel < 224)
        return (kve_dtype)(1 + fz_below(b, 5));
    if (sel < 250)
        return KVE_DTYPE_RAW;
    static const uint32_t bad[] = {6, 7, 0x7fffffffu, 0xffffffffu};
    return (kve_dtype)bad[sel & 3];
}

/* A part's own byte stride: 0 (the desc-wide one, else the dense one),
 * dense + whole elements, rarely dense + bytes (misaligned) or shrunk. */
static size_t pick_part_stride(fz_bytes *b, size_t dense, size_t unit)
{
    uint8_t sel = fz_u8(b);
    if (sel < 64)
        return 0;
    if (sel < 240)
        return dense + unit * fz_below(b, 3);
    if (sel < 248)
        return dense + fz_below(b, 4);
    return fz_below(b, (uint32_t)dense + 1);
}

/* A scale: ordinary values, random ones of either sign, and the edges the
 * header's formula (an IEEE division) decides: 0, -0, NaN, inf, subnormal. */
static float pick_scale(fz_bytes *b)
{
    uint8_t sel = fz_u8(b);
    static const float plain[8] = {1.0f, 0.5f, 2.0f, 0.37f, 3.0f, 1.0f / 1024, 0.0125f, 1.0f / 3};
    if (sel < 160)
        return plain[fz_below(b, 8)];
    if (sel < 208)
        return kr_f32((fz_u32(b) & 0x807fffffu) | ((118u + fz_below(b, 20)) << 23));
    static const uint32_t edge[16] = {0x00000000u, 0x80000000u, 0xbf800000u, 0xbf000000u,
                                      0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
                                      0x00000001u, 0x7f7fffffu, 0x0da24260u, 0x7149f2cau,
                                      0x7fa00001u, 0xc0000000u, 0x00800000u, 0x477fe000u};
    return kr_f32(edge[fz_below(b, 16)]);
}

/* Parts (decoded last; none once the input runs out, and none for about
 * half the inputs): per cache a zeroed part, or types (mostly a valid
 * pair), convert, dim, its own strides, a scale; entry_bytes sometimes 0
 * after all (valid when every part sets dim). Geometry is resolved after. */
static void decode_parts(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t H = d->n_heads;
    if (fz_u8(in) < 128)
        return;
    c->has_parts = 1;
    int all_dims = 1;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        kve_cache_part *p = &d->part[k];
        if (fz_u8(in) < 32) { /* zeroed: desc-wide entry and strides, bytes */
            all_dims = 0;
            continue;
        }
        p->src_dtype = pick_dtype(in);
        p->dst_dtype = fz_u8(in) < 64 ? p->src_dtype : pick_dtype(in);
        int raw = p->src_dtype == KVE_DTYPE_RAW || p->dst_dtype == KVE_DTYPE_RAW;
        uint8_t cs = fz_u8(in);
        uint32_t natural = !raw && (p->src_dtype != p->dst_dtype || (cs & 1));
        static const uint32_t bad_convert[3] = {2, 3, 0xffffffffu};
        p->convert = cs < 250 ? natural : cs < 253 ? !natural : bad_convert[cs - 253];
        p->dim = fz_u8(in) < 96 ? 0 : 1 + fz_below(in, 8);
        all_dims &= p->dim != 0;
        uint32_t ss = kr_size(p->src_dtype), ds = kr_size(p->dst_dtype);
        /* sizes as a valid part would have them (an invalid one is refused before use) */
        size_t dim = p->dim ? p->dim : d->entry_bytes / ds;
        size_t se = dim * ss, de = dim * ds;
        if (fz_u8(in) >= 144) { /* its own strides, each nested on the resolved inner ones */
            int nhd = d->layout == KVE_LAYOUT_NHD;
            size_t n_inner = nhd ? H : d->page_size, n_mid = nhd ? d->page_size : H;
            p->src_stride_head = pick_part_stride(in, se, ss);
            size_t sh = p->src_stride_head   ? p->src_stride_head
                        : d->src_stride_head ? d->src_stride_head
                                             : se;
            p->src_stride_token = pick_part_stride(in, (H - 1) * sh + se, ss);
            size_t *st_inner = nhd ? &p->dst_stride_head : &p->dst_stride_slot;
            size_t *st_mid = nhd ? &p->dst_stride_slot : &p->dst_stride_head;
            size_t d_inner = nhd ? d->dst_stride_head : d->dst_stride_slot;
            size_t d_mid = nhd ? d->dst_stride_slot : d->dst_stride_head;
            *st_inner = pick_part_stride(in, de, ds);
            size_t vi = *st_inner ? *st_inner : d_inner ? d_inner : de;
            *st_mid = pick_part_stride(in, (n_inner - 1) * vi + de, ds);
            size_t vm = *st_mid ? *st_mid : d_mid ? d_mid : n_inner * de;
            p->dst_stride_page =
                pick_part_stride(in, (n_mid - 1) * vm + (n_inner - 1) * vi + de, ds);
        }
        int fp8 = p->dst_dtype == KVE_DTYPE_FP8_E4M3 || p->dst_dtype == KVE_DTYPE_FP8_E5M2;
        uint8_t sc = fz_u8(in);
        uint32_t per_head = fz_u8(in) & 1;
        if (p->convert == 1 && fp8 ? sc >= 64 : sc >= 232) {
            uint32_t n = per_head ? H : 1;
            float *scale = c->scale[k] = (float *)fz_alloc(n * sizeof(float), 0);
            for (uint32_t h = 0; h < n; h++)
                scale[h] = pick_scale(in);
            p->scale = scale;
        }
        uint8_t ph = fz_u8(in);
        p->scale_per_head = ph < 250 ? per_head : ph < 253 ? 2 : 0xffffffffu;
    }
    if (fz_u8(in) >= (all_dims ? 160 : 250))
        d->entry_bytes = 0;
}

/* Each cache's part resolved as the header says, and the verdict on the
 * parts (kve_cache_part, kve_check_part's rules as documented): known
 * types, convert 0 or 1, equal types without conversion, no raw bytes to
 * convert, a scale only to convert to fp8, scale_per_head 0 or 1, and
 * without dim a whole number of the cache's elements in entry_bytes >= 1. */
static void resolve_parts(cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t H = d->n_heads, ps = d->page_size;
    int nhd = d->layout == KVE_LAYOUT_NHD;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        const kve_cache_part *p = &d->part[k];
        cw_cache *g = &c->g[k];
        int st_ok = (uint32_t)p->src_dtype <= KVE_DTYPE_FP8_E5M2,
            dt_ok = (uint32_t)p->dst_dtype <= KVE_DTYPE_FP8_E5M2;
        g->st = st_ok ? p->src_dtype : KVE_DTYPE_RAW;
        g->dt = dt_ok ? p->dst_dtype : KVE_DTYPE_RAW;
        g->ss = kr_size(g->st);
        g->ds = kr_size(g->dt);
        int raw = g->st == KVE_DTYPE_RAW || g->dt == KVE_DTYPE_RAW;
        int fp8 = g->dt == KVE_DTYPE_FP8_E4M3 || g->dt == KVE_DTYPE_FP8_E5M2;
        c->bad |= !st_ok || !dt_ok || p->convert > 1 || (!p->convert && g->st != g->dt) ||
                  (p->convert && raw) || (p->scale && (p->convert != 1 || !fp8)) ||
                  p->scale_per_head > 1 ||
                  (!p->dim && (!d->entry_bytes || d->entry_bytes % g->ds));
        g->conv = p->convert == 1;
        g->dim = p->dim ? p->dim : (uint32_t)(d->entry_bytes / g->ds);
        g->scale = p->scale;
        g->se = (size_t)g->dim * g->ss;
        g->de = (size_t)g->dim * g->ds;
#define CW_OR(a, b) ((a) ? (a) : (b))
        g->s_head = CW_OR(p->src_stride_head, CW_OR(d->src_stride_head, g->se));
        g->s_tok = CW_OR(p->src_stride_token, CW_OR(d->src_stride_token, H * g->se));
        g->d_head = CW_OR(p->dst_stride_head, CW_OR(d->dst_stride_head, nhd ? g->de : ps * g->de));
        g->d_slot = CW_OR(p->dst_stride_slot, CW_OR(d->dst_stride_slot, nhd ? H * g->de : g->de));
        g->d_page = CW_OR(p->dst_stride_page, CW_OR(d->dst_stride_page, ps * H * g->de));
#undef CW_OR
        size_t T = d->n_tokens;
        g->src_span = T ? (T - 1) * g->s_tok + (H - 1) * g->s_head + g->se : 0;
        g->dst_span =
            (d->n_pages - 1) * g->d_page + (ps - 1) * g->d_slot + (H - 1) * g->d_head + g->de;
    }
}

/* Sources of converting caches: besides the seed's random bits (mostly
 * NaN, inf or out of every narrow format's range for f32 and bf16), values
 * near the narrow formats' ranges, and exact ties of their roundings. */
static void style_sources(fz_bytes *in, cw_case *c)
{
    if (!c->has_parts || !(fz_u8(in) & 1))
        return;
    uint64_t rng = fz_u64(in);
    static const uint32_t tie[4] = {13, 16, 20, 21}; /* f16, bf16, e4m3, e5m2 from f32 */
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        if (!g->conv || (g->st != KVE_DTYPE_F32 && g->st != KVE_DTYPE_BF16))
            continue;
        for (size_t i = 0; i + g->ss <= g->src_span; i += g->ss) {
            uint64_t r = fz_mix(&rng);
            uint32_t m = (uint32_t)r & 0x7fffffu, e = 127u - 30 + (uint32_t)((r >> 23) % 48);
            if ((r >> 40) % 4 == 0) {
                uint32_t b = tie[(r >> 42) & 3];
                m = (m & ~((1u << b) - 1)) | (1u << (b - 1));
            }
            if ((r >> 44) % 16 == 0)
                e = (uint32_t)((r >> 48) % 3); /* binary32 subnormals and the smallest normals */
            uint32_t v = (uint32_t)(r >> 63) << 31 | e << 23 | m;
            kr_store(c->src[k] + i, g->ss, g->st == KVE_DTYPE_F32 ? v : v >> 16);
        }
    }
}

/* Logical entry (page, in-page slot, head): what conflicts are counted in. */
static size_t entry_index(const cw_case *c, int64_t page, int64_t s, size_t h)
{
    return ((size_t)page * c->d.page_size + (size_t)(s % c->d.page_size)) * c->d.n_heads + h;
}

/* Byte offset of that entry in cache k. */
static size_t entry_at(const cw_case *c, uint32_t k, int64_t page, int64_t s, size_t h)
{
    const cw_cache *g = &c->g[k];
    return (size_t)page * g->d_page + (size_t)(s % c->d.page_size) * g->d_slot + h * g->d_head;
}

/* The reference's moves: every valid pair's entry, in every cache (its
 * stored bytes, whatever the part's types), from the cache as it was before
 * the call; c->bad for what the library must refuse, c->amb for each entry
 * whose outcome would depend on the order (one moved to twice, or from one
 * also moved to, itself included). */
static void reference_moves(cw_case *c, uint8_t *hit, size_t n_entries)
{
    const kve_cache_write_desc *d = &c->d;
    if (!d->moves || c->bad)
        return;
    if (!d->n_moves) {
        c->bad = d->n_tokens || d->n_move_rows;
        return;
    }
    c->bad |= d->n_move_rows && !d->max_moves;
    size_t n_pairs = 0, max_pairs = (size_t)d->n_move_rows * d->n_heads * d->max_moves;
    size_t *pairs = (size_t *)malloc((max_pairs + 1) * 2 * sizeof *pairs);
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
                size_t a = entry_index(c, ps, pair[0], h), b = entry_index(c, pd, pair[1], h);
                c->amb[b] |= hit[b];
                hit[b] = 1;
                pairs[2 * n_pairs] = a;
                pairs[2 * n_pairs++ + 1] = b;
                for (uint32_t q = 0; q < d->n_caches; q++)
                    memcpy(c->ref[q] + entry_at(c, q, pd, pair[1], h),
                           c->before[q] + entry_at(c, q, ps, pair[0], h), c->g[q].de);
            }
        }
    }
    for (size_t x = 0; x < n_pairs; x++)
        c->amb[pairs[2 * x + 1]] |= hit[pairs[2 * x]];
    memset(hit, 0, n_entries + 1); /* the writes then overwrite what they hit */
    free(pairs);
}

/* Entry (t, h) of cache k into the reference at byte @p at: its bytes, or
 * each element converted (kve_convert_ref.h: dst = convert(float(src) /
 * scale), the division only with a scale). */
static void reference_entry(cw_case *c, uint32_t k, size_t t, size_t h, size_t at)
{
    const cw_cache *g = &c->g[k];
    const uint8_t *src = c->src[k] + t * g->s_tok + h * g->s_head;
    uint8_t *dst = c->ref[k] + at;
    if (!g->conv) {
        memcpy(dst, src, g->de);
        return;
    }
    float scale = g->scale ? g->scale[c->d.part[k].scale_per_head ? h : 0] : 1.0f;
    for (uint32_t i = 0; i < g->dim; i++)
        kr_store(dst + (size_t)i * g->ds, g->ds,
                 kr_convert(kr_load(src + (size_t)i * g->ss, g->ss), g->st, g->dt, g->scale != NULL,
                            scale));
}

/* The reference write, and its verdict on every row, slot and page. */
static void reference_write(cw_case *c)
{
    const kve_cache_write_desc *d = &c->d;
    size_t H = d->n_heads, n_entries = c->n_entries = (size_t)d->n_pages * d->page_size * H;
    uint8_t *hit = (uint8_t *)calloc(n_entries + 1, 1);
    c->amb = (uint8_t *)calloc(n_entries + 1, 1);
    reference_moves(c, hit, n_entries);
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
            size_t e = entry_index(c, page, s, h);
            c->amb[e] = hit[e]; /* a write replaces a move; two tokens' order is open */
            hit[e] = 1;
            for (uint32_t k = 0; k < d->n_caches; k++)
                reference_entry(c, k, t, h, entry_at(c, k, page, s, h));
        }
    }
    free(hit);
}

/* The library's answer against the reference's verdicts and bytes (every
 * byte but those of entries two tokens wrote). */
static void check_write(cw_case *c, kve_status st)
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
            FZ_CHECK(!memcmp(c->before[k], c->dst[k], c->g[k].dst_span),
                     "an error (%s) wrote cache %u", kve_status_string(st), k);
    }
    if (st == KVE_OK && !c->bad)
        for (uint32_t k = 0; k < c->d.n_caches; k++) {
            for (size_t e = 0; e < c->n_entries; e++)
                if (c->amb[e]) {
                    size_t h = e % c->d.n_heads, ps = c->d.page_size;
                    size_t at = entry_at(c, k, (int64_t)(e / c->d.n_heads / ps),
                                         (int64_t)(e / c->d.n_heads % ps), h);
                    memcpy(c->ref[k] + at, c->dst[k] + at, c->g[k].de);
                }
            if (memcmp(c->ref[k], c->dst[k], c->g[k].dst_span)) {
                size_t x = 0;
                while (c->ref[k][x] == c->dst[k][x])
                    x++;
                FZ_FAIL("cache %u differs from the reference write at byte %zu: 0x%02x, want "
                        "0x%02x (types %d -> %d, convert %u, dim %u)",
                        k, x, c->dst[k][x], c->ref[k][x], (int)c->g[k].st, (int)c->g[k].dt,
                        c->d.part[k].convert, c->g[k].dim);
            }
        }
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
    free(c->amb);
    for (uint32_t k = 0; k < KVE_MAX_CACHES; k++)
        free(c->scale[k]);
}

/* What the caches' allocation decides: typed elements loaded whole need
 * aligned bases and strides (the library's check; the header does not say
 * so, so a misaligned request's acceptance is not asserted), nested
 * strides, and overlapping entries (brute force). */
static void check_geometry(cw_case *c)
{
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        size_t src_all = (size_t)(uintptr_t)c->src[k] | g->s_tok | g->s_head,
               dst_all = (size_t)(uintptr_t)c->dst[k] | g->d_page | g->d_slot | g->d_head;
        c->exact &= src_all % g->ss == 0 && dst_all % g->ds == 0 && dst_nested(c, k);
        c->dst_overlap |= dst_overlaps(c, k);
    }
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
    decode_parts(&in, &c);
    resolve_parts(&c);
    for (uint32_t k = 0; k < c.d.n_caches; k++)
        if (c.g[k].src_span > (1u << 20) || c.g[k].dst_span > (1u << 20)) {
            free_case(&c);
            return 0;
        }
    fill_caches(&c);
    style_sources(&in, &c);
    check_geometry(&c);
    reference_write(&c);
    check_write(&c, kve_cache_write(ctx, &c.d));
    free_case(&c);
    return 0;
}

/* test_cache_write.c — kve_cache_write on every layout against a plain
 * reference, and the state's mapping driving real writes end to end (bad
 * input: tests/core/test_errors_state.c). */
#include "kve_state_test.h"

enum { MAXC = 2 };

/* A write problem and its buffers; dst_ref gets the reference's writes. */
typedef struct {
    kve_cache_write_desc d;
    size_t src_bytes, dst_bytes;
    unsigned char *src[MAXC], *dst[MAXC], *ref[MAXC];
    int64_t *slots;
    int32_t *token_row, *pages; /* pages: block table or indices */
    int32_t indptr[8], last[8];
} cw_case;

static void fill(uint64_t *rng, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)kt_next(rng);
}

/* The page of (row, slot) and the byte offset of (page, slot, head), spelled
 * out per layout rather than through resolved strides. */
static size_t ref_offset(const cw_case *c, int32_t row, int64_t slot, uint32_t h)
{
    const kve_cache_write_desc *d = &c->d;
    size_t ps = d->pages.page_size, H = d->n_heads, E = d->entry_bytes, page = (size_t)row;
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE)
        page = (size_t)c->pages[(size_t)row * d->pages.blocks_per_row + (size_t)slot / ps];
    else if (d->pages.kind == KVE_PAGES_INDPTR)
        page = (size_t)c->pages[c->indptr[row] + (size_t)slot / ps];
    size_t in = (size_t)slot % ps;
    size_t sp = d->dst_stride_page ? d->dst_stride_page : ps * H * E;
    if (d->layout == KVE_LAYOUT_NHD)
        return page * sp + in * (d->dst_stride_slot ? d->dst_stride_slot : H * E) +
               h * (d->dst_stride_head ? d->dst_stride_head : E);
    return page * sp + h * (d->dst_stride_head ? d->dst_stride_head : ps * E) +
           in * (d->dst_stride_slot ? d->dst_stride_slot : E);
}

static void run_case(kve_context *ctx, cw_case *c, uint64_t *rng)
{
    kve_cache_write_desc *d = &c->d;
    size_t E = d->entry_bytes;
    for (int k = 0; k < MAXC; k++) {
        fill(rng, c->src[k], c->src_bytes);
        fill(rng, c->dst[k], c->dst_bytes);
        memcpy(c->ref[k], c->dst[k], c->dst_bytes);
        d->src[k] = c->src[k];
        d->dst[k] = c->dst[k];
    }
    d->n_caches = MAXC;
    size_t st = d->src_stride_token ? d->src_stride_token : d->n_heads * E;
    size_t sh = d->src_stride_head ? d->src_stride_head : E;
    for (uint32_t t = 0; t < d->n_tokens; t++)
        for (uint32_t h = 0; h < d->n_heads; h++) {
            int64_t s = c->slots[t * d->slots_stride_token + h * d->slots_stride_head];
            if (s < 0)
                continue;
            for (int k = 0; k < MAXC; k++)
                memcpy(c->ref[k] + ref_offset(c, c->token_row[t], s, h),
                       c->src[k] + t * st + h * sh, E);
        }
    KT_OK(kve_cache_write(ctx, d));
    for (int k = 0; k < MAXC; k++)
        ck_assert_msg(memcmp(c->dst[k], c->ref[k], c->dst_bytes) == 0,
                      "cache %d differs from the reference", k);
}

/* Random distinct slots per (row, head) below row_len[row]; tokens spread
 * over rows; some -1. */
static void cw_slots(cw_case *c, uint64_t *rng, const uint32_t *row_len, uint32_t n_rows,
                     int shared_heads)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t H = shared_heads ? 1 : d->n_heads;
    d->slots_stride_head = shared_heads ? 0 : 1;
    d->slots_stride_token = H;
    c->slots = (int64_t *)malloc((size_t)d->n_tokens * H * 8);
    c->token_row = (int32_t *)malloc((size_t)d->n_tokens * 4);
    uint32_t used[8][8] = {{0}}; /* next free index per (row, head) */
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        uint32_t row = kt_below(rng, n_rows);
        c->token_row[t] = (int32_t)row;
        for (uint32_t h = 0; h < H; h++) {
            /* A permutation by stepping with a unit coprime to row_len. */
            uint32_t len = row_len[row], i = used[row][h]++;
            int64_t s = i < len ? (int64_t)((i * 7 + h) % len) : -1;
            if (len % 7 == 0)
                s = i < len ? (int64_t)i : -1;
            c->slots[(size_t)t * H + h] = kt_below(rng, 6) == 0 ? -1 : s;
        }
    }
    d->slots = c->slots;
    d->token_row = c->token_row;
}

static void cw_alloc(cw_case *c, size_t src_bytes, size_t dst_bytes)
{
    c->src_bytes = src_bytes;
    c->dst_bytes = dst_bytes;
    for (int k = 0; k < MAXC; k++) {
        c->src[k] = (unsigned char *)malloc(src_bytes);
        c->dst[k] = (unsigned char *)malloc(dst_bytes);
        c->ref[k] = (unsigned char *)malloc(dst_bytes);
    }
}

static void cw_free(cw_case *c)
{
    for (int k = 0; k < MAXC; k++) {
        free(c->src[k]);
        free(c->dst[k]);
        free(c->ref[k]);
    }
    free(c->slots);
    free(c->token_row);
    free(c->pages);
}

/* vLLM: NHD pages through a block table; odd entry size. */
START_TEST(layout_nhd_block_table)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 11;
    cw_case c;
    memset(&c, 0, sizeof c);
    c.d = (kve_cache_write_desc){.n_tokens = 14,
                                 .n_heads = 3,
                                 .entry_bytes = 6,
                                 .layout = KVE_LAYOUT_NHD,
                                 .pages.page_size = 4,
                                 .pages.n_pages = 20,
                                 .pages.n_rows = 3,
                                 .pages.kind = KVE_PAGES_BLOCK_TABLE,
                                 .pages.blocks_per_row = 5};
    c.pages = (int32_t *)malloc(15 * 4);
    for (int i = 0; i < 15; i++) /* distinct pages, scattered */
        c.pages[i] = (int32_t)((i * 7 + 3) % 20);
    const uint32_t len[3] = {20, 20, 20};
    cw_slots(&c, &rng, len, 3, _i);
    c.d.pages.block_table = c.pages;
    cw_alloc(&c, 14 * 3 * 6, 20 * 4 * 3 * 6);
    run_case(ctx, &c, &rng);
    cw_free(&c);
    kve_context_destroy(ctx);
}
END_TEST

/* FlashInfer: HND pages through indptr / indices / last_page_len. */
START_TEST(layout_hnd_indptr)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 12;
    cw_case c;
    memset(&c, 0, sizeof c);
    c.d = (kve_cache_write_desc){.n_tokens = 9,
                                 .n_heads = 2,
                                 .entry_bytes = 130,
                                 .layout = KVE_LAYOUT_HND,
                                 .pages.page_size = 3,
                                 .pages.n_pages = 10,
                                 .pages.n_rows = 3,
                                 .pages.kind = KVE_PAGES_INDPTR};
    const int32_t ip[4] = {0, 2, 5, 6}, last[3] = {2, 3, 1};
    memcpy(c.indptr, ip, sizeof ip);
    memcpy(c.last, last, sizeof last);
    c.pages = (int32_t *)malloc(6 * 4);
    const int32_t idx[6] = {9, 2, 4, 0, 7, 5};
    memcpy(c.pages, idx, sizeof idx);
    const uint32_t len[3] = {5, 9, 1};
    cw_slots(&c, &rng, len, 3, 0);
    c.d.pages.indptr = c.indptr;
    c.d.pages.indices = c.pages;
    c.d.pages.last_page_len = c.last;
    cw_alloc(&c, 9 * 2 * 130, 10 * 2 * 3 * 130);
    run_case(ctx, &c, &rng);
    cw_free(&c);
    kve_context_destroy(ctx);
}
END_TEST

/* Contiguous [seq][head][slot][entry] (HND, one page per sequence), and
 * NHD with padded strides and a strided source. */
START_TEST(layout_contiguous_and_strided)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 13;
    for (int variant = 0; variant < 2; variant++) {
        cw_case c;
        memset(&c, 0, sizeof c);
        c.d = (kve_cache_write_desc){.n_tokens = 12,
                                     .n_heads = 4,
                                     .entry_bytes = 1 + 7 * variant,
                                     .layout = variant ? KVE_LAYOUT_NHD : KVE_LAYOUT_HND,
                                     .pages.page_size = 16,
                                     .pages.n_pages = 4,
                                     .pages.n_rows = 4,
                                     .pages.kind = KVE_PAGES_NONE};
        size_t E = c.d.entry_bytes, dst = 4 * 16 * 4 * E;
        size_t src = 12 * 4 * E;
        if (variant) {
            c.d.src_stride_token = 4 * E + 10;
            c.d.dst_stride_head = E + 3;
            c.d.dst_stride_slot = 4 * (E + 3);
            c.d.dst_stride_page = 16 * 4 * (E + 3) + 64;
            src = 12 * (4 * E + 10);
            dst = 4 * c.d.dst_stride_page;
        }
        const uint32_t len[4] = {16, 16, 16, 16};
        cw_slots(&c, &rng, len, 4, variant);
        cw_alloc(&c, src, dst);
        run_case(ctx, &c, &rng);
        cw_free(&c);
    }
    kve_context_destroy(ctx);
}
END_TEST

/* Layers, heads, page size, blocks per row and entry bytes of a
 * block-table cache per layer, NHD. */
typedef struct {
    uint32_t layers, heads, page_size, blocks_per_row, entry;
} kve_cw_geometry;

/* Every valid slot of the state's rows holds, in each layer's cache @p
 * cache (pages by @p bt), the entry tagged (position, layer * H + head). */
static void expect_cache_holds_tables(kve_state *st, const kve_state_layout *lay,
                                      const kve_cw_geometry *g, uint32_t rows, const int32_t *bt,
                                      unsigned char *const *cache)
{
    uint32_t H = g->heads, PS = g->page_size, E = g->entry;
    int32_t *tab = (int32_t *)malloc(lay->row_elems * 4);
    for (uint32_t r = 0; r < rows; r++) {
        KT_OK(kve_state_read_slots(st, r, tab, lay->row_elems));
        for (uint32_t l = 0; l < g->layers; l++)
            for (uint32_t h = 0; h < H; h++) {
                size_t t = (size_t)(lay->table_layers > 1 ? l : 0) * lay->table_heads +
                           (lay->table_heads > 1 ? h : 0);
                for (uint32_t s = 0; s < lay->max_slots; s++) {
                    int32_t p = tab[t * lay->max_slots + s];
                    if (p < 0)
                        continue;
                    size_t page = (size_t)bt[r * g->blocks_per_row + s / PS];
                    size_t off = (page * PS + s % PS) * H * E + h * E;
                    uint32_t got[2];
                    memcpy(got, cache[l] + off, 8);
                    ck_assert_msg(got[0] == (uint32_t)p && got[1] == l * H + h,
                                  "row %u layer %u head %u slot %u: (%u, %u), want (%d, %u)", r, l,
                                  h, s, got[0], got[1], p, l * H + h);
                }
            }
    }
    free(tab);
}

/* state_drives_writes' geometry: two rows appended together, layers, heads,
 * page size, blocks per row, entry bytes; tokens a step appends at most. */
enum {
    DW_ROWS = 2, DW_LAYERS = 2, DW_HEADS = 3, DW_PAGE = 8, DW_BPR = 6, DW_ENTRY = 8,
    DW_MAX_TOKENS = 20
};

/* What its steps share: the block table (DW_ROWS x DW_BPR page ids, also
 * the indptr writes' indices) and the state's step buffers. */
typedef struct {
    const int32_t *bt;
    const ks_step *sb;
} kve_cw_drive;

/* A step's tokens, row 0's n_new[0] then row 1's n_new[1] (@p info: the
 * rows after the append): each token's row, and each entry's position in
 * its tag (the layer's part is set per layer). Returns the step's tokens. */
static uint32_t drive_tag_tokens(const uint32_t *n_new, const kve_state_seq_info *info,
                                 int32_t *token_row, uint32_t *tag)
{
    uint32_t T = n_new[0] + n_new[1], H = DW_HEADS;
    for (uint32_t t = 0; t < T; t++) {
        token_row[t] = t < n_new[0] ? 0 : 1;
        uint32_t pos = t < n_new[0] ? info[0].n_tokens - n_new[0] + t
                                    : info[1].n_tokens - n_new[1] + (t - n_new[0]);
        for (uint32_t h = 0; h < H; h++)
            tag[(t * H + h) * 2] = pos;
    }
    return T;
}

/* The write of a step's @p T tokens into layer cache @p cache: its slots and
 * move lists from table layer @p table_layer of the step buffers, pages by
 * the block table. */
static kve_cache_write_desc drive_write_desc(const kve_cw_drive *dw, uint32_t table_layer,
                                             uint32_t th, uint32_t T, const uint32_t *tag,
                                             const int32_t *token_row, unsigned char *cache)
{
    const kve_step_buffers *b = &dw->sb->b;
    return (kve_cache_write_desc){
        .n_tokens = T,
        .n_heads = DW_HEADS,
        .entry_bytes = DW_ENTRY,
        .n_caches = 1,
        .src = {tag},
        .dst = {cache},
        .layout = KVE_LAYOUT_NHD,
        .pages.page_size = DW_PAGE,
        .pages.n_pages = 2 * DW_ROWS * DW_BPR,
        .slots = b->slot_mapping + (size_t)table_layer * DW_MAX_TOKENS * th,
        .slots_stride_token = th,
        .slots_stride_head = th > 1,
        .token_row = token_row,
        .pages.n_rows = DW_ROWS,
        .pages.kind = KVE_PAGES_BLOCK_TABLE,
        .pages.block_table = dw->bt,
        .pages.blocks_per_row = DW_BPR,
        .moves = b->moves + (size_t)table_layer * 2 * th * b->max_moves * 2,
        .n_moves = b->n_moves + (size_t)table_layer * 2 * th,
        .n_move_rows = 2,
        .max_moves = b->max_moves,
        .moves_stride_row = th,
        .moves_stride_head = th > 1};
}

/* FlashInfer's way: the attention's page table (n_valid tokens a row) is
 * too short for a write whose moves read a slot past n_valid, and must be
 * refused; @p w then takes every reserved page of each row (@p ip_all,
 * @p last_all, indices dw->bt). Returns whether the short table was refused. */
static uint32_t drive_indptr_pages(kve_context *ctx, const kve_cw_drive *dw,
                                   kve_cache_write_desc *w, const kve_state_seq_info *info,
                                   uint32_t table_layer, uint32_t th, const int32_t *ip_all,
                                   const int32_t *last_all)
{
    const kve_step_buffers *b = &dw->sb->b;
    uint32_t PS = DW_PAGE, BPR = DW_BPR, past = 0;
    int32_t ip_valid[DW_ROWS + 1], last_valid[DW_ROWS];
    for (uint32_t r = 0; r < DW_ROWS; r++) {
        uint32_t pages = (info[r].n_valid + PS - 1) / PS;
        ip_valid[r + 1] = (r ? ip_valid[r] : 0) + (int32_t)pages;
        last_valid[r] = (int32_t)(info[r].n_valid - (pages - 1) * PS);
        for (uint32_t h = 0; h < th; h++) {
            size_t list = ((size_t)table_layer * 2 + r) * th + h;
            for (uint32_t k = 0; k < b->n_moves[list]; k++)
                past |= b->moves[(list * b->max_moves + k) * 2] >= (int32_t)info[r].n_valid;
        }
    }
    ip_valid[0] = 0;
    int32_t idx_valid[DW_ROWS * DW_BPR];
    for (uint32_t r = 0, n = 0; r < DW_ROWS; r++)
        for (int32_t p = 0; p < ip_valid[r + 1] - ip_valid[r]; p++)
            idx_valid[n++] = dw->bt[r * BPR + p];
    w->pages.kind = KVE_PAGES_INDPTR;
    w->pages.block_table = NULL;
    w->pages.blocks_per_row = 0;
    w->pages.indptr = ip_valid;
    w->pages.indices = idx_valid;
    w->pages.last_page_len = last_valid;
    if (past)
        EXPECT_ERR(kve_cache_write(ctx, w), KVE_ERR_RANGE,
                   "describe every reserved page of the row to kve_cache_write");
    w->pages.indptr = ip_all;
    w->pages.indices = dw->bt;
    w->pages.last_page_len = last_all;
    return past;
}

/* End to end: the state's mapping, written into an NHD cache through a
 * block table (vLLM) or an indptr page table (FlashInfer, as
 * docs/INTEGRATION.md wires it: the write is given every reserved page of a
 * row, since a round's moves read slots past the new n_valid); every valid
 * slot of every head then holds its token. */
START_TEST(state_drives_writes)
{
    kve_context *ctx = ks_context();
    uint32_t flags = _i % 3 == 0   ? 0
                     : _i % 3 == 1 ? KVE_SHARED_HEADS
                                   : KVE_SHARED_HEADS | KVE_SHARED_LAYERS;
    const int indptr = _i >= 3;
    enum { L = DW_LAYERS, H = DW_HEADS, PS = DW_PAGE, BPR = DW_BPR, ROWS = DW_ROWS, E = DW_ENTRY };
    kve_state_desc d = ks_desc(flags, ROWS, L, H, 30, 4, 6, PS * BPR);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    int32_t bt[ROWS * BPR];
    for (int i = 0; i < ROWS * BPR; i++)
        bt[i] = (ROWS * BPR - 1 - i) * 2; /* reversed, every other page */
    /* FlashInfer's page table of the write: row r's BPR reserved pages (bt's
     * row, as indices), all of them full. */
    int32_t ip_all[ROWS + 1], last_all[ROWS];
    for (int r = 0; r <= ROWS; r++)
        ip_all[r] = r * BPR;
    for (int r = 0; r < ROWS; r++)
        last_all[r] = PS;
    uint32_t refused = 0; /* writes an n_valid-sized indptr could not describe */
    size_t cache_bytes = (size_t)2 * ROWS * BPR * PS * H * E;
    unsigned char *cache[L];
    for (int l = 0; l < L; l++)
        cache[l] = (unsigned char *)calloc(1, cache_bytes);
    KT_OK(kve_state_admit(st, 0, 1, 5));
    KT_OK(kve_state_admit(st, 1, 2, 12));
    uint32_t rows[2] = {0, 1};
    ks_step sb;
    ks_step_init(&sb, st, DW_MAX_TOKENS, 2, 12);
    const kve_cw_drive dw = {bt, &sb};
    for (uint32_t step = 0; step < 300; step++) {
        uint32_t n_new[2] = {step ? 1 : 5, step ? 1 + step % 3 : 12};
        int32_t token_row[DW_MAX_TOKENS];
        uint32_t tag[DW_MAX_TOKENS * H * 2]; /* entry = (pos, layer * H + head) */
        KT_OK(kve_state_append(st, 2, rows, n_new, &sb.b));
        kve_state_seq_info info[2];
        KT_OK(kve_state_get_seq(st, 0, &info[0]));
        KT_OK(kve_state_get_seq(st, 1, &info[1]));
        uint32_t T = drive_tag_tokens(n_new, info, token_row, tag);
        for (uint32_t l = 0; l < L; l++) {
            for (uint32_t t = 0; t < T * H; t++)
                tag[t * 2 + 1] = l * H + t % H;
            uint32_t table_layer = lay.table_layers > 1 ? l : 0, th = lay.table_heads;
            kve_cache_write_desc w =
                drive_write_desc(&dw, table_layer, th, T, tag, token_row, cache[l]);
            if (indptr)
                refused +=
                    drive_indptr_pages(ctx, &dw, &w, info, table_layer, th, ip_all, last_all);
            KT_OK(kve_cache_write(ctx, &w));
        }
    }
    if (indptr)
        ck_assert_uint_gt(refused, 10); /* rounds ran, and moved entries from past n_valid */
    ks_step_free(&sb);
    kve_cw_geometry g = {L, H, PS, BPR, E};
    expect_cache_holds_tables(st, &lay, &g, ROWS, bt, cache);
    for (int l = 0; l < L; l++)
        free(cache[l]);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Moves alone (n_tokens = 0): no source entry is read, so a source pointer
 * anywhere (here the cache itself) aliases nothing; the move runs. Such a
 * call was refused KVE_ERR_ALIAS, the source taken to span one token
 * (found by fuzz_cache_write). */
START_TEST(moves_alone_read_no_source)
{
    kve_context *ctx = ks_context();
    unsigned char cache[4 * 8];
    for (int i = 0; i < 32; i++)
        cache[i] = (unsigned char)i;
    int64_t slots[1] = {0};
    int32_t token_row[1] = {0}, moves[2] = {3, 0};
    uint32_t n_moves[1] = {1};
    kve_cache_write_desc d = {.n_tokens = 0, .n_heads = 1, .entry_bytes = 8, .n_caches = 1,
                              .src = {cache}, .dst = {cache}, .layout = KVE_LAYOUT_NHD,
                              .pages.page_size = 4, .pages.n_pages = 1, .slots = slots, .slots_stride_token = 1,
                              .token_row = token_row, .pages.n_rows = 1, .pages.kind = KVE_PAGES_NONE,
                              .moves = moves, .n_moves = n_moves, .n_move_rows = 1,
                              .max_moves = 1, .moves_stride_row = 1};
    KT_OK(kve_cache_write(ctx, &d));
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(cache[i], 24 + i); /* slot 3's entry in slot 0 */
    d.n_tokens = 1; /* with a token the source is read: it overlaps the cache */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.src[0]");
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(cache_write, layout_nhd_block_table, 0, 2),
        KVE_TEST(cache_write, layout_hnd_indptr),
        KVE_TEST(cache_write, layout_contiguous_and_strided),
        KVE_LOOP_TEST(cache_write, state_drives_writes, 0, 6),
        KVE_TEST(cache_write, moves_alone_read_no_source),
    };
    const kve_suite_spec spec = {"cache_write", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

/*
 * kve_state_draft.h — speculative steps (kve_state_draft, issue 38
 * deliverable 5) on any context: the CPU's (tests/state/test_state_draft.c)
 * and the emulated device's (tests/emu/test_emu_draft.c). Every buffer the
 * library reads or writes is backend memory (kve_alloc, kve_copy), as an
 * engine on a GPU holds it.
 *
 * kd_run drives two states of one desc with the same sequences: A sees
 * each step's drafts (kve_state_draft, random lengths), then commits a
 * random accepted prefix of them (an append of n_accept tokens) and copies
 * their K/V entries from the draft slots with one kve_cache_write
 * (src_slots, the append's moves in the same call); B only ever sees the
 * accepted appends. After every draft and every commit A equals B bit for
 * bit (tables, seq info, running digest, the commit's mapping and move
 * lists), A's cache holds at every valid slot the entry of the token its
 * table names, and at the end kve_state_rebuild from the accepted history
 * gives A's rows again.
 */
#ifndef KVE_STATE_DRAFT_H
#define KVE_STATE_DRAFT_H

#include "kve_state_test.h"

enum { KD_ROWS = 3, KD_DRAFT = 6, KD_HIST = 400 };

/* Backend memory of @p bytes, filled from @p host (or 0xA5 when NULL). */
static inline void *kd_dev(kve_context *ctx, size_t bytes, const void *host)
{
    void *p = NULL;
    KT_OK(kve_alloc(ctx, bytes, &p));
    unsigned char *fill = (unsigned char *)malloc(bytes);
    ck_assert_ptr_nonnull(fill);
    if (host)
        memcpy(fill, host, bytes);
    else
        memset(fill, 0xA5, bytes);
    KT_OK(kve_copy(ctx, p, fill, bytes, KVE_COPY_HOST_TO_BACKEND));
    free(fill);
    return p;
}

static inline void kd_up(kve_context *ctx, void *dev, const void *host, size_t bytes)
{
    KT_OK(kve_copy(ctx, dev, host, bytes, KVE_COPY_HOST_TO_BACKEND));
}

static inline void kd_down(kve_context *ctx, void *host, const void *dev, size_t bytes)
{
    KT_OK(kve_copy(ctx, host, dev, bytes, KVE_COPY_BACKEND_TO_HOST));
}

/* One state's step buffers in backend memory and their host copies. */
typedef struct {
    kve_step_buffers b; /* backend pointers */
    int64_t *map;       /* host copies */
    int32_t *moves;
    uint32_t *n_moves;
    size_t map_n, moves_n, lists;
} kd_step;

static inline void kd_step_init(kve_context *ctx, kd_step *s, kve_state *st, uint32_t tl,
                                uint32_t th, uint32_t max_tokens, uint32_t max_new)
{
    memset(s, 0, sizeof *s);
    s->b.max_tokens = max_tokens;
    s->b.max_rows = KD_ROWS;
    KT_OK(kve_state_max_moves(st, max_new, &s->b.max_moves));
    s->map_n = (size_t)tl * max_tokens * th;
    s->lists = (size_t)tl * KD_ROWS * th;
    s->moves_n = s->lists * s->b.max_moves * 2;
    s->b.slot_mapping = (int64_t *)kd_dev(ctx, s->map_n * 8, NULL);
    s->b.moves = (int32_t *)kd_dev(ctx, s->moves_n * 4, NULL);
    s->b.n_moves = (uint32_t *)kd_dev(ctx, s->lists * 4, NULL);
    s->map = (int64_t *)malloc(s->map_n * 8);
    s->moves = (int32_t *)malloc(s->moves_n * 4);
    s->n_moves = (uint32_t *)malloc(s->lists * 4);
    ck_assert(s->map && s->moves && s->n_moves);
}

static inline void kd_step_read(kve_context *ctx, kd_step *s)
{
    kd_down(ctx, s->map, s->b.slot_mapping, s->map_n * 8);
    kd_down(ctx, s->moves, s->b.moves, s->moves_n * 4);
    kd_down(ctx, s->n_moves, s->b.n_moves, s->lists * 4);
}

static inline void kd_step_free(kve_context *ctx, kd_step *s)
{
    KT_OK(kve_free(ctx, s->b.slot_mapping));
    KT_OK(kve_free(ctx, s->b.moves));
    KT_OK(kve_free(ctx, s->b.n_moves));
    free(s->map);
    free(s->moves);
    free(s->n_moves);
}

/* The entry of position @p pos in head @p h: what the cache must hold. */
static inline int32_t kd_entry(uint32_t pos, uint32_t h) { return (int32_t)(pos * 8 + h + 1); }

/* The engine's K cache of table layer tl: [rows][page_size][heads] int32
 * entries, one page a row (KVE_PAGES_NONE, NHD). */
typedef struct {
    kve_context *ctx;
    uint32_t tl, th, ps;
    int32_t *cache[8];      /* backend, one per table layer */
    int32_t *src;           /* backend [max_tokens][th] */
    int64_t *src_slots;     /* backend [max_tokens][th] */
    int32_t *token_row;     /* backend [max_tokens] */
    int32_t *h_src, *h_row; /* host */
    int64_t *h_src_slots;
    uint32_t max_tokens;
} kd_cache;

static inline kve_cache_write_desc kd_desc(const kd_cache *c, uint32_t l, uint32_t n,
                                           const kd_step *s)
{
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    d.n_tokens = n;
    d.n_heads = c->th;
    d.entry_bytes = 4;
    d.n_caches = 1;
    d.src[0] = c->src;
    d.dst[0] = c->cache[l];
    d.layout = KVE_LAYOUT_NHD;
    d.pages.page_size = c->ps;
    d.pages.n_pages = KD_ROWS;
    d.slots = s->b.slot_mapping + (size_t)l * s->b.max_tokens * c->th;
    d.slots_stride_token = c->th;
    d.slots_stride_head = c->th > 1;
    d.token_row = c->token_row;
    d.pages.n_rows = KD_ROWS;
    d.pages.kind = KVE_PAGES_NONE;
    return d;
}

/* Every valid slot of every row of @p st holds its token's entry. */
static inline void kd_expect_cache(const kd_cache *c, kve_state *st, const int *active)
{
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    int32_t *tab = (int32_t *)malloc(lay.row_elems * 4);
    size_t layer = (size_t)KD_ROWS * c->ps * c->th;
    int32_t *host = (int32_t *)malloc(layer * 4);
    for (uint32_t l = 0; l < c->tl; l++) {
        kd_down(c->ctx, host, c->cache[l], layer * 4);
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            if (!active[r])
                continue;
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, r, &info));
            KT_OK(kve_state_read_slots(st, r, tab, lay.row_elems));
            for (uint32_t h = 0; h < c->th; h++)
                for (uint32_t s = 0; s < info.n_valid; s++) {
                    int32_t pos = tab[((size_t)l * c->th + h) * lay.max_slots + s];
                    int32_t got = host[((size_t)r * c->ps + s) * c->th + h];
                    ck_assert_msg(got == kd_entry((uint32_t)pos, h),
                                  "row %u layer %u head %u slot %u: holds %d, the table names "
                                  "position %d (entry %d)",
                                  r, l, h, s, got, pos, kd_entry((uint32_t)pos, h));
                }
        }
    }
    free(host);
    free(tab);
}

/* A and B agree on every active row. */
static inline void kd_expect_same(kve_state *a, kve_state *b, const int *active)
{
    for (uint32_t r = 0; r < KD_ROWS; r++)
        if (active[r])
            ks_expect_same(a, r, b, r);
}

typedef struct {
    uint32_t drafts_past_room; /* drafts that reached a round (n_valid + n_draft > C) */
    uint32_t commits_round;    /* commits that ran a round */
    uint32_t rejected;         /* drafts of which some were rejected */
} kd_counts;

/*
 * The run (see the top): state flags @p flags; commits through
 * kve_state_append_device when @p device_commit, else kve_state_append.
 * @p steps steps (< KD_HIST). Returns what the steps met.
 */
static inline kd_counts kd_run(kve_context *ctx, uint32_t flags, uint64_t seed, int device_commit,
                               uint32_t steps)
{
    kve_state_desc d = ks_desc(flags, KD_ROWS, 2, 3, 12, 2, 4, 40);
    d.max_draft = KD_DRAFT;
    kve_state *a = NULL, *b = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &a));
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &b));
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(a, &lay));
    const uint32_t tl = lay.table_layers, th = lay.table_heads, max_tokens = 64;
    kd_step sa, sb;
    kd_step_init(ctx, &sa, a, tl, th, max_tokens, 32);
    kd_step_init(ctx, &sb, b, tl, th, max_tokens, 32);
    kd_cache c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.tl = tl;
    c.th = th;
    c.ps = d.max_slots + KD_DRAFT;
    c.max_tokens = max_tokens;
    ck_assert_uint_le(tl, 8);
    for (uint32_t l = 0; l < tl; l++) {
        size_t n = (size_t)KD_ROWS * c.ps * th;
        int32_t *fill = (int32_t *)malloc(n * 4);
        for (size_t i = 0; i < n; i++)
            fill[i] = -7; /* another request's bytes */
        c.cache[l] = (int32_t *)kd_dev(ctx, n * 4, fill);
        free(fill);
    }
    c.src = (int32_t *)kd_dev(ctx, (size_t)max_tokens * th * 4, NULL);
    c.src_slots = (int64_t *)kd_dev(ctx, (size_t)max_tokens * th * 8, NULL);
    c.token_row = (int32_t *)kd_dev(ctx, (size_t)max_tokens * 4, NULL);
    c.h_src = (int32_t *)malloc((size_t)max_tokens * th * 4);
    c.h_src_slots = (int64_t *)malloc((size_t)max_tokens * th * 8);
    c.h_row = (int32_t *)malloc((size_t)max_tokens * 4);
    uint32_t *dev_call = (uint32_t *)kd_dev(ctx, 2 * KD_ROWS * 4, NULL);
    uint32_t rows[KD_ROWS], n_draft[KD_ROWS], n_acc[KD_ROWS], call[2 * KD_ROWS];
    uint32_t hist[KD_ROWS][KD_HIST], n_hist[KD_ROWS] = {0};
    int active[KD_ROWS] = {0};
    uint64_t rng = seed;
    kd_counts seen = {0, 0, 0};
    for (uint32_t r = 0; r < KD_ROWS; r++)
        rows[r] = r;
    for (uint32_t step = 0; step < steps; step++) {
        /* admissions: each row's prompt appended (and written) as a step */
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            n_draft[r] = n_acc[r] = 0;
            if (active[r] && n_hist[r] < KD_HIST - 1)
                continue;
            uint32_t prompt = kt_below(&rng, 9);
            if (active[r]) {
                KT_OK(kve_state_retire(a, r));
                KT_OK(kve_state_retire(b, r));
            }
            KT_OK(kve_state_admit(a, r, 1000 + step * KD_ROWS + r, prompt));
            KT_OK(kve_state_admit(b, r, 1000 + step * KD_ROWS + r, prompt));
            active[r] = 1;
            n_hist[r] = 0;
            n_acc[r] = prompt; /* the prompt: written from the sources, not drafted */
        }
        kve_state_seq_info before[KD_ROWS];
        for (uint32_t r = 0; r < KD_ROWS; r++)
            KT_OK(kve_state_get_seq(a, r, &before[r]));
        uint32_t any_prompt = 0;
        for (uint32_t r = 0; r < KD_ROWS; r++)
            any_prompt |= n_acc[r];
        if (!any_prompt) {
            /* 1. drafts: n_draft[r] of them, tentative, at capacity + i */
            uint32_t total = 0;
            for (uint32_t r = 0; r < KD_ROWS; r++) {
                n_draft[r] = kt_below(&rng, KD_DRAFT + 1);
                n_acc[r] = kt_below(&rng, 3) ? kt_below(&rng, n_draft[r] + 1) : n_draft[r];
                seen.drafts_past_room += before[r].n_valid + n_draft[r] > before[r].capacity;
                seen.rejected += n_acc[r] < n_draft[r];
                call[r] = rows[r];
                call[KD_ROWS + r] = n_draft[r];
            }
            kd_up(ctx, dev_call, call, sizeof call);
            KT_OK(kve_state_draft(a, KD_ROWS, dev_call, dev_call + KD_ROWS, KD_DRAFT, &sa.b));
            KT_OK(kve_context_synchronize(ctx));
            kd_step_read(ctx, &sa);
            for (size_t i = 0; i < sa.lists && i < (size_t)tl * KD_ROWS * th; i++)
                ck_assert_uint_eq(sa.n_moves[i], 0);
            for (uint32_t r = 0; r < KD_ROWS; r++) {
                ck_assert_uint_eq(before[r].draft_first, before[r].capacity);
                ck_assert_uint_eq(before[r].max_draft, KD_DRAFT);
                for (uint32_t i = 0; i < n_draft[r]; i++, total++) {
                    for (uint32_t l = 0; l < tl; l++)
                        for (uint32_t h = 0; h < th; h++)
                            ck_assert_int_eq(sa.map[((size_t)l * max_tokens + total) * th + h],
                                             (int64_t)before[r].capacity + i);
                    for (uint32_t h = 0; h < th; h++)
                        c.h_src[total * th + h] = kd_entry(before[r].n_tokens + i, h);
                    c.h_row[total] = (int32_t)r;
                }
            }
            kd_expect_same(a, b, active); /* a draft changes nothing */
            /* the engine writes the drafts' K/V into the draft slots */
            kd_up(ctx, c.src, c.h_src, (size_t)total * th * 4);
            kd_up(ctx, c.token_row, c.h_row, (size_t)total * 4);
            for (uint32_t l = 0; l < tl && total; l++) {
                kve_cache_write_desc w = kd_desc(&c, l, total, &sa);
                KT_OK(kve_cache_write(ctx, &w));
            }
        }
        /* 2. commit: an append of the accepted tokens to A, and to B */
        uint32_t total = 0;
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            call[r] = rows[r];
            call[KD_ROWS + r] = n_acc[r];
            for (uint32_t i = 0; i < n_acc[r]; i++, total++) {
                for (uint32_t h = 0; h < th; h++) {
                    /* a prompt's entries come from the sources; an accepted
                     * draft's only from its draft slot, capacity + i */
                    c.h_src[total * th + h] = any_prompt ? kd_entry(before[r].n_tokens + i, h) : -3;
                    c.h_src_slots[total * th + h] = (int64_t)before[r].capacity + i;
                }
                c.h_row[total] = (int32_t)r;
            }
            if (n_acc[r])
                hist[r][n_hist[r]++] = n_acc[r];
        }
        if (device_commit) {
            kd_up(ctx, dev_call, call, sizeof call);
            KT_OK(kve_state_append_device(a, KD_ROWS, dev_call, dev_call + KD_ROWS, 32, &sa.b));
        } else {
            KT_OK(kve_state_append(a, KD_ROWS, rows, n_acc, &sa.b));
        }
        KT_OK(kve_state_append(b, KD_ROWS, rows, n_acc, &sb.b));
        KT_OK(kve_context_synchronize(ctx));
        kd_step_read(ctx, &sa);
        kd_step_read(ctx, &sb);
        for (uint32_t l = 0; l < tl; l++)
            for (size_t i = 0; i < (size_t)total * th; i++)
                ck_assert_int_eq(sa.map[(size_t)l * max_tokens * th + i],
                                 sb.map[(size_t)l * max_tokens * th + i]);
        ck_assert(!memcmp(sa.n_moves, sb.n_moves, sa.lists * 4));
        for (size_t i = 0; i < sa.lists; i++)
            ck_assert(!memcmp(sa.moves + i * sa.b.max_moves * 2, sb.moves + i * sb.b.max_moves * 2,
                              (size_t)sa.n_moves[i] * 8));
        kd_expect_same(a, b, active);
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            kve_state_seq_info now;
            KT_OK(kve_state_get_seq(a, r, &now));
            seen.commits_round += n_draft[r] && now.round > before[r].round;
        }
        /* 3. the cache: the round's moves and the accepted entries, from
         * the draft slots (or, for a prompt, from the sources), in one call */
        kd_up(ctx, c.src, c.h_src, (size_t)(total ? total : 1) * th * 4);
        kd_up(ctx, c.src_slots, c.h_src_slots, (size_t)(total ? total : 1) * th * 8);
        kd_up(ctx, c.token_row, c.h_row, (size_t)(total ? total : 1) * 4);
        for (uint32_t l = 0; l < tl; l++) {
            kve_cache_write_desc w = kd_desc(&c, l, total, &sa);
            w.moves = sa.b.moves + (size_t)l * KD_ROWS * th * sa.b.max_moves * 2;
            w.n_moves = sa.b.n_moves + (size_t)l * KD_ROWS * th;
            w.n_move_rows = KD_ROWS;
            w.max_moves = sa.b.max_moves;
            w.moves_stride_row = th;
            w.moves_stride_head = th > 1;
            if (!any_prompt)
                w.src_slots = c.src_slots;
            KT_OK(kve_cache_write(ctx, &w));
        }
        KT_OK(kve_context_synchronize(ctx));
        kd_expect_cache(&c, a, active);
    }
    /* rebuild from the accepted history alone gives A's rows */
    for (uint32_t r = 0; r < KD_ROWS; r++) {
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(b, r, &info));
        KT_OK(kve_state_rebuild(a, r, info.seq_id, info.prompt_len, info.n_tokens, hist[r],
                                n_hist[r], NULL, 0));
        ks_expect_same(a, r, b, r);
    }
    KT_OK(kve_free(ctx, dev_call));
    for (uint32_t l = 0; l < tl; l++)
        KT_OK(kve_free(ctx, c.cache[l]));
    KT_OK(kve_free(ctx, c.src));
    KT_OK(kve_free(ctx, c.src_slots));
    KT_OK(kve_free(ctx, c.token_row));
    free(c.h_src);
    free(c.h_src_slots);
    free(c.h_row);
    kd_step_free(ctx, &sa);
    kd_step_free(ctx, &sb);
    kve_state_destroy(a);
    kve_state_destroy(b);
    return seen;
}

#endif

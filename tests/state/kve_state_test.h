/* kve_state_test.h — helpers of the state suites (a state on the CPU is
 * tests/lib/kve_test_state.h's): a straightforward reference of docs/SPEC.md
 * "Schedule" and "Placement" for one row (one kve_evict call per table),
 * step buffers, and a model of an engine's cache that the steps' moves and
 * writes drive. */
#ifndef KVE_STATE_TEST_H
#define KVE_STATE_TEST_H

#include "kve_suite.h"
#include "kve_test_state.h"
#include "kve_test_util.h"

/* The reference row: tables [tables][capacity] in host memory, placed by
 * docs/SPEC.md "Placement" as written there (not the library's code). */
typedef struct {
    kve_state_desc d;
    uint32_t tl, th, C, P, n, nv, round;
    uint64_t seq_id;
    uint64_t digest; /* running digest, SPEC §11, from kve_evict's round digests */
    int32_t *tab, *tmp; /* [tables][C] */
} ks_ref;

static inline void ks_ref_init(ks_ref *r, const kve_state_desc *d, uint64_t seq_id, uint32_t P)
{
    memset(r, 0, sizeof *r);
    r->d = *d;
    r->tl = (d->schedule.flags & KVE_SHARED_LAYERS) ? 1 : d->n_layers;
    r->th = (d->schedule.flags & KVE_SHARED_HEADS) ? 1 : d->n_heads;
    KT_OK(kve_schedule_capacity(&d->schedule, P, &r->C));
    r->P = P;
    r->seq_id = seq_id;
    size_t n = (size_t)r->tl * r->th * r->C;
    r->tab = (int32_t *)malloc(n * 4);
    r->tmp = (int32_t *)malloc(r->C * 4);
    for (size_t i = 0; i < n; i++)
        r->tab[i] = -1;
}

static inline void ks_ref_free(ks_ref *r)
{
    free(r->tab);
    free(r->tmp);
}

/* One round of table @p t (full): evict by kve_evict, then the old
 * survivors (positions < pos0) keep their slot below their count and the
 * others fill the free slots there, lowest to lowest; the call's survivors
 * follow in position order. */
static inline void ks_ref_round(kve_context *ctx, ks_ref *r, size_t t, uint32_t pos0)
{
    const kve_schedule *s = &r->d.schedule;
    kve_seq seq = {r->seq_id, r->P, r->round};
    int32_t *sp = r->tab + t * r->C;
    kve_batch b = {s->seed, s->flags, 1, &seq, 1, 1, r->d.layer_offset + (uint32_t)(t / r->th),
                   r->d.head_offset + (uint32_t)(t % r->th), r->C, s->budget, s->window, sp, r->C, NULL, 0};
    kt_out o;
    KT_OK(kt_evict(ctx, &b, &o));
    ck_assert_uint_eq(o.n_evicted[0], s->interval);
    uint64_t w = ((s->flags & KVE_SHARED_HEADS) ? r->d.n_heads : 1) *
                 (uint64_t)((s->flags & KVE_SHARED_LAYERS) ? r->d.n_layers : 1);
    r->digest += w * o.digest[0];
    for (uint32_t i = 0; i < o.n_evicted[0]; i++)
        sp[o.evicted[i]] = -1;
    kt_out_free(&o);
    uint32_t old = 0, mine = 0;
    for (uint32_t i = 0; i < r->C; i++)
        old += sp[i] >= 0 && sp[i] < (int32_t)pos0;
    for (uint32_t i = 0; i < r->C; i++)
        r->tmp[i] = -1;
    for (uint32_t i = 0; i < old; i++) /* old survivors already below their count stay */
        if (sp[i] >= 0 && sp[i] < (int32_t)pos0)
            r->tmp[i] = sp[i];
    for (uint32_t i = old, hole = 0; i < r->C; i++)
        if (sp[i] >= 0 && sp[i] < (int32_t)pos0) {
            while (r->tmp[hole] >= 0)
                hole++;
            r->tmp[hole] = sp[i];
        }
    for (int32_t p = (int32_t)pos0; p < (int32_t)r->n; p++) /* positions in order */
        for (uint32_t i = 0; i < r->C; i++)
            if (sp[i] == p)
                r->tmp[old + mine++] = p;
    memcpy(sp, r->tmp, r->C * 4);
}

/* One append of @p k tokens; @p map [tables][k] gets each token's final
 * slot or -1 (NULL: none). */
static inline void ks_ref_call(kve_context *ctx, ks_ref *r, uint32_t k, int64_t *map)
{
    size_t tables = (size_t)r->tl * r->th;
    uint32_t pos0 = r->n, left = k;
    while (left) {
        if (r->nv == r->C) {
            for (size_t t = 0; t < tables; t++)
                ks_ref_round(ctx, r, t, pos0);
            r->round++;
            r->nv = r->C - r->d.schedule.interval;
        }
        uint32_t cnt = left < r->C - r->nv ? left : r->C - r->nv;
        for (size_t t = 0; t < tables; t++)
            for (uint32_t i = 0; i < cnt; i++)
                r->tab[t * r->C + r->nv + i] = (int32_t)(r->n + i);
        r->nv += cnt;
        r->n += cnt;
        left -= cnt;
    }
    for (size_t t = 0; t < tables && map; t++)
        for (uint32_t i = 0; i < k; i++) {
            map[t * k + i] = -1;
            for (uint32_t s = 0; s < r->C; s++)
                if (r->tab[t * r->C + s] == (int32_t)(pos0 + i))
                    map[t * k + i] = s;
        }
}

/* The step buffers of a state, sized for @p max_tokens and @p max_rows. */
typedef struct {
    kve_step_buffers b;
    uint32_t tl, th;
} ks_step;

static inline void ks_step_init(ks_step *s, kve_state *st, uint32_t max_tokens, uint32_t max_rows,
                                uint32_t max_new)
{
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    s->tl = lay.table_layers;
    s->th = lay.table_heads;
    memset(&s->b, 0, sizeof s->b);
    s->b.max_tokens = max_tokens;
    s->b.max_rows = max_rows;
    KT_OK(kve_state_max_moves(st, max_new, &s->b.max_moves));
    size_t lists = (size_t)s->tl * max_rows * s->th;
    s->b.slot_mapping = (int64_t *)malloc((size_t)s->tl * max_tokens * s->th * 8);
    s->b.moves = (int32_t *)malloc(lists * s->b.max_moves * 8);
    s->b.n_moves = (uint32_t *)malloc(lists * 4);
    ck_assert(s->b.slot_mapping && s->b.moves && s->b.n_moves);
}

static inline void ks_step_free(ks_step *s)
{
    free(s->b.slot_mapping);
    free(s->b.moves);
    free(s->b.n_moves);
}

/* Slot of token @p tok in table t of a step's mapping. */
static inline int64_t ks_map_at(const ks_step *s, size_t t, uint32_t tok)
{
    return s->b.slot_mapping[((t / s->th) * s->b.max_tokens + tok) * s->th + t % s->th];
}

/*
 * A model of an engine's cache for one state: per row and table, the
 * position whose bytes each slot holds (KS_FOREIGN: another request's).
 * ks_apply runs a step's moves (reading the cache as it was before the
 * call, and checking that no slot of a list is both a source and a
 * destination) and then its writes.
 */
#define KS_FOREIGN (-7)
typedef struct {
    uint32_t rows, tables, slots;
    int32_t *pos, *before; /* [rows][tables][slots] */
} ks_cache;

static inline void ks_cache_init(ks_cache *c, uint32_t rows, uint32_t tables, uint32_t slots)
{
    c->rows = rows;
    c->tables = tables;
    c->slots = slots;
    size_t n = (size_t)rows * tables * slots;
    c->pos = (int32_t *)malloc(n * 4);
    c->before = (int32_t *)malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        c->pos[i] = KS_FOREIGN;
}

static inline void ks_cache_free(ks_cache *c)
{
    free(c->pos);
    free(c->before);
}

/* Apply one append's outputs (rows[i] got n_new[i] tokens from pos0[i]). */
static inline void ks_apply(ks_cache *c, const ks_step *s, uint32_t n_rows, const uint32_t *rows,
                            const uint32_t *n_new, const uint32_t *pos0)
{
    size_t per_row = (size_t)c->tables * c->slots;
    memcpy(c->before, c->pos, c->rows * per_row * 4);
    uint32_t tok = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        for (uint32_t t = 0; t < c->tables; t++) {
            size_t l = ((size_t)(t / s->th) * s->b.max_rows + i) * s->th + t % s->th;
            uint32_t n = s->b.n_moves[l];
            const int32_t *mv = s->b.moves + l * s->b.max_moves * 2;
            int32_t *dst = c->pos + rows[i] * per_row + (size_t)t * c->slots;
            const int32_t *src = c->before + rows[i] * per_row + (size_t)t * c->slots;
            ck_assert_uint_le(n, s->b.max_moves);
            for (uint32_t k = 0; k < n; k++) {
                for (uint32_t q = 0; q < n; q++)
                    ck_assert_msg(mv[2 * k] != mv[2 * q + 1],
                                  "row %u table %u: slot %d is a move's source and destination",
                                  rows[i], t, mv[2 * k]);
                ck_assert(mv[2 * k] >= 0 && (uint32_t)mv[2 * k] < c->slots);
                ck_assert(mv[2 * k + 1] >= 0 && mv[2 * k + 1] < mv[2 * k]);
                dst[mv[2 * k + 1]] = src[mv[2 * k]];
            }
            for (uint32_t q = 0; q < n_new[i]; q++) {
                int64_t slot = ks_map_at(s, t, tok + q);
                if (slot >= 0)
                    dst[slot] = (int32_t)(pos0[i] + q);
            }
        }
        tok += n_new[i];
    }
}

/*
 * The placement after an append to row @p row whose tokens started at
 * @p pos0: in every table the valid slots are exactly 0 .. n_valid-1, the
 * call's tokens are the last ones in position order, every other one is
 * older, and (with @p c) the cache holds at every valid slot the token the
 * table names.
 */
static inline void ks_expect_placement(kve_state *st, uint32_t row, uint32_t pos0,
                                       const ks_cache *c)
{
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, row, &info));
    ck_assert_uint_eq(info.n_used, info.n_valid);
    int32_t *buf = (int32_t *)malloc(lay.row_elems * 4);
    KT_OK(kve_state_read_slots(st, row, buf, lay.row_elems));
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    for (size_t t = 0; t < tables; t++) {
        const int32_t *sp = buf + t * lay.max_slots;
        int mine = 1; /* scanning down: the call's block, then older tokens */
        for (uint32_t i = lay.max_slots; i-- > 0;) {
            ck_assert_msg((sp[i] >= 0) == (i < info.n_valid),
                          "row %u table %zu slot %u = %d with n_valid = %u", row, t, i, sp[i],
                          info.n_valid);
            if (i >= info.n_valid)
                continue;
            if (mine && sp[i] < (int32_t)pos0)
                mine = 0;
            ck_assert_msg(mine ? (i + 1 >= info.n_valid || sp[i] < sp[i + 1])
                               : sp[i] < (int32_t)pos0,
                          "row %u table %zu slot %u = %d: out of place (call from %u)", row, t, i,
                          sp[i], pos0);
            if (c)
                ck_assert_msg(c->pos[((size_t)row * c->tables + t) * c->slots + i] == sp[i],
                              "row %u table %zu slot %u: cache holds %d, table says %d", row, t, i,
                              c->pos[((size_t)row * c->tables + t) * c->slots + i], sp[i]);
        }
    }
    free(buf);
}

/* Row @p row of @p st equals the reference (tables and counts). */
static inline void ks_expect_row(kve_state *st, uint32_t row, const ks_ref *r)
{
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    int32_t *buf = (int32_t *)malloc(lay.row_elems * 4);
    KT_OK(kve_state_read_slots(st, row, buf, lay.row_elems));
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    for (size_t t = 0; t < tables; t++)
        for (uint32_t i = 0; i < lay.max_slots; i++) {
            int32_t want = i < r->C ? r->tab[t * r->C + i] : -1;
            ck_assert_msg(buf[t * lay.max_slots + i] == want,
                          "row %u table %zu slot %u: %d, reference %d (n = %u)", row, t, i,
                          buf[t * lay.max_slots + i], want, r->n);
        }
    free(buf);
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, row, &info));
    ck_assert_uint_eq(info.n_tokens, r->n);
    ck_assert_uint_eq(info.round, r->round);
    ck_assert_uint_eq(info.capacity, r->C);
    uint64_t digest = 1;
    KT_OK(kve_state_read_digest(st, row, &digest));
    ck_assert_msg(digest == r->digest, "row %u: running digest 0x%016llx, reference 0x%016llx (n = %u)",
                  row, (unsigned long long)digest, (unsigned long long)r->digest, r->n);
}

/* Two rows (possibly of two states) hold identical tables and counts. */
static inline void ks_expect_same(kve_state *a, uint32_t ra, kve_state *b, uint32_t rb)
{
    kve_state_layout la;
    KT_OK(kve_state_get_layout(a, &la));
    int32_t *x = (int32_t *)malloc(la.row_elems * 4), *y = (int32_t *)malloc(la.row_elems * 4);
    KT_OK(kve_state_read_slots(a, ra, x, la.row_elems));
    KT_OK(kve_state_read_slots(b, rb, y, la.row_elems));
    for (size_t i = 0; i < la.row_elems; i++)
        ck_assert_msg(x[i] == y[i], "rows %u and %u differ at element %zu: %d vs %d", ra, rb, i,
                      x[i], y[i]);
    free(x);
    free(y);
    kve_state_seq_info p, q;
    KT_OK(kve_state_get_seq(a, ra, &p));
    KT_OK(kve_state_get_seq(b, rb, &q));
    ck_assert(p.active == q.active && p.prompt_len == q.prompt_len && p.seq_id == q.seq_id);
    ck_assert(p.capacity == q.capacity && p.n_tokens == q.n_tokens && p.round == q.round);
    ck_assert(p.n_valid == q.n_valid && p.n_used == q.n_used);
    uint64_t dp = 1, dq = 2;
    KT_OK(kve_state_read_digest(a, ra, &dp));
    KT_OK(kve_state_read_digest(b, rb, &dq));
    ck_assert_msg(dp == dq, "rows %u and %u: running digests 0x%016llx vs 0x%016llx", ra, rb,
                  (unsigned long long)dp, (unsigned long long)dq);
}

#endif

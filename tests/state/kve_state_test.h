/* kve_state_test.h — helpers of the state suite: a state on the CPU, and a
 * straightforward reference of docs/SPEC.md "Schedule" for one row (one
 * kve_evict call per table, one token at a time). */
#ifndef KVE_STATE_TEST_H
#define KVE_STATE_TEST_H

#include "kve_suite.h"
#include "kve_test_util.h"

/* Expect @p st from @p expr, and a message containing @p needle. */
#define EXPECT_ERR(expr, st, needle)                                                               \
    do {                                                                                           \
        kve_status got_ = (expr);                                                                  \
        ck_assert_msg(got_ == (st), "%s -> %s (%s), expected %s", #expr, kve_status_string(got_),  \
                      kve_last_error(), kve_status_string(st));                                    \
        ck_assert_msg(strstr(kve_last_error(), (needle)) != NULL,                                  \
                      "%s: message \"%s\" does not name \"%s\"", #expr, kve_last_error(),          \
                      (needle));                                                                   \
    } while (0)

/* A CPU context on one thread: the suite's batches are tiny, and OpenMP
 * teams only slow them down on a loaded machine. Results never depend on
 * the thread count (test_state's caller_memory compares two counts). */
static inline kve_context *ks_context(void)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    KT_OK(kve_context_set_threads(ctx, 1));
    return ctx;
}

static inline kve_state_desc ks_desc(uint32_t flags, uint32_t max_seqs, uint32_t layers,
                                     uint32_t heads, uint32_t budget, uint32_t window,
                                     uint32_t interval, uint32_t max_slots)
{
    kve_state_desc d = {
        {0x5eed0001ULL, flags, budget, window, interval}, max_seqs, layers, heads, 3, 5, max_slots};
    return d;
}

/* A state on @p ctx, with its layout in @p lay. */
static inline kve_state *ks_create(kve_context *ctx, const kve_state_desc *d, kve_state_layout *lay)
{
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, d, NULL, 0, &st));
    KT_OK(kve_state_get_layout(st, lay));
    return st;
}

/* The reference row: tables [tables][capacity] in host memory. */
typedef struct {
    kve_state_desc d;
    uint32_t tl, th, C, P, n, round, free_left;
    uint64_t seq_id;
    int32_t *tab, *freed; /* freed: [tables][C] */
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
    r->freed = (int32_t *)malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        r->tab[i] = -1;
}

static inline void ks_ref_free(ks_ref *r)
{
    free(r->tab);
    free(r->freed);
}

/* Append one token; returns its slot in table t via @p slots [tables]. */
static inline void ks_ref_append(kve_context *ctx, ks_ref *r, int64_t *slots)
{
    const kve_schedule *s = &r->d.schedule;
    size_t tables = (size_t)r->tl * r->th;
    if (r->n >= r->C && r->free_left == 0) {
        kve_seq seq = {r->seq_id, r->P, r->round};
        for (size_t t = 0; t < tables; t++) {
            kve_batch b = {s->seed,
                           s->flags,
                           1,
                           &seq,
                           1,
                           1,
                           r->d.layer_offset + (uint32_t)(t / r->th),
                           r->d.head_offset + (uint32_t)(t % r->th),
                           r->C,
                           s->budget,
                           s->window,
                           r->tab + t * r->C,
                           r->C};
            kt_out o;
            KT_OK(kt_evict(ctx, &b, &o));
            ck_assert_uint_eq(o.n_evicted[0], s->interval);
            for (uint32_t i = 0; i < o.n_evicted[0]; i++) {
                r->freed[t * r->C + i] = o.evicted[i];
                r->tab[t * r->C + o.evicted[i]] = -1;
            }
            kt_out_free(&o);
        }
        r->round++;
        r->free_left = s->interval;
    }
    for (size_t t = 0; t < tables; t++) {
        uint32_t slot =
            r->n < r->C ? r->n : (uint32_t)r->freed[t * r->C + s->interval - r->free_left];
        r->tab[t * r->C + slot] = (int32_t)r->n;
        if (slots)
            slots[t] = slot;
    }
    if (r->n >= r->C)
        r->free_left--;
    r->n++;
}

/* Row @p row of @p st equals the reference (tables and counts). */
static inline void ks_expect_row(kve_state *st, uint32_t row, const ks_ref *r)
{
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    int32_t *buf = (int32_t *)malloc(lay.row_stride * 4);
    KT_OK(kve_state_read_slots(st, row, buf, lay.row_stride));
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
}

/* Two rows (possibly of two states) hold identical tables and counts. */
static inline void ks_expect_same(kve_state *a, uint32_t ra, kve_state *b, uint32_t rb)
{
    kve_state_layout la;
    KT_OK(kve_state_get_layout(a, &la));
    int32_t *x = (int32_t *)malloc(la.row_stride * 4), *y = (int32_t *)malloc(la.row_stride * 4);
    KT_OK(kve_state_read_slots(a, ra, x, la.row_stride));
    KT_OK(kve_state_read_slots(b, rb, y, la.row_stride));
    for (size_t i = 0; i < la.row_stride; i++)
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
}

#endif

/* test_score_alloc.c — no allocation in a CPU score call (issue 60, item 7):
 * the library is linked statically with its allocation functions wrapped
 * (-Wl,--wrap=malloc and kin, tests/state/CMakeLists.txt), so every malloc,
 * calloc, realloc or aligned_alloc of its own code is counted (Check's too:
 * no assertion runs between the counts). A cache
 * state's scoring calls (kve_state_score, kve_state_score_device) use the
 * scratch the state sized at creation and count none, on several threads,
 * for both scorers; kve_score counts none once a call of its shape has
 * grown the context's scratch. Each call must score something, so the test
 * cannot pass on calls that return early. */
#include <stdatomic.h>

#include "kve_score_case.h"
#include "kve_state_test.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);

static atomic_uint sa_allocs;

void *__wrap_malloc(size_t n)
{
    atomic_fetch_add(&sa_allocs, 1);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    atomic_fetch_add(&sa_allocs, 1);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    atomic_fetch_add(&sa_allocs, 1);
    return __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
    atomic_fetch_add(&sa_allocs, 1);
    return __real_aligned_alloc(align, n);
}

enum { SA_ROWS = 3, SA_HEADS = 4, SA_THREADS = 4 };

/* A state of SA_ROWS full rows (the next token runs a round), a key cache
 * of its max_slots, and a scorer's desc (TriAttention when @p tri). */
typedef struct {
    kve_context *ctx;
    kve_state *s;
    kve_state_desc sd;
    kve_score_case kc;
    size_t tables;
    uint32_t rows[SA_ROWS], one[SA_ROWS];
} sa_case;

static void sa_open(sa_case *c, int tri, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &c->ctx));
    KT_OK(kve_context_set_threads(c->ctx, SA_THREADS));
    c->sd = ks_desc(KVE_SCORED, SA_ROWS, 2, SA_HEADS, 24, 4, 4, 0);
    c->sd.schedule.seed = seed;
    uint32_t cap = 0;
    KT_OK(kve_schedule_capacity(&c->sd.schedule, 2, &cap));
    c->sd.max_slots = cap;
    c->sd.score_group = 8;
    KT_OK(kve_state_create(c->ctx, &c->sd, NULL, 0, &c->s));
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(c->s, &lay));
    c->tables = (size_t)lay.table_layers * lay.table_heads;
    uint32_t n_new[SA_ROWS];
    for (uint32_t r = 0; r < SA_ROWS; r++) {
        KT_OK(kve_state_admit(c->s, r, 100 + r, 2));
        c->rows[r] = r;
        c->one[r] = 1;
        n_new[r] = cap; /* fills the row: no round yet */
    }
    KT_OK(kve_state_append(c->s, SA_ROWS, c->rows, n_new, NULL));

    kve_score_desc *d = &c->kc.d;
    d->scorer = tri ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
    d->flags = KVE_SCORE_ZNORM;
    kve_key_cache *k = &d->keys;
    k->dtype = KVE_DTYPE_F16;
    k->head_dim = 16;
    k->n_heads = SA_HEADS;
    k->layout = KVE_LAYOUT_NHD;
    k->pages.kind = KVE_PAGES_NONE;
    k->pages.page_size = c->sd.max_slots;
    k->pages.n_pages = SA_ROWS;
    d->n_rows = SA_ROWS; /* the page table's rows (kve_sc_keys) */
    uint64_t x = seed | 1;
    kve_sc_keys(&c->kc, &x, c->sd.max_slots);
    kve_sc_tri_params(&c->kc, &x);
    d->n_rows = 0;
    d->rows = NULL;
}

static void sa_close(sa_case *c)
{
    kve_state_destroy(c->s);
    kve_score_case_free(&c->kc);
    kve_context_destroy(c->ctx);
}

/* Elements of @p v[0..n) that differ from @p fill. */
static size_t sa_changed(const float *v, size_t n, float fill)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += v[i] != fill;
    return k;
}

/* Both state calls over every row (each due: its next token runs a round),
 * every table layer, allocating nothing; @p warm calls first. */
static void sa_state_calls(int tri, uint64_t seed)
{
    sa_case c;
    sa_open(&c, tri, seed);
    size_t s_tab = c.sd.max_slots, s_row = c.tables * s_tab, n = SA_ROWS * s_row;
    float *scores = (float *)malloc(n * sizeof(float));
    int32_t cache_rows[SA_ROWS] = {0, 1, 2};
    kve_score_desc d = c.kc.d;
    d.cache_rows = cache_rows;
    for (uint32_t tl = 0; tl < c.sd.n_layers; tl++) {
        for (int device = 0; device < 2; device++) {
            for (size_t i = 0; i < n; i++)
                scores[i] = -7.0f;
            unsigned before = atomic_load(&sa_allocs);
            kve_status st = device ? kve_state_score_device(c.s, SA_ROWS, c.rows, c.one, tl,
                                                            &c.kc.d, scores, s_row, s_tab)
                                   : kve_state_score(c.s, SA_ROWS, c.rows, c.one, tl, &d, scores,
                                                     s_row, s_tab);
            unsigned got = atomic_load(&sa_allocs) - before;
            ck_assert_msg(st == KVE_OK, "%s: %s", kve_status_string(st), kve_last_error());
            ck_assert_msg(got == 0,
                          "%s (%s, table layer %u, %d threads): %u allocations in the call",
                          device ? "kve_state_score_device" : "kve_state_score",
                          tri ? "TriAttention" : "K-norm", tl, SA_THREADS, got);
            ck_assert_msg(sa_changed(scores, n, -7.0f) > 0, "the call scored nothing");
        }
    }
    free(scores);
    sa_close(&c);
}

START_TEST(state_knorm)
{
    sa_state_calls(0, 11);
}
END_TEST

START_TEST(state_triattention)
{
    sa_state_calls(1, 12);
}
END_TEST

/* kve_score: the first call of a shape may grow the context's scratch; a
 * second of that shape (or a smaller one) allocates nothing. */
START_TEST(score_repeat)
{
    for (int tri = 0; tri < 2; tri++) {
        kve_context *ctx = NULL;
        KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
        KT_OK(kve_context_set_threads(ctx, SA_THREADS));
        kve_score_case kc;
        kve_score_case_make(&kc, 5 + (uint64_t)tri, tri);
        KT_OK(kve_score(ctx, &kc.d));
        for (int rep = 0; rep < 3; rep++) {
            unsigned before = atomic_load(&sa_allocs);
            kve_status st = kve_score(ctx, &kc.d); /* (Check's asserts allocate) */
            unsigned got = atomic_load(&sa_allocs) - before;
            ck_assert_msg(st == KVE_OK, "%s: %s", kve_status_string(st), kve_last_error());
            ck_assert_msg(got == 0, "kve_score (%s), call %d of its shape: %u allocations",
                          tri ? "TriAttention" : "K-norm", rep + 2, got);
        }
        kve_score_case_free(&kc);
        kve_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(score_alloc, state_knorm),
        KVE_TEST(score_alloc, state_triattention),
        KVE_TEST(score_alloc, score_repeat),
    };
    const kve_suite_spec spec = {"score_alloc", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

/* test_scored.c — KVE_SCORED (docs/SPEC.md "Scored selection") on every CPU
 * ISA this machine runs, at 1, 2 and 3 threads: thousands of random scored
 * batches against a plain model (sort by score descending, position
 * ascending) and against the scalar ISA, the running digest of the evicted
 * tokens, exact edge cases, and NaN candidates refused (the scored
 * arguments' errors: tests/core/test_errors.c). */
#include <math.h>
#include <stdio.h>

#include "golden_scored.h"
#include "kve_cpu_test.h"
#include "kve_scored_model.h"
#include "kve_suite.h"
#include "kve_test_util.h"

/* Elements of head i's evicted tokens (SPEC §11) through kve_keys. */
static uint64_t round_digest_of(kve_context *ctx, const kve_batch *b, size_t i, const int32_t *ev,
                                uint32_t ne)
{
    size_t per_seq = (size_t)b->n_layers * b->n_heads;
    const kve_seq *q = &b->seqs[i / per_seq];
    kve_coord *c = (kve_coord *)malloc((ne + 1) * sizeof *c);
    uint64_t *k = (uint64_t *)malloc((ne + 1) * 8), sum = 0;
    for (uint32_t e = 0; e < ne; e++)
        c[e] = (kve_coord){q->seq_id, b->layer_offset + (uint32_t)(i / b->n_heads % b->n_layers),
                           b->head_offset + (uint32_t)(i % b->n_heads),
                           (uint32_t)b->slot_pos[i * b->slot_pos_stride + (uint32_t)ev[e]], q->round};
    KT_OK(kve_keys(ctx, b->seed ^ KVE_RUN_DIGEST_TWEAK, b->flags & KVE_SHARED_HEADS, c, ne, k));
    for (uint32_t e = 0; e < ne; e++)
        sum += k[e];
    free(c);
    free(k);
    return sum;
}

/* Every context's outputs equal the model's, digests included. */
static void check_ksm_batch(const isa_set *s, const ksm_batch *r, int iter)
{
    const kve_batch *b = &r->b;
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads, per_seq = heads / b->n_seqs;
    uint32_t n = b->n_slots;
    int32_t *ev = (int32_t *)malloc((size_t)n * 4);
    uint64_t *want_run = (uint64_t *)calloc(b->n_seqs, 8);
    kt_out o[3 * N_THREADS];
    for (int k = 0; k < s->n; k++) {
        kve_status st = kt_evict(s->ctx[k], b, &o[k]);
        ck_assert_msg(st == KVE_OK, "iter %d, %s: %s", iter, s->name[k], kve_last_error());
    }
    for (size_t i = 0; i < heads; i++) {
        const int32_t *row = b->slot_pos + i * b->slot_pos_stride;
        const kve_seq *q = &b->seqs[i / per_seq];
        int over;
        uint32_t ne = ksm_head(row, b->scores + i * b->scores_stride, n, q->prompt_len, b->window,
                               b->budget, ev, &over, NULL);
        uint32_t valid = 0;
        for (uint32_t t = 0; t < n; t++)
            valid += row[t] >= 0;
        uint64_t d = round_digest_of(s->ctx[0], b, i, ev, ne);
        want_run[i / per_seq] += 3 * d;
        for (int k = 0; k < s->n; k++) {
            const kt_out *x = &o[k];
            ck_assert_msg(x->n_evicted[i] == ne, "iter %d, %s, head %zu: %u evicted, model %u", iter,
                          s->name[k], i, x->n_evicted[i], ne);
            ck_assert_msg(memcmp(kt_ev(x, i), ev, (size_t)ne * 4) == 0,
                          "iter %d, %s, head %zu: evicted slots differ from the model", iter,
                          s->name[k], i);
            ck_assert_uint_eq(x->n_kept[i], valid - ne);
            ck_assert_int_eq(x->flags[i], over ? KVE_HEAD_OVER_BUDGET : 0);
            ck_assert_msg(x->digest[i] == d, "iter %d, %s, head %zu: round digest", iter,
                          s->name[k], i);
            for (uint32_t t = 0, e = 0, kk = 0; t < n; t++) { /* kept = valid less evicted */
                if (e < ne && ev[e] == (int32_t)t) {
                    e++;
                    continue;
                }
                if (row[t] >= 0)
                    ck_assert_int_eq(kt_kept(x, i)[kk++], (int32_t)t);
            }
        }
    }
    for (int k = 0; k < s->n; k++) {
        for (uint32_t q = 0; q < b->n_seqs; q++)
            ck_assert_msg(o[k].run[q] == want_run[q], "iter %d, %s: run digest", iter, s->name[k]);
        kt_out_free(&o[k]);
    }
    free(ev);
    free(want_run);
}

START_TEST(scored_random_batches)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 1300 + (uint64_t)_i;
    for (int iter = 0; iter < 400; iter++) { /* x 3 loops, ~8 heads a batch */
        ksm_batch r;
        ksm_batch_make(&rng, &r, iter);
        check_ksm_batch(&s, &r, iter);
        ksm_batch_free(&r);
    }
    isa_set_close(&s);
}
END_TEST

/* Decode rounds on one table: each round evicts by fresh scores, the freed
 * slots take the next positions; every ISA agrees with the model. */
START_TEST(scored_decode_rounds)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 77;
    const uint32_t L = 2, H = 3, P = 100, B = 300, W = 64, R = 64, n = B + R;
    int32_t *slots = kt_decode_tables((size_t)L * H, n);
    float *sc = (float *)malloc((size_t)L * H * n * 4);
    kve_seq seq = {5, P, 0};
    uint32_t next = n;
    for (uint32_t round = 0; round < 30; round++) {
        seq.round = round;
        for (uint32_t i = 0; i < L * H * n; i++)
            sc[i] = ksm_score(&rng, (int)(round % 4));
        ksm_batch r = {{seq}, {3, KVE_SCORED, 1, NULL, L, H, 0, 0, n, B, W, slots, n, sc, n}, slots, sc};
        r.b.seqs = r.seqs;
        check_ksm_batch(&s, &r, (int)round);
        kt_out o;
        KT_OK(kt_evict(s.ctx[0], &r.b, &o));
        for (uint32_t h = 0; h < L * H; h++)
            ck_assert_uint_eq(o.n_evicted[h], R);
        next = kt_refill_freed(slots, (size_t)L * H, n, &o, next);
        kt_out_free(&o);
    }
    free(slots);
    free(sc);
    isa_set_close(&s);
}
END_TEST

/* Exact answers: a head of 8 positions 0..7 in slots 0..7, P = W = 0. */
static void expect_head(const isa_set *s, const float *scores, uint32_t n, uint32_t P, uint32_t W,
                        uint32_t B, const int32_t *slots, const int32_t *want, uint32_t n_want,
                        int over)
{
    kve_seq seq = {1, P, 0};
    kve_batch b = {9, KVE_SCORED, 1, &seq, 1, 1, 0, 0, n, B, W, slots, n, scores, n};
    for (int k = 0; k < s->n; k++) {
        kt_out o;
        KT_OK(kt_evict(s->ctx[k], &b, &o));
        ck_assert_msg(o.n_evicted[0] == n_want, "%s: %u evicted, want %u", s->name[k],
                      o.n_evicted[0], n_want);
        ck_assert(memcmp(kt_ev(&o, 0), want, (size_t)n_want * 4) == 0);
        ck_assert_int_eq(o.flags[0], over ? KVE_HEAD_OVER_BUDGET : 0);
        kt_out_free(&o);
    }
}

START_TEST(scored_edges)
{
    isa_set s;
    isa_set_open(&s);
    const int32_t id[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    /* inf first, then the three 5s by position, so slots 5, 1, 2 stay */
    const float a[8] = {1, 5, 5, -0.0f, 0.0f, INFINITY, -INFINITY, 5};
    const int32_t ea[5] = {0, 3, 4, 6, 7};
    expect_head(&s, a, 8, 0, 0, 3, id, ea, 5, 0);
    /* -0.0 == +0.0: the smaller position stays, whichever zero it has */
    const float z1[2] = {-0.0f, 0.0f}, z2[2] = {0.0f, -0.0f};
    const int32_t e1[1] = {1};
    expect_head(&s, z1, 2, 0, 0, 1, id, e1, 1, 0);
    expect_head(&s, z2, 2, 0, 0, 1, id, e1, 1, 0);
    /* all equal: the smallest positions stay, whatever the slot order */
    const int32_t perm[8] = {7, 3, 0, 5, 1, 6, 2, 4};
    const float eq[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    const int32_t e_eq[5] = {0, 1, 3, 5, 7}; /* positions 7, 3, 5, 6, 4 go */
    expect_head(&s, eq, 8, 0, 0, 3, perm, e_eq, 5, 0);
    /* prompt 2, window 2: candidates are positions 2..5; B = 3 keeps one of them */
    const float w[8] = {NAN, NAN, 1, 4, 4, 3, NAN, NAN}; /* NaN only where never read */
    const int32_t ew[3] = {2, 4, 5};
    expect_head(&s, w, 8, 2, 2, 5, id, ew, 3, 0);
    /* over budget: prompt 4 + window 2 > B = 3: every candidate goes, whatever its score */
    const float o[8] = {NAN, NAN, NAN, NAN, INFINITY, 7, NAN, NAN};
    const int32_t eo[2] = {4, 5};
    expect_head(&s, o, 8, 4, 2, 3, id, eo, 2, 1);
    /* budget 0, nothing protected: every slot goes; empty slots are no candidates */
    const int32_t holes[8] = {3, -1, 0, -1, 9, 1, -1, 2};
    const float h[8] = {1, NAN, 2, NAN, -INFINITY, 0, NAN, 5};
    const int32_t eh[5] = {0, 2, 4, 5, 7};
    expect_head(&s, h, 8, 0, 0, 0, holes, eh, 5, 0);
    /* |valid| <= B: nothing evicted, no score read (NaN everywhere) */
    const float nan8[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    expect_head(&s, nan8, 8, 0, 0, 8, id, ea, 0, 0);
    isa_set_close(&s);
}
END_TEST

/* docs/SPEC.md §12's golden cases (the oracle's answers), on every context. */
START_TEST(scored_golden)
{
    isa_set s;
    isa_set_open(&s);
    for (size_t c = 0; c < KVE_GOLDEN_N_SCORED; c++) {
        const kve_golden_scored *g = &kve_golden_scored_cases[c];
        kve_seq seq = {7, g->prompt, 0};
        kve_batch b = {42, KVE_SCORED, 1, &seq, 1, 1, 2, 1, g->n_slots, g->budget, g->window,
                       g->slot_pos, g->n_slots, g->scores, g->n_slots};
        for (int k = 0; k < s.n; k++) {
            kt_out o;
            KT_OK(kt_evict(s.ctx[k], &b, &o));
            ck_assert_msg(o.n_evicted[0] == g->n_evicted && o.n_kept[0] == g->n_kept, "%s, %s",
                          g->name, s.name[k]);
            ck_assert(memcmp(kt_ev(&o, 0), g->evicted, g->n_evicted * 4) == 0);
            ck_assert(memcmp(kt_kept(&o, 0), g->kept, g->n_kept * 4) == 0);
            ck_assert_int_eq(o.flags[0], g->over_budget ? KVE_HEAD_OVER_BUDGET : 0);
            kt_out_free(&o);
        }
    }
    isa_set_close(&s);
}
END_TEST

/* A NaN at a candidate is refused on every ISA and thread count, naming the
 * head and slot; NaN where the spec reads no score is not. */
START_TEST(scored_nan_candidates)
{
    isa_set s;
    isa_set_open(&s);
    enum { N = 16, HEADS = 3 };
    int32_t slots[HEADS * N];
    float sc[HEADS * N];
    kve_seq seq;
    kve_batch b = kt_scored_batch(&seq, slots, sc, HEADS, N);
    for (int k = 0; k < s.n; k++) {
        kt_out o;
        sc[N + 5] = NAN; /* head 1, slot 5: a candidate */
        kt_out_init(&o, &b);
        kve_evict_out v = kt_out_view(&o);
        /* (the outputs after it are unspecified: heads are checked as evicted) */
        EXPECT_ERR(kve_evict(s.ctx[k], &b, &v, NULL, 0), KVE_ERR_INVALID, "[head 1][slot 5] is NaN");
        sc[N + 5] = 1;
        sc[N + 2] = sc[N + 15] = NAN; /* prompt and window: not read */
        KT_OK(kve_evict(s.ctx[k], &b, &v, NULL, 0));
        sc[N + 2] = sc[N + 15] = 0;
        kt_out_free(&o);
    }
    isa_set_close(&s);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(scored, scored_random_batches, 0, 3),
        KVE_TEST(scored, scored_decode_rounds),
        KVE_TEST(scored, scored_edges),
        KVE_TEST(scored, scored_golden),
        KVE_TEST(scored, scored_nan_candidates),
    };
    const kve_suite_spec spec = {"cpu_scored", 900, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

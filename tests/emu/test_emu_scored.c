/*
 * test_emu_scored.c — KVE_SCORED in the device eviction body
 * (kernels_cuda/evict_body.h) on the emulator, every block shape and
 * warp width, scratch shared or global: thousands of random scored
 * batches against the scalar CPU reference and the plain model, digests
 * included; a NaN at a candidate raised through the device's error records
 * with the CPU's message (head and slot); NaN elsewhere never read.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "emu_kernels.h"
#include "emu_suite.h"
#include "golden_scored.h"
#include "kve_scored_model.h"

/* The emulated device's outputs equal the reference context's. */
static void check_case(kve_context *ref, const ksm_batch *r, uint64_t *rng, int iter)
{
    const kve_batch *b = &r->b;
    kt_out want, got;
    KT_OK(kt_evict(ref, b, &want));
    kt_out_init(&got, b);
    kve_evict_out o = kt_out_view(&got);
    kve_emu_errors e;
    kve_emu_errors_reset(&e);
    size_t s = kve_pick_shape(rng);
    kve_emu_pool *pool = kve_pools[s];
    ck_assert_int_eq(kve_emu_evict(pool, 1 + kve_rand_below(rng, 5), iter & 1, b, &o, &e), 0);
    char msg[512];
    ck_assert_msg(kve_emu_errors_status(&e, msg, sizeof msg) == KVE_OK, "iter %d: %s", iter, msg);
    size_t heads = got.heads;
    ck_assert(memcmp(got.n_evicted, want.n_evicted, heads * 4) == 0);
    ck_assert(memcmp(got.n_kept, want.n_kept, heads * 4) == 0);
    ck_assert(memcmp(got.flags, want.flags, heads) == 0);
    ck_assert(memcmp(got.digest, want.digest, heads * 8) == 0);
    ck_assert(memcmp(got.run, want.run, b->n_seqs * 8) == 0);
    int32_t *ev = (int32_t *)malloc((size_t)b->n_slots * 4);
    for (size_t i = 0; i < heads; i++) {
        ck_assert_msg(memcmp(kt_ev(&got, i), kt_ev(&want, i), want.n_evicted[i] * 4) == 0,
                      "iter %d head %zu: evicted slots", iter, i);
        ck_assert(memcmp(kt_kept(&got, i), kt_kept(&want, i), want.n_kept[i] * 4) == 0);
        int over;
        const kve_seq *q = &b->seqs[i / ((size_t)b->n_layers * b->n_heads)];
        uint32_t ne = ksm_head(b->slot_pos + i * b->slot_pos_stride, b->scores + i * b->scores_stride,
                               b->n_slots, q->prompt_len, b->window, b->budget, ev, &over, NULL);
        ck_assert_uint_eq(ne, got.n_evicted[i]);
        ck_assert(memcmp(kt_ev(&got, i), ev, (size_t)ne * 4) == 0);
    }
    free(ev);
    kt_out_free(&want);
    kt_out_free(&got);
}

START_TEST(test_scored_random)
{
    uint64_t rng = 0x5c0de001;
    kve_context *ref = kve_reference();
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000);
    for (unsigned i = 0; i < n; i++) {
        ksm_batch r;
        ksm_batch_make(&rng, &r, (int)i);
        check_case(ref, &r, &rng, (int)i);
        ksm_batch_free(&r);
    }
    kve_context_destroy(ref);
}
END_TEST

/* docs/SPEC.md §12's golden cases (the oracle's answers) on every shape. */
START_TEST(test_scored_golden)
{
    for (size_t s = 0; s < KVE_N_SHAPES; s++)
        for (size_t c = 0; c < KVE_GOLDEN_N_SCORED; c++) {
            const kve_golden_scored *g = &kve_golden_scored_cases[c];
            kve_seq seq = {7, g->prompt, 0};
            kve_batch b = {42, KVE_SCORED, 1, &seq, 1, 1, 2, 1, g->n_slots, g->budget, g->window,
                           g->slot_pos, g->n_slots, g->scores, g->n_slots};
            kt_out o;
            kt_out_init(&o, &b);
            kve_evict_out v = kt_out_view(&o);
            kve_emu_errors e;
            kve_emu_errors_reset(&e);
            ck_assert_int_eq(kve_emu_evict(kve_pools[s], 2, (int)(c & 1), &b, &v, &e), 0);
            char msg[256];
            ck_assert_msg(kve_emu_errors_status(&e, msg, sizeof msg) == KVE_OK, "%s: %s", g->name, msg);
            ck_assert_msg(o.n_evicted[0] == g->n_evicted && o.n_kept[0] == g->n_kept, "%s", g->name);
            ck_assert(memcmp(kt_ev(&o, 0), g->evicted, g->n_evicted * 4) == 0);
            ck_assert(memcmp(kt_kept(&o, 0), g->kept, g->n_kept * 4) == 0);
            ck_assert_int_eq(o.flags[0], g->over_budget ? KVE_HEAD_OVER_BUDGET : 0);
            kt_out_free(&o);
        }
}
END_TEST

/* A NaN at one candidate (or two): the device raises what the CPU refuses. */
START_TEST(test_scored_nan)
{
    uint64_t rng = 0x5c0de002;
    kve_context *ref = kve_reference();
    int raised = 0;
    for (int iter = 0; iter < 300; iter++) {
        ksm_batch r;
        ksm_batch_make(&rng, &r, iter);
        kve_batch *b = &r.b;
        size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
        uint8_t *cand = (uint8_t *)malloc(b->n_slots);
        int32_t *ev = (int32_t *)malloc((size_t)b->n_slots * 4);
        for (int k = 0; k < 2; k++) { /* NaN at up to two random candidates */
            size_t i = kve_rand_below(&rng, (uint32_t)heads);
            int over;
            const kve_seq *q = &b->seqs[i / ((size_t)b->n_layers * b->n_heads)];
            ksm_head(b->slot_pos + i * b->slot_pos_stride, r.scores + i * b->scores_stride,
                     b->n_slots, q->prompt_len, b->window, b->budget, ev, &over, cand);
            uint32_t t = kve_rand_below(&rng, b->n_slots);
            if (cand[t])
                r.scores[i * b->scores_stride + t] = NAN;
        }
        kt_out want, got;
        kve_status st = kt_evict(ref, b, &want);
        char want_msg[512], msg[512];
        snprintf(want_msg, sizeof want_msg, "%s", kve_last_error());
        kt_out_init(&got, b);
        kve_evict_out o = kt_out_view(&got);
        kve_emu_errors e;
        kve_emu_errors_reset(&e);
        size_t s = kve_pick_shape(&rng);
        ck_assert_int_eq(kve_emu_evict(kve_pools[s], 1 + kve_rand_below(&rng, 4), iter & 1, b, &o, &e), 0);
        kve_status dst = kve_emu_errors_status(&e, msg, sizeof msg);
        ck_assert_int_eq(dst, st);
        if (st != KVE_OK) {
            ck_assert_int_eq(st, KVE_ERR_INVALID);
            /* the same head and slot: the device's message adds where it checked */
            ck_assert_msg(strncmp(msg, want_msg, strlen(want_msg)) == 0, "device \"%s\" vs cpu \"%s\"",
                          msg, want_msg);
            raised++;
        }
        free(cand);
        free(ev);
        kt_out_free(&want);
        kt_out_free(&got);
        ksm_batch_free(&r);
    }
    ck_assert_int_gt(raised, 50);
    kve_context_destroy(ref);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(scored, test_scored_golden),
        KVE_TEST(scored, test_scored_random),
        KVE_TEST(scored, test_scored_nan),
    };
    const kve_suite_spec spec = {"emu_scored", 1200, 0, kve_pools_setup, kve_pools_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

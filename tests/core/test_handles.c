/* test_handles.c — contexts and states used after destroy (issue 47 item
 * 7): every public function that takes a destroyed state or context
 * refuses it with KVE_ERR_INVALID naming it, destroying twice too, and a
 * state outlives nothing: kve_context_destroy destroys the states still on
 * it, which are then refused as destroyed. On the old code these were heap
 * use-after-free (ASan), and a Release build returned KVE_OK from
 * kve_state_get_seq on a destroyed state. Run under the sanitize preset,
 * the checks must read no freed memory (destroyed handles are
 * quarantined). */
#include <stdint.h>
#include <stdlib.h>

#include "kve_suite.h"
#include "kve_test_state.h"

#define EXPECT_DEAD(expr, what) EXPECT_ERR((expr), KVE_ERR_INVALID, what " was destroyed")

/* Every public function taking a state, on destroyed state @p st. */
static void expect_state_refused(kve_state *st)
{
    uint32_t row = 0, n = 1, due = 0, moves = 0;
    uint64_t digest = 0;
    int32_t slots[64];
    float scores[64];
    kve_state_seq_info info;
    kve_state_layout lay;
    kve_score_desc sd;
    memset(&sd, 0, sizeof sd);
    EXPECT_DEAD(kve_state_get_seq(st, 0, &info), "this state");
    EXPECT_DEAD(kve_state_get_layout(st, &lay), "this state");
    EXPECT_DEAD(kve_state_admit(st, 0, 1, 0), "this state");
    EXPECT_DEAD(kve_state_retire(st, 0), "this state");
    EXPECT_DEAD(kve_state_max_moves(st, 1, &moves), "this state");
    EXPECT_DEAD(kve_state_append(st, 1, &row, &n, NULL), "this state");
    EXPECT_DEAD(kve_state_append_device(st, 1, &row, &n, 1, NULL), "this state");
    EXPECT_DEAD(kve_state_draft(st, 1, &row, &n, 1, NULL), "this state");
    EXPECT_DEAD(kve_state_rounds_due(st, 1, &row, &n, &due), "this state");
    EXPECT_DEAD(kve_state_rebuild(st, 0, 1, 0, 0, NULL, 0, NULL, 0), "this state");
    EXPECT_DEAD(kve_state_read_digest(st, 0, &digest), "this state");
    EXPECT_DEAD(kve_state_read_slots(st, 0, slots, 64), "this state");
    EXPECT_DEAD(kve_state_score(st, 1, &row, &n, 0, &sd, scores, 64, 64), "this state");
    EXPECT_DEAD(kve_state_score_device(st, 1, &row, &n, 0, &sd, scores, 64, 64), "this state");
    EXPECT_DEAD(kve_state_destroy(st), "this state");
}

/* Every public function taking a context, on destroyed context @p ctx. */
static void expect_context_refused(kve_context *ctx)
{
    kve_backend b;
    kve_cpu_isa isa;
    int i;
    void *p = NULL, *stream = NULL;
    size_t bytes;
    unsigned char buf[8];
    uint64_t key;
    kve_coord coord = {0, 0, 0, 0, 0};
    kve_batch batch;
    kve_evict_out out;
    kve_compact_desc cd;
    kve_cache_write_desc cw;
    kve_score_desc sd;
    kve_state *st = NULL;
    memset(&batch, 0, sizeof batch);
    memset(&out, 0, sizeof out);
    memset(&cd, 0, sizeof cd);
    memset(&cw, 0, sizeof cw);
    memset(&sd, 0, sizeof sd);
    kve_state_desc d = ks_desc(0, 2, 1, 2, 8, 2, 4, 20);
    EXPECT_DEAD(kve_context_get_backend(ctx, &b), "this context");
    EXPECT_DEAD(kve_context_set_threads(ctx, 1), "this context");
    EXPECT_DEAD(kve_context_get_threads(ctx, &i), "this context");
    EXPECT_DEAD(kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_SCALAR), "this context");
    EXPECT_DEAD(kve_context_get_cpu_isa(ctx, &isa), "this context");
    EXPECT_DEAD(kve_context_set_device(ctx, 0), "this context");
    EXPECT_DEAD(kve_context_get_device(ctx, &i), "this context");
    EXPECT_DEAD(kve_context_set_stream(ctx, NULL), "this context");
    EXPECT_DEAD(kve_context_get_stream(ctx, &stream), "this context");
    EXPECT_DEAD(kve_context_synchronize(ctx), "this context");
    EXPECT_DEAD(kve_alloc(ctx, 64, &p), "this context");
    EXPECT_DEAD(kve_free(ctx, buf), "this context");
    EXPECT_DEAD(kve_copy(ctx, buf, buf + 4, 4, KVE_COPY_HOST_TO_BACKEND), "this context");
    EXPECT_DEAD(kve_keys(ctx, 1, 0, &coord, 1, &key), "this context");
    EXPECT_DEAD(kve_evict_workspace_size(ctx, &batch, &bytes), "this context");
    EXPECT_DEAD(kve_evict(ctx, &batch, &out, NULL, 0), "this context");
    EXPECT_DEAD(kve_compact(ctx, &cd), "this context");
    EXPECT_DEAD(kve_digest(ctx, &batch, NULL, &key), "this context");
    EXPECT_DEAD(kve_cache_write(ctx, &cw), "this context");
    EXPECT_DEAD(kve_score(ctx, &sd), "this context");
    EXPECT_DEAD(kve_state_memory_size(ctx, &d, &bytes), "this context");
    EXPECT_DEAD(kve_state_create(ctx, &d, NULL, 0, &st), "this context");
    ck_assert_ptr_null(st);
    EXPECT_DEAD(kve_context_destroy(ctx), "this context");
}

/* A destroyed state, destroyed twice, its context alive and working. */
START_TEST(state_after_destroy)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 1, 2, 8, 2, 4, 20);
    kve_state *st = NULL, *other = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 7, 3));
    KT_OK(kve_state_destroy(st));
    kve_state_seq_info info;
    EXPECT_ERR(kve_state_get_seq(st, 0, &info), KVE_ERR_INVALID,
               "this state was destroyed (by kve_state_destroy, or with its context by "
               "kve_context_destroy)");
    expect_state_refused(st);
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &other)); /* the context still works */
    ck_assert_ptr_ne(other, st);                        /* no reuse while quarantined */
    KT_OK(kve_state_admit(other, 1, 8, 2));
    KT_OK(kve_state_get_seq(other, 1, &info));
    ck_assert_uint_eq(info.prompt_len, 2);
    EXPECT_DEAD(kve_state_destroy(st), "this state");
    KT_OK(kve_state_destroy(other));
    KT_OK(kve_state_destroy(NULL));
    KT_OK(kve_context_destroy(ctx));
}
END_TEST

/* kve_context_destroy destroys the states still on it: each is then
 * refused as destroyed (not read through a freed context), its memory
 * freed (the sanitize preset's leak check). */
START_TEST(state_after_context_destroy)
{
    kve_context *ctx = ks_context(), *keep = ks_context();
    kve_state_desc d = ks_desc(0, 2, 1, 2, 8, 2, 4, 20);
    kve_state *st[3], *kept = NULL;
    for (int i = 0; i < 3; i++) {
        st[i] = NULL;
        KT_OK(kve_state_create(ctx, &d, NULL, 0, &st[i]));
        KT_OK(kve_state_admit(st[i], 0, 7, 3));
    }
    KT_OK(kve_state_create(keep, &d, NULL, 0, &kept));
    KT_OK(kve_state_destroy(st[1])); /* one destroyed first: not destroyed again */
    KT_OK(kve_context_destroy(ctx));
    for (int i = 0; i < 3; i++)
        expect_state_refused(st[i]);
    expect_context_refused(ctx);
    uint32_t row = 0, n = 4; /* the other context's state is untouched */
    KT_OK(kve_state_admit(kept, 0, 9, 1));
    KT_OK(kve_state_append(kept, 1, &row, &n, NULL));
    KT_OK(kve_context_destroy(keep));
    EXPECT_DEAD(kve_state_destroy(kept), "this state");
}
END_TEST

/* Destroyed handles stay detected while up to 64 others are destroyed
 * after them (the quarantine: their structs are not freed meanwhile). */
START_TEST(detected_through_the_quarantine)
{
    kve_context *first = ks_context();
    kve_state_desc d = ks_desc(0, 1, 1, 1, 8, 2, 4, 20);
    kve_state *old = NULL;
    KT_OK(kve_state_create(first, &d, NULL, 0, &old));
    KT_OK(kve_state_destroy(old));
    KT_OK(kve_context_destroy(first));
    for (int i = 0; i < 30; i++) { /* 60 more destroyed handles */
        kve_context *ctx = ks_context();
        kve_state *st = NULL;
        KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
        ck_assert_ptr_ne(st, old);
        ck_assert_ptr_ne(ctx, first);
        KT_OK(kve_context_destroy(ctx));
        EXPECT_DEAD(kve_state_destroy(st), "this state");
    }
    EXPECT_DEAD(kve_state_get_layout(old, &(kve_state_layout){0}), "this state");
    EXPECT_DEAD(kve_context_synchronize(first), "this context");
}
END_TEST

/* NULL handles keep their KVE_ERR_NULL; destroying NULL is a no-op. */
START_TEST(null_handles)
{
    kve_state_seq_info info;
    int threads;
    EXPECT_ERR(kve_state_get_seq(NULL, 0, &info), KVE_ERR_NULL, "state is NULL");
    EXPECT_ERR(kve_context_get_threads(NULL, &threads), KVE_ERR_NULL, "ctx is NULL");
    KT_OK(kve_state_destroy(NULL));
    KT_OK(kve_context_destroy(NULL));
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(handles, state_after_destroy),
        KVE_TEST(handles, state_after_context_destroy),
        KVE_TEST(handles, detected_through_the_quarantine),
        KVE_TEST(handles, null_handles),
    };
    const kve_suite_spec spec = {"handles", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

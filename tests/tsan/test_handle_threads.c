/* test_handle_threads.c — handle checks under threads (issue 60 item 3), in
 * the documented model of a context per thread. Thread A creates a state
 * and destroys it; then 7 other threads each destroy more states than the
 * quarantine holds (64), and create and keep some: A's destroyed handle
 * must still be refused as destroyed, and no other thread's create may
 * take its address (before, the quarantine was one list for the process:
 * the others' destroys freed A's struct, kve_handle_check read freed memory
 * (ASan heap-use-after-free, a TSan race with the free) and, once a create
 * reused it, kve_state_get_seq returned KVE_OK). Rounds repeat it, and
 * every thread also checks its own destroyed handles while others churn.
 * Built and run in every build: ASan (sanitize) and TSan (tsan) report any
 * read of freed memory or race. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kvevict.h"

enum { OTHERS = 7, CHURN = 80, HOLD = 24, ROUNDS = 6 };

static pthread_barrier_t g_phase;
static int g_failed;
static pthread_mutex_t g_fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, kve_status st)
{
    pthread_mutex_lock(&g_fail_lock);
    fprintf(stderr, "%s: %s (%s)\n", what, kve_status_string(st), kve_last_error());
    g_failed = 1;
    pthread_mutex_unlock(&g_fail_lock);
}

static kve_state *make_state(kve_context *ctx)
{
    kve_state_desc d = {{1, 0, 12, 4, 4}, 2, 2, 1, 0, 0, 20, 0, 0, 0};
    kve_state *st = NULL;
    kve_status s = kve_state_create(ctx, &d, NULL, 0, &st);
    if (s != KVE_OK)
        fail("kve_state_create", s);
    return st;
}

/* A destroyed state of this thread: refused, as destroyed. */
static void expect_destroyed(kve_state *st, const char *who)
{
    kve_state_seq_info info;
    kve_status s = kve_state_get_seq(st, 0, &info);
    if (s != KVE_ERR_INVALID || !strstr(kve_last_error(), "this state was destroyed"))
        fail(who, s == KVE_OK ? KVE_ERR_INTERNAL : s);
}

static void *other(void *arg)
{
    (void)arg;
    kve_context *ctx = NULL;
    kve_status s = kve_context_create(KVE_BACKEND_CPU, &ctx);
    if (s != KVE_OK) {
        fail("kve_context_create", s);
        return NULL;
    }
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&g_phase); /* A's state destroyed */
        kve_state *mine = NULL;
        for (int i = 0; i < CHURN; i++) {
            kve_state *st = make_state(ctx);
            if (!st)
                break;
            if (i == 0)
                mine = st;
            if (kve_state_destroy(st) != KVE_OK)
                fail("kve_state_destroy", KVE_ERR_INTERNAL);
            if (mine && i < 64) /* its own quarantine: its last 64 destroys */
                expect_destroyed(mine, "an other thread's own destroyed state");
        }
        kve_state *held[HOLD];
        for (int i = 0; i < HOLD; i++)
            held[i] = make_state(ctx);
        pthread_barrier_wait(&g_phase); /* churned: A checks */
        pthread_barrier_wait(&g_phase); /* A checked */
        for (int i = 0; i < HOLD; i++)
            kve_state_destroy(held[i]);
    }
    kve_context_destroy(ctx);
    return NULL;
}

int main(void)
{
    pthread_t th[OTHERS];
    pthread_barrier_init(&g_phase, NULL, OTHERS + 1);
    for (int i = 0; i < OTHERS; i++)
        if (pthread_create(&th[i], NULL, other, NULL) != 0)
            return 1;
    kve_context *ctx = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK)
        return 1;
    for (int round = 0; round < ROUNDS; round++) {
        kve_state *st = make_state(ctx);
        if (st && kve_state_destroy(st) != KVE_OK)
            fail("A's kve_state_destroy", KVE_ERR_INTERNAL);
        pthread_barrier_wait(&g_phase);
        pthread_barrier_wait(&g_phase);
        if (st)
            expect_destroyed(st, "thread A's destroyed state, after the others' churn");
        pthread_barrier_wait(&g_phase);
    }
    kve_context_destroy(ctx);
    for (int i = 0; i < OTHERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&g_phase);
    printf("%d rounds: 1 + %d threads, %d destroys each: %s\n", ROUNDS, OTHERS, CHURN,
           g_failed ? "FAILED" : "every destroyed state refused");
    return g_failed;
}

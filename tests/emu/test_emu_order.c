/*
 * test_emu_order.c — the emulator's order check (emu_kernels.h,
 * kve_emu_order_check): a launch runs with a block's threads in forward,
 * reverse and random order between barriers, and a body whose tracked
 * outputs change with that order stops the run, naming the kernel and the
 * phase.
 *
 * Planted races, each in a forked child whose stderr the parent reads: the
 * last writer of one word after a barrier (phase 1), a read of a
 * neighbour's shared memory that no barrier orders (phase 0), the same
 * word written by every thread of a serial pool (phase 0). The controls
 * exit 0 with nothing on stderr: a body whose threads meet at barriers, and
 * one that races only in memory declared scratch. In process: forward and
 * reverse run the threads in the order they name, and a flipped phase
 * changes that phase alone.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_kernels.h"
#include "emu_suite.h"
#include "kve_expect.h"

#define KVE_NT 64u

static uint32_t kve_out[2 * KVE_NT], kve_scratch[4];

/* Phase 1: every thread writes word 0; the last one to run wins. */
static void kve_body_last_writer(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_sync(tc);
    ((uint32_t *)arg)[0] = tc->tid;
}

/* Phase 0: each thread reads its neighbour's shared slot with no barrier
 * between the neighbour's write and the read. */
static void kve_body_unsynced_read(kve_tc *tc, unsigned char *smem, void *arg)
{
    uint32_t *s = (uint32_t *)smem;
    s[tc->tid] = tc->tid + 1;
    ((uint32_t *)arg)[tc->tid] = s[(tc->tid + 1) % tc->nt];
    kve_sync(tc);
}

/* No barrier at all (a serial pool's kind): the last thread wins. */
static void kve_body_serial_race(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    ((uint32_t *)arg)[0] = tc->bid * 1000u + tc->tid;
}

/* The same neighbour read with the barrier in place: no race. */
static void kve_body_synced_read(kve_tc *tc, unsigned char *smem, void *arg)
{
    uint32_t *s = (uint32_t *)smem;
    s[tc->tid] = tc->tid + 1;
    kve_sync(tc);
    ((uint32_t *)arg)[tc->tid] = s[(tc->tid + 1) % tc->nt];
    kve_sync(tc);
}

/* Races in the scratch words only; writes the outputs deterministically. */
static void kve_body_scratch_race(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_scratch[0] = tc->tid;
    kve_sync(tc);
    ((uint32_t *)arg)[tc->tid] = tc->tid * 7u;
}

/* A body launched under the order check, as a child runs it. */
typedef struct kve_child_run {
    const char *name;
    kve_emu_body body;
    int serial, scratch;
} kve_child_run;

static void kve_child(void *arg)
{
    const kve_child_run *r = (const kve_child_run *)arg;
    kve_emu_pool *pool = r->serial ? kve_emu_pool_create_serial(KVE_NT, 32, 11)
                                   : kve_emu_pool_create(KVE_NT, 32);
    kve_emu_track(kve_out, sizeof kve_out);
    kve_emu_track(kve_scratch, sizeof kve_scratch);
    kve_emu_order_check(1);
    if (!pool || kve_emu_run(pool, r->name, 2, KVE_NT * 4, r->body, kve_out,
                             r->scratch ? kve_scratch : NULL, r->scratch ? sizeof kve_scratch : 0))
        _exit(3);
    kve_emu_pool_destroy(pool);
}

/* Runs @p body as kernel @p name under the order check in a child. */
static int kve_run_child(const char *name, kve_emu_body body, int serial, int scratch, char *err,
                         size_t err_bytes)
{
    kve_child_run r = {name, body, serial, scratch};
    return kve_emu_in_child(kve_child, &r, err, err_bytes);
}

static void kve_expect_race(const char *name, kve_emu_body body, int serial, const char *phase)
{
    char err[4096], want[128];
    int st = kve_run_child(name, body, serial, 0, err, sizeof err);
    KVE_EXPECT(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
               "%s: not stopped by SIGABRT (wait status %d; stderr \"%s\")", name, st, err);
    snprintf(want, sizeof want, "emu: kernel %s: its outputs depend on the order", name);
    KVE_EXPECT(strstr(err, want) != NULL, "%s: stderr \"%s\" lacks \"%s\"", name, err, want);
    KVE_EXPECT(strstr(err, phase) != NULL, "%s: stderr \"%s\" lacks \"%s\"", name, err, phase);
}

static void kve_expect_clean(const char *name, kve_emu_body body, int scratch)
{
    char err[4096];
    int st = kve_run_child(name, body, 0, scratch, err, sizeof err);
    KVE_EXPECT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child wait status %d",
               name, st);
    KVE_EXPECT(err[0] == '\0', "%s: stderr \"%s\"", name, err);
}

/* Each thread's rank in each of two phases. */
typedef struct kve_rank_log {
    uint32_t counter, rank[2][KVE_NT];
} kve_rank_log;

static void kve_body_ranks(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_rank_log *g = (kve_rank_log *)arg;
    for (uint32_t k = 0; k < 2; k++) {
        g->rank[k][tc->tid] = g->counter++;
        kve_sync(tc);
    }
}

/* Forward runs thread t at rank t, reverse at nt - 1 - t; a flipped phase
 * takes the flip's order and the other phase keeps the launch's. */
static void kve_check_named_orders(void)
{
    kve_emu_pool *pool = kve_emu_pool_create(KVE_NT, 32);
    KVE_EXPECT(pool != NULL, "no pool");
    if (!pool)
        return;
    static const struct {
        kve_emu_order mode;
        uint32_t flip;
        kve_emu_order flip_mode;
        int reversed[2];
    } runs[] = {
        {KVE_EMU_ORDER_FORWARD, KVE_EMU_NO_PHASE, KVE_EMU_ORDER_FORWARD, {0, 0}},
        {KVE_EMU_ORDER_REVERSE, KVE_EMU_NO_PHASE, KVE_EMU_ORDER_REVERSE, {1, 1}},
        {KVE_EMU_ORDER_FORWARD, 1, KVE_EMU_ORDER_REVERSE, {0, 1}},
        {KVE_EMU_ORDER_REVERSE, 0, KVE_EMU_ORDER_FORWARD, {0, 1}},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        kve_rank_log g;
        memset(&g, 0, sizeof g);
        kve_emu_pool_order(pool, runs[i].mode, runs[i].flip, runs[i].flip_mode);
        KVE_EXPECT(kve_emu_launch(pool, 1, 0, kve_body_ranks, &g) == 0, "launch");
        KVE_EXPECT(kve_emu_pool_phases(pool) == 3, "run %zu: %u phases, expected 3", i,
                   kve_emu_pool_phases(pool));
        for (uint32_t k = 0; k < 2; k++)
            for (uint32_t t = 0; t < KVE_NT; t++) {
                uint32_t want = k * KVE_NT + (runs[i].reversed[k] ? KVE_NT - 1 - t : t);
                KVE_EXPECT(g.rank[k][t] == want, "run %zu, phase %u: thread %u at rank %u, not %u",
                           i, k, t, g.rank[k][t], want);
            }
    }
    kve_emu_pool_destroy(pool);
}

int main(void)
{
    kve_expect_race("planted_last_writer", kve_body_last_writer, 0, "in phase 1 (between two barriers");
    kve_expect_race("planted_unsynced_read", kve_body_unsynced_read, 0,
                    "in phase 0 (before the first barrier");
    kve_expect_race("planted_serial_race", kve_body_serial_race, 1, "in phase 0");
    kve_expect_clean("synced_read", kve_body_synced_read, 0);
    kve_expect_clean("scratch_race", kve_body_scratch_race, 1);
    kve_check_named_orders();
    if (!kve_failures)
        printf("emulator order check: 3 planted races stopped with kernel and phase, 2 clean "
               "bodies pass, forward/reverse/flipped orders as named\n");
    return kve_failures ? 1 : 0;
}

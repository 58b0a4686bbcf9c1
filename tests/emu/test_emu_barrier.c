/*
 * test_emu_barrier.c — the emulator's block (emu_harness.c) itself.
 *
 * Threads of a block that disagree about their barriers (some return while
 * others wait, one waits once more, one warp skips a shuffle) would hang a
 * GPU block: the harness must stop with its message and SIGABRT. Each such
 * body runs in a forked child whose stderr the parent reads; a child running
 * a body that agrees must exit 0 with nothing on stderr (under ASan: no
 * warning about the stack switches either).
 *
 * In process, bodies that agree must see what a GPU guarantees and no more:
 * writes before a barrier are seen after it, shuffles move warp lanes'
 * values, shared memory starts 0xa5 in every block, and every phase runs
 * each thread once, in an order that changes from phase to phase.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_harness.h"
#include "emu_suite.h"
#include "kve_expect.h"

static const char kve_disagree[] = "emu: threads of a block disagree at a barrier";

/* Odd threads return before the barrier the even ones wait at. */
static void kve_body_early_return(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem, (void)arg;
    if (tc->tid % 2)
        return;
    kve_sync(tc);
}

/* The last thread waits at one barrier more than the others. */
static void kve_body_extra_sync(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem, (void)arg;
    kve_sync(tc);
    if (tc->tid == tc->nt - 1)
        kve_sync(tc);
}

/* Only warp 0 shuffles: the other warps return first. */
static void kve_body_one_warp_shuffles(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    if (tc->tid / tc->ws == 0)
        ((uint64_t *)arg)[tc->tid] = kve_shfl_up_u64(tc, tc->tid, 1);
}

/* Blocks 0, 1 and 3 agree; in block 2 thread 5 skips the second barrier. */
static void kve_body_late_block(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem, (void)arg;
    kve_sync(tc);
    if (tc->bid == 2 && tc->tid == 5)
        return;
    kve_sync(tc);
}

/* Barriers and shuffles that every thread meets alike. */
static void kve_body_agree(kve_tc *tc, unsigned char *smem, void *arg)
{
    uint64_t *out = (uint64_t *)arg + (size_t)tc->bid * 2 * tc->nt;
    uint32_t *slot = (uint32_t *)smem;
    slot[tc->tid] = tc->tid * 3u + tc->bid;
    kve_sync(tc);
    out[tc->tid] = slot[(tc->tid + 1) % tc->nt];
    uint64_t v = tc->tid % tc->ws + 1u; /* inclusive scan of each warp: lane + 1 */
    for (uint32_t d = 1; d < tc->ws; d *= 2) {
        uint64_t u = kve_shfl_up_u64(tc, v, d);
        if (tc->tid % tc->ws >= d)
            v += u;
    }
    out[tc->nt + tc->tid] = v;
}

/* A body on a fresh pool, as a child runs it. */
typedef struct kve_child_run {
    kve_emu_body body;
    uint32_t nt, ws, grid;
    int serial;
} kve_child_run;

static void kve_child(void *arg)
{
    const kve_child_run *r = (const kve_child_run *)arg;
    static uint64_t scratch[2 * 4 * 256];
    kve_emu_pool *pool = r->serial ? kve_emu_pool_create_serial(r->nt, r->ws, 7)
                                   : kve_emu_pool_create(r->nt, r->ws);
    if (!pool || kve_emu_launch(pool, r->grid, r->nt * sizeof(uint32_t), r->body, scratch))
        _exit(3);
    kve_emu_pool_destroy(pool);
}

/* Runs @p body on a fresh pool in a child; its stderr in @p err. */
static int kve_run_child(kve_emu_body body, uint32_t nt, uint32_t ws, uint32_t grid, int serial,
                         char *err, size_t err_bytes)
{
    kve_child_run r = {body, nt, ws, grid, serial};
    return kve_emu_in_child(kve_child, &r, err, err_bytes);
}

/* @p body must abort its child with @p msg (and @p detail) on stderr. */
static void kve_expect_abort(const char *name, kve_emu_body body, uint32_t nt, uint32_t ws,
                             uint32_t grid, int serial, const char *msg, const char *detail)
{
    char err[4096];
    int st = kve_run_child(body, nt, ws, grid, serial, err, sizeof err);
    KVE_EXPECT(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
               "%s (%u threads): not stopped by SIGABRT (wait status %d)", name, nt, st);
    KVE_EXPECT(strstr(err, msg) != NULL, "%s (%u threads): stderr \"%s\" lacks \"%s\"", name, nt,
               err, msg);
    KVE_EXPECT(!detail || strstr(err, detail) != NULL,
               "%s (%u threads): stderr \"%s\" lacks \"%s\"", name, nt, err, detail);
}

static void kve_check_disagreement(void)
{
    kve_expect_abort("early return", kve_body_early_return, 64, 32, 1, 0, kve_disagree,
                     "32 of 64 threads returned");
    kve_expect_abort("extra barrier", kve_body_extra_sync, 32, 32, 1, 0, kve_disagree,
                     "wait at barrier 2");
    kve_expect_abort("one warp shuffles", kve_body_one_warp_shuffles, 128, 64, 1, 0, kve_disagree,
                     NULL);
    kve_expect_abort("block 2 disagrees", kve_body_late_block, 64, 64, 4, 0, kve_disagree,
                     "block 2 of 4");
    kve_expect_abort("barrier on a serial pool", kve_body_agree, 64, 32, 1, 1,
                     "kve_sync in a body run on a serial pool", NULL);
    /* The control: the same child with a body that agrees. */
    char err[4096];
    int st = kve_run_child(kve_body_agree, 256, 64, 4, 0, err, sizeof err);
    KVE_EXPECT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
               "agreeing body: child wait status %d", st);
    KVE_EXPECT(err[0] == '\0', "agreeing body: stderr \"%s\"", err);
}

/* What kve_body_agree must leave: neighbours' slots, warp scans. */
static void kve_check_agree(kve_emu_pool *pool, uint32_t nt, uint32_t ws, uint32_t grid)
{
    uint64_t *out = (uint64_t *)malloc((size_t)grid * 2 * nt * sizeof *out);
    KVE_EXPECT(out && kve_emu_launch(pool, grid, nt * sizeof(uint32_t), kve_body_agree, out) == 0,
               "launch");
    for (uint32_t b = 0; out && b < grid; b++)
        for (uint32_t t = 0; t < nt; t++) {
            uint64_t next = ((t + 1) % nt) * 3u + b, lane = t % ws + 1;
            KVE_EXPECT(out[(size_t)b * 2 * nt + t] == next,
                       "%u/%u: block %u thread %u read %llu, expected %llu", nt, ws, b, t,
                       (unsigned long long)out[(size_t)b * 2 * nt + t], (unsigned long long)next);
            KVE_EXPECT(out[(size_t)b * 2 * nt + nt + t] == lane * (lane + 1) / 2,
                       "%u/%u: block %u thread %u scanned %llu", nt, ws, b, t,
                       (unsigned long long)out[(size_t)b * 2 * nt + nt + t]);
        }
    free(out);
}

#define KVE_PHASES 8u

/* Thread tid's rank in each phase; whether shared memory started 0xa5. */
typedef struct kve_order_log {
    uint32_t counter, rank[KVE_PHASES][256];
    int smem_fresh[4][256];
} kve_order_log;

static void kve_body_order(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_order_log *g = (kve_order_log *)arg;
    g->smem_fresh[tc->bid][tc->tid] = smem[tc->tid] == 0xa5;
    smem[tc->tid] = 0;
    for (uint32_t k = 0; k < KVE_PHASES; k++) {
        g->rank[k][tc->tid] = g->counter++; /* no barrier orders these: the phase's order */
        kve_sync(tc);
    }
}

static void kve_check_orders(kve_emu_pool *pool, uint32_t nt)
{
    static kve_order_log g;
    memset(&g, 0, sizeof g);
    KVE_EXPECT(kve_emu_launch(pool, 4, nt, kve_body_order, &g) == 0, "launch");
    /* Block 3's phase k ran its threads at ranks (3 * KVE_PHASES + k) * nt + 0..nt-1. */
    uint32_t order[KVE_PHASES][256], like_first = 0;
    for (uint32_t k = 0; k < KVE_PHASES; k++) {
        uint32_t seen[256] = {0}, base = (3 * KVE_PHASES + k) * nt;
        for (uint32_t t = 0; t < nt; t++) {
            order[k][t] = g.rank[k][t] - base;
            KVE_EXPECT(order[k][t] < nt && !seen[order[k][t]]++,
                       "%u threads: phase %u ran thread %u at rank %u", nt, k, t, g.rank[k][t]);
        }
        like_first += !memcmp(order[k], order[0], nt * sizeof(uint32_t));
    }
    KVE_EXPECT(like_first < KVE_PHASES, "%u threads: every phase ran the same order", nt);
    for (uint32_t b = 0; b < 4; b++)
        for (uint32_t t = 0; t < nt; t++)
            KVE_EXPECT(g.smem_fresh[b][t], "%u threads: block %u, thread %u: shared memory not 0xa5",
                       nt, b, t);
}

int main(void)
{
    kve_check_disagreement();
    static const uint32_t shapes[][2] = {{32, 32}, {64, 32}, {128, 64}, {256, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        uint32_t nt = shapes[s][0], ws = shapes[s][1];
        kve_emu_pool *pool = kve_emu_pool_create(nt, ws);
        KVE_EXPECT(pool != NULL, "no pool of %u threads", nt);
        if (!pool)
            continue;
        kve_check_agree(pool, nt, ws, 3);
        kve_check_orders(pool, nt);
        kve_check_agree(pool, nt, ws, 1); /* the same fibers, a later launch */
        kve_emu_pool_destroy(pool);
    }
    if (!kve_failures)
        printf("emulator barriers: disagreement aborts (5 bodies), agreement holds (4 shapes)\n");
    return kve_failures ? 1 : 0;
}

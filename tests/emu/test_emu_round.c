/*
 * test_emu_round.c — the round kernel (kernels_cuda/round_body.h: a block
 * per table) against the serial placement it replaces (state_body.h:
 * kve_state_job_run, kve_round_table), on the emulator:
 *
 *   round   random ROUND job lists through the emulated context's
 *           state_round: the GPU's own plan (blocks of KVE_ROUND_THREADS,
 *           warps of 32 and of 64, an H200's grids) and the suites' pools
 *           (32 to 256 threads, small grids); tables of 1 to 2,200 slots,
 *           the call's block at the top of 0 to C slots, freed lists
 *           anywhere, a few broken (a table left alone, its error record
 *           the serial one's); move lists absent, empty before the round,
 *           too short (overflowing) or holding a call's earlier pairs; more
 *           evicted slots than the block's shared buffer. Slots, pairs and
 *           their order, counts and the reported error must be the serial
 *           interpreter's exactly, under the order check (forward, reverse
 *           and random thread orders between barriers).
 *
 * $KVE_EMU_CASES scales the job lists (a fifth of it, default 400; each
 * of 1 to 9 tables in 1 to 4 rows).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_backend.h"
#include "round_body.h"

#define KVE_RT_ROWS 4u
#define KVE_RT_MAX_C 2200u

/* One random list: its jobs and buffers (host memory, tracked). */
typedef struct {
    kve_state_update u;
    kve_state_job jobs[KVE_RT_ROWS];
    size_t n_slots, n_lists, n_pairs;
    int32_t *slot_pos, *freed, *moves;
    uint32_t *n_moves;
} kve_rt_case;

/* What the cases covered, per table with a round. */
typedef struct {
    unsigned block, serial_big, serial_list, short_list, broken, tables;
} kve_rt_seen;

static uint32_t kve_rt_between(uint64_t *rng, uint32_t lo, uint32_t hi)
{
    return lo + kve_rand_below(rng, hi - lo + 1);
}

/* Table @p sp of C slots, full: old positions below pos0 in any order, the
 * call's M tokens at the top in position order; or (rarely) any values. */
static void kve_rt_table(uint64_t *rng, int32_t *sp, uint32_t C, int32_t pos0)
{
    static uint32_t perm[2 * KVE_RT_MAX_C + 64];
    uint32_t pick = kve_rand_below(rng, 10);
    uint32_t M = pick < 3 ? 0 : pick == 3 ? C : kve_rand_below(rng, C + 1);
    if (kve_chance(rng, 8)) {
        for (uint32_t s = 0; s < C; s++)
            sp[s] = (int32_t)kve_rand_below(rng, (uint32_t)pos0 + 60) - 1;
        return;
    }
    uint32_t range = (uint32_t)pos0; /* >= C: every slot can hold an old token */
    kve_rand_perm(rng, perm, range);
    for (uint32_t s = 0; s < C - M; s++)
        sp[s] = (int32_t)perm[s];
    int32_t p = pos0 + (int32_t)kve_rand_below(rng, 3);
    for (uint32_t s = C - M; s < C; s++) {
        sp[s] = p;
        p += 1 + (int32_t)(kve_chance(rng, 20) ? kve_rand_below(rng, 4) : 0);
    }
}

/* Freed list @p ev of r distinct slots of 0 .. C - 1, ascending: anywhere,
 * or all near the top; rarely broken (out of the table, or not ascending). */
static int kve_rt_freed(uint64_t *rng, int32_t *ev, uint32_t C, uint32_t r)
{
    static uint32_t perm[KVE_RT_MAX_C];
    uint32_t from = kve_chance(rng, 20) && C > 2 * r ? C - 2 * r : 0;
    kve_rand_perm(rng, perm, C - from);
    static uint8_t mark[KVE_RT_MAX_C];
    memset(mark, 0, C);
    for (uint32_t i = 0; i < r; i++)
        mark[from + perm[i]] = 1;
    for (uint32_t s = 0, i = 0; s < C; s++)
        if (mark[s])
            ev[i++] = (int32_t)s;
    if (!r || !kve_chance(rng, 3))
        return 0;
    static const int32_t bad[] = {-1, INT32_MIN, 0x7fffffff};
    uint32_t at = kve_rand_below(rng, r);
    if (kve_chance(rng, 50))
        ev[at] = kve_chance(rng, 50) ? (int32_t)C : bad[kve_rand_below(rng, 3)];
    else
        ev[at] = at ? ev[at - 1] : r > 1 ? ev[1] : (int32_t)C; /* a repeat, or past C */
    return 1;
}

static void kve_rt_make(uint64_t *rng, kve_rt_case *c, kve_rt_seen *seen)
{
    memset(c, 0, sizeof *c);
    kve_state_update *u = &c->u;
    u->table_layers = kve_rt_between(rng, 1, 3);
    u->table_heads = kve_rt_between(rng, 1, 3);
    u->n_jobs = kve_rt_between(rng, 1, KVE_RT_ROWS);
    u->move_rows = u->n_jobs;
    uint32_t tables = u->table_layers * u->table_heads;
    uint32_t C[KVE_RT_ROWS], r[KVE_RT_ROWS], most_r = 0;
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        uint32_t pick = kve_rand_below(rng, 40);
        if (pick < 2) { /* more evicted slots than the shared buffer holds */
            C[i] = kve_rt_between(rng, KVE_ROUND_EV_MAX + 1, KVE_ROUND_EV_MAX + 300);
            r[i] = kve_rt_between(rng, KVE_ROUND_EV_MAX + 1, C[i]);
        } else if (pick < 6) { /* a G2 head: C about 2,112, r = 64 */
            C[i] = kve_rt_between(rng, 1800, KVE_RT_MAX_C);
            r[i] = kve_chance(rng, 50) ? 64 : kve_rt_between(rng, 1, 300);
        } else {
            C[i] = kve_rt_between(rng, 1, 200);
            r[i] = kve_chance(rng, 70) ? kve_rt_between(rng, 1, C[i] < 64 ? C[i] : 64)
                                        : kve_rt_between(rng, 1, C[i]);
        }
        most_r = r[i] > most_r ? r[i] : most_r;
    }
    uint32_t cap_pick = kve_rand_below(rng, 20);
    u->max_moves = cap_pick < 14 ? most_r
                   : cap_pick < 17 ? kve_rand_below(rng, most_r + 1)
                                   : most_r + kve_rand_below(rng, 2 * most_r + 1);
    int with_moves = !kve_chance(rng, 15);
    c->n_lists = with_moves ? (size_t)tables * u->move_rows : 0;
    c->n_pairs = c->n_lists * u->max_moves * 2;
    size_t base = 0;
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        kve_state_job *j = &c->jobs[i];
        j->kind = KVE_JOB_ROUND;
        j->row = i;
        j->base = base;
        j->first = C[i];
        j->stride = C[i] + (kve_chance(rng, 20) ? kve_rand_below(rng, 5) : 0);
        j->count = kve_chance(rng, 10) ? 0 : r[i]; /* 0: the row has no round this wave */
        j->pos = kve_rt_between(rng, C[i], 2 * C[i] + 40);
        j->token = i;
        if (kve_chance(rng, 1)) /* sizes the job cannot have: the row left alone */
            j->count = j->first + 1;
        base += (size_t)tables * j->stride;
    }
    c->n_slots = base;
    c->slot_pos = malloc(base * 4 + 4);
    c->freed = malloc(base * 4 + 4);
    c->moves = c->n_pairs ? malloc(c->n_pairs * 4) : NULL;
    c->n_moves = c->n_lists ? malloc(c->n_lists * 4) : NULL;
    ck_assert(c->slot_pos && c->freed && (!c->n_pairs || c->moves) && (!c->n_lists || c->n_moves));
    for (size_t k = 0; k < base; k++)
        c->slot_pos[k] = c->freed[k] = (int32_t)kve_rand_below(rng, 100) - 1;
    for (size_t k = 0; k < c->n_pairs; k++)
        c->moves[k] = (int32_t)kve_rand_below(rng, KVE_RT_MAX_C);
    for (size_t l = 0; l < c->n_lists; l++) /* a call's earlier rounds left pairs in some */
        c->n_moves[l] = kve_chance(rng, 25) ? kve_rand_below(rng, u->max_moves + 1) : 0;
    u->slot_pos = c->slot_pos;
    u->freed = c->freed;
    u->moves = c->moves;
    u->n_moves = c->n_moves;
    u->jobs = c->jobs;
    u->work = (uint64_t)u->n_jobs * tables; /* the call's rows x tables, as a wave sizes it */
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        const kve_state_job *j = &c->jobs[i];
        for (uint32_t t = 0; t < tables; t++) {
            size_t at = j->base + (size_t)t * j->stride;
            kve_rt_table(rng, c->slot_pos + at, j->first, (int32_t)j->pos);
            int broken = kve_rt_freed(rng, c->freed + at, j->first, r[i]);
            if (!j->count || j->count > j->first)
                continue;
            uint32_t *n_mv = NULL;
            if (with_moves)
                kve_move_list(u, j->token, t, &n_mv);
            seen->tables++;
            seen->broken += broken;
            seen->serial_big += !broken && j->count > KVE_ROUND_EV_MAX;
            seen->serial_list += !broken && n_mv && *n_mv && j->count <= KVE_ROUND_EV_MAX;
            seen->short_list += !broken && n_mv && !*n_mv && u->max_moves < j->count;
            seen->block += !broken && (!n_mv || !*n_mv) && j->count <= KVE_ROUND_EV_MAX;
        }
    }
}

static void kve_rt_free(kve_rt_case *c)
{
    free(c->slot_pos);
    free(c->freed);
    free(c->moves);
    free(c->n_moves);
}

/* A copy of @p c's buffers (the jobs stay shared). */
static kve_rt_case kve_rt_clone(const kve_rt_case *c)
{
    kve_rt_case d = *c;
    d.slot_pos = malloc(c->n_slots * 4 + 4);
    d.freed = malloc(c->n_slots * 4 + 4);
    d.moves = c->n_pairs ? malloc(c->n_pairs * 4) : NULL;
    d.n_moves = c->n_lists ? malloc(c->n_lists * 4) : NULL;
    ck_assert(d.slot_pos && d.freed);
    memcpy(d.slot_pos, c->slot_pos, c->n_slots * 4);
    memcpy(d.freed, c->freed, c->n_slots * 4);
    if (c->n_pairs)
        memcpy(d.moves, c->moves, c->n_pairs * 4);
    if (c->n_lists)
        memcpy(d.n_moves, c->n_moves, c->n_lists * 4);
    d.u.slot_pos = d.slot_pos;
    d.u.freed = d.freed;
    d.u.moves = d.moves;
    d.u.n_moves = d.n_moves;
    return d;
}

static void kve_rt_track(const kve_rt_case *c, int on)
{
    void *p[] = {c->slot_pos, c->freed, c->moves, c->n_moves};
    size_t n[] = {c->n_slots * 4 + 4, c->n_slots * 4 + 4, c->n_pairs * 4, c->n_lists * 4};
    for (size_t i = 0; i < 4; i++) {
        if (!p[i])
            continue;
        if (on)
            kve_emu_track(p[i], n[i]);
        else
            kve_emu_untrack(p[i]);
    }
}

/* Case @p i's device: the GPU's plan with warps of 32, of 64, or a random
 * pool of the suites (serial pools too: the round takes a threaded one of
 * its shape) and grid cap. Returns its name. */
static const char *kve_rt_device(uint64_t *rng, unsigned i)
{
    static char name[64];
    uint32_t warp = i % 3 == 0 ? 32 : i % 3 == 1 ? 64 : 0;
    kve_emu_context_device_plan(warp);
    size_t s = kve_pick_shape(rng);
    uint32_t grid = 1 + kve_rand_below(rng, 8);
    if (!warp)
        kve_emu_context_use(kve_chance(rng, 50) ? kve_serial_pools[s] : kve_pools[s], grid, NULL);
    if (warp)
        snprintf(name, sizeof name, "device plan, warp %u", warp);
    else
        snprintf(name, sizeof name, "block %u, warp %u, grid <= %u", kve_shapes[s][0],
                 kve_shapes[s][1], grid);
    return name;
}

START_TEST(test_round_random)
{
    uint64_t rng = 0x5eed0138;
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000) / 5;
    int was = kve_emu_order_check(1);
    kve_rt_seen seen = {0};
    for (unsigned i = 0; i < n; i++) {
        static kve_rt_case want;
        kve_rt_make(&rng, &want, &seen);
        kve_rt_case got = kve_rt_clone(&want);
        kve_emu_errors ref;
        kve_emu_errors_reset(&ref);
        for (uint32_t k = 0; k < want.u.n_jobs; k++)
            kve_state_job_run(&want.u, &want.jobs[k], 0, 1, ref.rec);
        char want_msg[512];
        kve_status want_st = kve_emu_errors_status(&ref, want_msg, sizeof want_msg);

        const char *dev = kve_rt_device(&rng, i);
        kve_emu_launch_rec log[2];
        kve_emu_log_start(log, 2);
        kve_rt_track(&got, 1);
        got.u.rounds = 1; /* a wave's rounds: the round kernel */
        ck_assert_int_eq(kve_emu->ops->state_update(kve_emu, &got.u), KVE_OK);
        kve_rt_track(&got, 0);
        ck_assert_uint_eq(kve_emu_log_stop(), 1);
        ck_assert_str_eq(log[0].what, "kve_state_round_kernel");
        kve_launch_limits lim = kve_emu_context_limits();
        ck_assert_uint_eq(log[0].grid, kve_state_round_plan_grid(&lim, &got.u));
        kve_status st = kve_context_synchronize(kve_emu);
        kve_emu_context_device_plan(0);

        const char *what = st != want_st ? "status"
                           : want_st && strcmp(want_msg, kve_emu_context_message()) ? "error"
                           : memcmp(want.slot_pos, got.slot_pos, want.n_slots * 4) ? "slot_pos"
                           : want.n_lists && memcmp(want.n_moves, got.n_moves, want.n_lists * 4)
                               ? "n_moves"
                           : want.n_pairs && memcmp(want.moves, got.moves, want.n_pairs * 4)
                               ? "moves"
                               : NULL;
        ck_assert_msg(!what, "list %u (%u rows, %ux%u tables, max_moves %u) [%s]: %s differs (%s)",
                      i, want.u.n_jobs, want.u.table_layers, want.u.table_heads,
                      want.u.max_moves, dev, what, kve_emu_context_message());
        kve_rt_free(&want);
        kve_rt_free(&got);
    }
    kve_emu_order_check(was);
    /* every path of the body ran: the block's, both serial ones, the
     * list shorter than r and the broken freed list */
    unsigned few = n / 40 + 1;
    ck_assert_uint_ge(seen.tables, n);
    ck_assert_uint_ge(seen.block, n);
    ck_assert_uint_ge(seen.serial_big, few);
    ck_assert_uint_ge(seen.serial_list, few);
    ck_assert_uint_ge(seen.short_list, few);
    ck_assert_uint_ge(seen.broken, few);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(round, test_round_random),
    };
    const kve_suite_spec spec = {"emu_round", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

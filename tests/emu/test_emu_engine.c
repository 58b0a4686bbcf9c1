/*
 * test_emu_engine.c — the engine-integration bodies (state_body.h,
 * cache_write_body.h), compiled as C and run on the emulator, against the
 * CPU backend's ops:
 *
 *   jobs         random independent job lists, straight into both ops
 *   cache_write  random writes on every layout through the public API of an
 *                emulated device context (emu_backend.h), byte for byte
 *   state        random cache-state programs (every sharing mode, rows
 *                admitted, appended in any grouping, retired and rebuilt)
 *                on the CPU and on the emulated device, with the cache
 *                writes their mappings drive
 *   errors       broken rows, slots, page ids and freed lists: the device
 *                records name what the host checks name, memory stays safe
 *
 * Block shapes 32..256 threads with warp widths 32 and 64, threaded pools
 * and serial pools (threads in random orders), grids of 1..8 blocks.
 * $KVE_EMU_CASES scales the random cases (default 2000 cache writes, half
 * as many job lists, a tenth as many state programs).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_backend.h"
#include "kve_engine_cases.h"
#include "kve_scenario.h"
#include "state_body.h"

/* A random pool and grid for the next emulated calls: serial three times
 * in four (the bodies never synchronize), always for @p program (a state
 * program: a launch on a threaded pool costs barriers across all its
 * threads, and a program makes thousands; the jobs test covers threads).
 * kve_evict on @p evict_pool (NULL: the CPU). Returns the pool's index, +
 * KVE_N_SHAPES when serial. */
static size_t kve_use_random(uint64_t *rng, int program, kve_emu_pool *evict_pool)
{
    size_t s = kve_pick_shape(rng);
    int serial = program || kve_chance(rng, 75);
    kve_emu_context_use(serial ? kve_serial_pools[s] : kve_pools[s], 1 + kve_rand_below(rng, 8),
                        evict_pool);
    return s + (serial ? KVE_N_SHAPES : 0);
}

static const char *kve_shape_name(size_t s)
{
    static char name[64];
    size_t i = s % KVE_N_SHAPES;
    snprintf(name, sizeof name, "block %u, warp %u, %s", kve_shapes[i][0], kve_shapes[i][1],
             s >= KVE_N_SHAPES ? "serial" : "threaded");
    return name;
}

/* ---- job lists ------------------------------------------------------------ */

/* A random list of independent jobs (one per row) over random tables. */
typedef struct {
    kve_state_update u;
    size_t table_stride, row_stride, freed_count; /* every row alike, rows apart */
    size_t n_slot_pos, n_freed, n_map, n_lists;
    kve_state_job jobs[200];
} kve_job_case;

static void kve_job_case_make(uint64_t *rng, kve_job_case *jc, uint32_t rows)
{
    kve_state_update *u = &jc->u;
    memset(jc, 0, sizeof *jc);
    u->table_layers = 1 + kve_rand_below(rng, 3);
    u->table_heads = 1 + kve_rand_below(rng, 3);
    uint32_t tables = u->table_layers * u->table_heads;
    jc->table_stride = 1 + kve_rand_below(rng, 40);
    jc->row_stride = tables * jc->table_stride + kve_rand_below(rng, 3);
    jc->freed_count = 1 + kve_rand_below(rng, (uint32_t)jc->table_stride);
    jc->n_slot_pos = rows * jc->row_stride;
    jc->n_freed = jc->n_slot_pos;
    uint32_t order[200], tokens = 0;
    kve_rand_perm(rng, order, rows);
    u->n_jobs = kve_rand_below(rng, rows + 1);
    u->move_rows = u->n_jobs ? u->n_jobs : 1;
    u->max_moves = (uint32_t)jc->freed_count;
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        kve_state_job *j = &jc->jobs[i];
        j->kind = kve_rand_below(rng, 6);
        j->row = order[i];
        j->base = j->row * jc->row_stride;
        j->stride = (uint32_t)jc->table_stride;
        uint32_t fts = (uint32_t)jc->freed_count, st = (uint32_t)jc->table_stride;
        j->pos = kve_rand_below(rng, 60);
        j->token = tokens;
        if (j->kind == KVE_JOB_LINEAR) {
            j->first = kve_rand_below(rng, st);
            j->count = kve_rand_below(rng, st - j->first + 1);
        } else if (j->kind == KVE_JOB_ROUND) { /* a full table of st slots */
            j->first = st;
            j->count = kve_rand_below(rng, fts + 1);
        } else if (j->kind == KVE_JOB_FINAL) {
            j->first = kve_rand_below(rng, st + 1);
            j->count = kve_rand_below(rng, 20);
        }
        if (j->kind == KVE_JOB_ROUND || j->kind == KVE_JOB_MOVES_CLEAR)
            j->token = i; /* the job's call row: its own move lists */
        j->seq = (kve_seq){kve_splitmix64(rng), kve_rand_below(rng, 50), kve_rand_below(rng, 9)};
        if (j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_FINAL)
            tokens += j->count;
    }
    u->map_layer_stride = (size_t)tokens * u->table_heads;
    jc->n_map = kve_chance(rng, 15) ? 0 : u->table_layers * u->map_layer_stride;
    jc->n_lists = kve_chance(rng, 15) ? 0 : (size_t)tables * u->move_rows;
    u->jobs = jc->jobs;
}

/* Buffers of a job case: slot_pos, freed, seqs, mapping, moves (host memory). */
typedef struct {
    int32_t *slot_pos, *freed;
    kve_seq *seqs;
    int64_t *map;
    int32_t *moves;
    uint32_t *n_moves;
} kve_job_bufs;

static void kve_job_bufs_fill(uint64_t *rng, const kve_job_case *jc, uint32_t rows, kve_job_bufs *b)
{
    const kve_state_update *u = &jc->u;
    b->slot_pos = malloc(jc->n_slot_pos * 4 + 4);
    b->freed = malloc(jc->n_freed * 4 + 4);
    b->seqs = calloc(rows, sizeof *b->seqs);
    b->map = jc->n_map ? malloc(jc->n_map * 8) : NULL;
    b->moves = jc->n_lists ? malloc(jc->n_lists * u->max_moves * 8) : NULL;
    b->n_moves = jc->n_lists ? calloc(jc->n_lists, 4) : NULL;
    ck_assert(b->slot_pos && b->freed && b->seqs);
    for (size_t i = 0; i < jc->n_slot_pos; i++)
        b->slot_pos[i] = (int32_t)kve_rand_below(rng, 60) - 1;
    /* each freed list: distinct slots of its table, ascending, as kve_evict leaves them */
    uint32_t perm[40], st = (uint32_t)jc->table_stride;
    size_t tables = (size_t)u->table_layers * u->table_heads;
    memset(b->freed, 0, jc->n_freed * 4);
    for (size_t l = 0; l < rows * tables; l++) {
        kve_rand_perm(rng, perm, st);
        int32_t *list =
            b->freed + (l / tables) * jc->row_stride + (l % tables) * jc->table_stride;
        for (size_t i = 0; i < jc->freed_count; i++) /* insertion into order */
            for (size_t k = i + 1; k-- > 0;) {
                if (k == 0 || list[k - 1] < (int32_t)perm[i]) {
                    list[k] = (int32_t)perm[i];
                    break;
                }
                list[k] = list[k - 1];
            }
    }
    for (size_t i = 0; i < jc->n_map; i++)
        b->map[i] = (int64_t)kve_rand_below(rng, st + 1) - 1;
    for (size_t i = 0; i < jc->n_lists * u->max_moves * 2; i++)
        b->moves[i] = (int32_t)kve_rand_below(rng, st);
}

static void kve_job_bufs_free(kve_job_bufs *b)
{
    free(b->slot_pos);
    free(b->freed);
    free(b->seqs);
    free(b->map);
    free(b->moves);
    free(b->n_moves);
}

static kve_job_bufs kve_job_bufs_clone(const kve_job_case *jc, uint32_t rows, const kve_job_bufs *b)
{
    size_t pairs = jc->n_lists * jc->u.max_moves * 2;
    kve_job_bufs c = {malloc(jc->n_slot_pos * 4 + 4),
                      malloc(jc->n_freed * 4 + 4),
                      malloc(rows * sizeof(kve_seq)),
                      jc->n_map ? malloc(jc->n_map * 8) : NULL,
                      pairs ? malloc(pairs * 4) : NULL,
                      jc->n_lists ? malloc(jc->n_lists * 4) : NULL};
    ck_assert(c.slot_pos && c.freed && c.seqs);
    memcpy(c.slot_pos, b->slot_pos, jc->n_slot_pos * 4);
    memcpy(c.freed, b->freed, jc->n_freed * 4);
    memcpy(c.seqs, b->seqs, rows * sizeof(kve_seq));
    if (jc->n_map)
        memcpy(c.map, b->map, jc->n_map * 8);
    if (pairs)
        memcpy(c.moves, b->moves, pairs * 4);
    if (jc->n_lists)
        memcpy(c.n_moves, b->n_moves, jc->n_lists * 4);
    return c;
}

/* The device's outputs among @p b (the order check's), tracked or not. */
static void kve_job_bufs_track(const kve_job_case *jc, uint32_t rows, const kve_job_bufs *b, int on)
{
    void *p[] = {b->slot_pos, b->freed, b->seqs, b->map, b->moves, b->n_moves};
    size_t n[] = {jc->n_slot_pos * 4 + 4, jc->n_freed * 4 + 4, rows * sizeof(kve_seq),
                  jc->n_map * 8, jc->n_lists * jc->u.max_moves * 8, jc->n_lists * 4};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        if (on)
            kve_emu_track(p[i], n[i]);
        else
            kve_emu_untrack(p[i]);
    }
}

static kve_state_update kve_job_bind(const kve_job_case *jc, const kve_job_bufs *b)
{
    kve_state_update u = jc->u;
    u.slot_pos = b->slot_pos;
    u.freed = b->freed;
    u.seqs = b->seqs;
    u.mapping = b->map;
    u.moves = b->moves;
    u.n_moves = b->n_moves;
    u.work = 0; /* the launch sized for the jobs' items, as a state sizes it for its bound */
    for (uint32_t i = 0; i < u.n_jobs; i++)
        u.work += kve_state_job_items(&u, &u.jobs[i]);
    return u;
}

START_TEST(test_state_jobs_random)
{
    uint64_t rng = 0x5eed0101;
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000) / 2;
    for (unsigned i = 0; i < n; i++) {
        uint32_t rows = i % 10 == 9 ? 65 + kve_rand_below(&rng, 136) : 1 + kve_rand_below(&rng, 8);
        static kve_job_case jc;
        kve_job_case_make(&rng, &jc, rows);
        kve_job_bufs want, got;
        kve_job_bufs_fill(&rng, &jc, rows, &want);
        got = kve_job_bufs_clone(&jc, rows, &want);
        kve_state_update uw = kve_job_bind(&jc, &want), ug = kve_job_bind(&jc, &got);
        ck_assert_int_eq(kve_ref->ops->state_update(kve_ref, &uw), KVE_OK);
        size_t s = kve_use_random(&rng, 0, NULL);
        kve_job_bufs_track(&jc, rows, &got, 1);
        ck_assert_int_eq(kve_emu->ops->state_update(kve_emu, &ug), KVE_OK);
        kve_job_bufs_track(&jc, rows, &got, 0);
        ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
        size_t pairs = jc.n_lists * jc.u.max_moves * 2;
        const char *what = memcmp(want.slot_pos, got.slot_pos, jc.n_slot_pos * 4) ? "slot_pos"
                           : memcmp(want.seqs, got.seqs, rows * sizeof(kve_seq))  ? "seqs"
                           : jc.n_map && memcmp(want.map, got.map, jc.n_map * 8)  ? "mapping"
                           : pairs && memcmp(want.moves, got.moves, pairs * 4)    ? "moves"
                           : jc.n_lists && memcmp(want.n_moves, got.n_moves, jc.n_lists * 4)
                               ? "n_moves"
                               : NULL;
        ck_assert_msg(!what, "job list %u (%u jobs, %u rows, %ux%u tables of %zu) [%s]: %s differs",
                      i, jc.u.n_jobs, rows, jc.u.table_layers, jc.u.table_heads, jc.table_stride,
                      kve_shape_name(s), what);
        kve_job_bufs_free(&want);
        kve_job_bufs_free(&got);
    }
}
END_TEST

/* ---- cache writes --------------------------------------------------------- */

/* One case on the CPU and on the emulated device: the same status and
 * bytes; for an error, the entry the host checks name first. */
static void kve_check_cache_write(const kve_case *c, uint64_t *rng, int expect_error)
{
    kve_case_bufs want, got;
    ck_assert_int_eq(kve_case_host_copy(c, &want), 0);
    ck_assert_int_eq(kve_case_host_copy(c, &got), 0);
    char ref_msg[512], msg[512], why[1280];
    kve_status st_ref = kve_case_run(kve_ref, c, &want, NULL, 0);
    snprintf(ref_msg, sizeof ref_msg, "%s", kve_last_error());
    ck_assert_msg(expect_error || st_ref == KVE_OK, "%s: %s", c->label, ref_msg);
    size_t s = kve_use_random(rng, 0, NULL);
    kve_emu_track_case(c, &got, 1);
    kve_status st = kve_case_run(kve_emu, c, &got, NULL, 0);
    kve_emu_track_case(c, &got, 0);
    ck_assert_msg(st == KVE_OK, "%s: the emulated call itself failed: %s", c->label,
                  kve_last_error());
    st = kve_context_synchronize(kve_emu);
    snprintf(msg, sizeof msg, "%s", st == KVE_OK ? "" : kve_emu_context_message());
    /* The host checks indptr's order for the whole call; the device meets a
     * decreasing indptr only in a row some token writes to. */
    int host_only = st == KVE_OK && st_ref != KVE_OK && strstr(ref_msg, "indptr must not decrease");
    ck_assert_msg(host_only || !kve_case_verdict(c, st, msg, &got, st_ref, ref_msg, &want, why, sizeof why),
                  "%s [%s]: emulated vs CPU: %s", c->label, kve_shape_name(s), why);
    ck_assert_msg(st == KVE_OK || !kve_cw_check_blame(kve_ref, c, msg, why, sizeof why),
                  "%s [%s]: %s (CPU: %s)", c->label, kve_shape_name(s), why, ref_msg);
    kve_case_host_free(c, &want);
    kve_case_host_free(c, &got);
}

START_TEST(test_cache_write_random)
{
    uint64_t rng = 0x5eed0102;
    kve_cw_limits lim = {40, 6, 0};
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000), units[17] = {0}, flat = 0, pair = 0,
             scaled = 0, strided = 0;
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        ck_assert_int_eq(kve_case_cache_write(&c, &rng, &lim), 0);
        kve_check_cache_write(&c, &rng, 0);
        units[kve_emu_context_last_unit()]++;
        for (uint32_t k = 0; k < c.cw.n_caches; k++)
            strided += c.cw.part[k].dst_stride_elem != 0;
        flat += c.cw.pages.kind == KVE_PAGES_FLAT;
        pair += c.cw_pair;
        scaled += c.cw.part[0].scale != NULL;
        kve_case_free(&c);
    }
    /* every copy unit was taken, conversions (unit 0), scales, flat slots, one K/V tensor,
     * strided elements (vLLM's CPU K) */
    ck_assert(n < 300 || (units[1] && units[2] && units[4] && units[8] && units[16]));
    ck_assert(n < 300 || (units[0] && scaled && flat && pair && strided > 20));
}
END_TEST

START_TEST(test_cache_write_errors)
{
    uint64_t rng = 0x5eed0103;
    kve_cw_limits lim = {24, 4, 1};
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000) / 8, failed = 0;
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        ck_assert_int_eq(kve_case_cache_write(&c, &rng, &lim), 0);
        kve_check_cache_write(&c, &rng, 1);
        kve_case_bufs b;
        ck_assert_int_eq(kve_case_host_copy(&c, &b), 0);
        failed += kve_case_run(kve_ref, &c, &b, NULL, 0) != KVE_OK;
        kve_case_host_free(&c, &b);
        kve_case_free(&c);
    }
    ck_assert_uint_ge(failed, n / 2); /* most breaks are met */
}
END_TEST

/* ---- the cache write's one launch ---------------------------------------- */

#define KVE_CL_ROWS 4u
#define KVE_CL_SLOTS 12u
#define KVE_CL_HEADS 2u
#define KVE_CL_BYTES 8u
#define KVE_CL_MAX 2u /* max_moves */
#define KVE_CL_CACHE (KVE_CL_ROWS * KVE_CL_HEADS * KVE_CL_SLOTS * KVE_CL_BYTES)

/* Each of two K/V caches after one kve_cache_write on @p ctx from a cache of
 * known bytes: token t (row t, head h) at slots[t][h], move lists
 * moves/n_moves per (row, head). Into @p out (2 caches). */
static void kve_cl_run(kve_context *ctx, const int64_t *slots, const int32_t *moves,
                       const uint32_t *n_moves, unsigned char *out, kve_emu_launch_rec *log,
                       uint32_t *n_log)
{
    static unsigned char src[2][KVE_CL_ROWS * KVE_CL_HEADS * KVE_CL_BYTES];
    static const int32_t rows[KVE_CL_ROWS] = {0, 1, 2, 3};
    const void *host[] = {src[0], src[1], out, out + KVE_CL_CACHE, slots, rows, moves, n_moves};
    const size_t bytes[] = {sizeof src[0], sizeof src[0], KVE_CL_CACHE, KVE_CL_CACHE,
                            KVE_CL_ROWS * KVE_CL_HEADS * 8, sizeof rows,
                            KVE_CL_ROWS * KVE_CL_HEADS * KVE_CL_MAX * 8, KVE_CL_ROWS * KVE_CL_HEADS * 4};
    void *dev[8];
    for (size_t i = 0; i < sizeof src; i++)
        src[i / sizeof src[0]][i % sizeof src[0]] = (unsigned char)(0x80 + i);
    for (size_t i = 0; i < 2 * KVE_CL_CACHE; i++)
        out[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(kve_alloc(ctx, bytes[i], &dev[i]), KVE_OK);
        ck_assert_int_eq(kve_copy(ctx, dev[i], host[i], bytes[i], KVE_COPY_HOST_TO_BACKEND), KVE_OK);
    }
    kve_cache_write_desc w;
    memset(&w, 0, sizeof w);
    w.n_tokens = KVE_CL_ROWS;
    w.n_heads = KVE_CL_HEADS;
    w.entry_bytes = KVE_CL_BYTES;
    w.n_caches = 2;
    w.src[0] = dev[0];
    w.src[1] = dev[1];
    w.dst[0] = dev[2];
    w.dst[1] = dev[3];
    w.layout = KVE_LAYOUT_HND; /* [row][head][slot][entry] */
    w.pages.page_size = KVE_CL_SLOTS;
    w.pages.n_pages = w.pages.n_rows = KVE_CL_ROWS;
    w.slots = dev[4];
    w.slots_stride_token = KVE_CL_HEADS;
    w.slots_stride_head = 1;
    w.token_row = dev[5];
    w.pages.kind = KVE_PAGES_NONE;
    w.moves = dev[6];
    w.n_moves = dev[7];
    w.n_move_rows = KVE_CL_ROWS;
    w.max_moves = KVE_CL_MAX;
    w.moves_stride_row = KVE_CL_HEADS;
    w.moves_stride_head = 1;
    if (log)
        kve_emu_log_start(log, 4);
    ck_assert_msg(kve_cache_write(ctx, &w) == KVE_OK, "%s", kve_last_error());
    ck_assert_int_eq(kve_context_synchronize(ctx), KVE_OK);
    if (log)
        *n_log = kve_emu_log_stop();
    for (int c = 0; c < 2; c++)
        ck_assert_int_eq(kve_copy(ctx, out + c * KVE_CL_CACHE, dev[2 + c], KVE_CL_CACHE,
                                  KVE_COPY_BACKEND_TO_HOST),
                         KVE_OK);
    for (int i = 0; i < 8; i++)
        kve_free(ctx, dev[i]);
}

/* A cache write with moves in some lists and one with none, same shape:
 * one launch each (kve_cache_write_kernel), the same grid; both equal to
 * the CPU byte for byte. The moves include a write into a move's source
 * (the write item moves it first) and into a move's destination (the
 * write wins). */
START_TEST(test_cache_write_launches)
{
    /* [row][head]: row 0 writes slot 5, the source of its move 5 -> 1 in
     * head 0; row 1 writes slot 2, the destination of its move 6 -> 2 in
     * head 1; row 2 writes 9 (moves 7 -> 0 and 4 -> 3 apart); row 3 is
     * padding (-1 in every head) with a move 8 -> 1 in head 0 */
    static const int64_t slots[KVE_CL_ROWS * KVE_CL_HEADS] = {5, 5, 2, 2, 9, 10, -1, -1};
    static const int32_t moves[KVE_CL_ROWS * KVE_CL_HEADS * KVE_CL_MAX * 2] = {
        5, 1, 0, 0, /**/ 0, 0, 0, 0, /* row 0: head 0, head 1 */
        0, 0, 0, 0, /**/ 6, 2, 0, 0, /* row 1 */
        7, 0, 4, 3, /**/ 7, 0, 0, 0, /* row 2 */
        8, 1, 0, 0, /**/ 0, 0, 0, 0};
    static const uint32_t some[KVE_CL_ROWS * KVE_CL_HEADS] = {1, 0, 0, 1, 2, 1, 1, 0},
                          none[KVE_CL_ROWS * KVE_CL_HEADS] = {0};
    static unsigned char want[2 * KVE_CL_CACHE], got[2 * KVE_CL_CACHE];
    const uint32_t *counts[2] = {some, none};
    kve_emu_launch_rec log[2][4];
    uint32_t n_log[2];
    for (int k = 0; k < 2; k++) {
        kve_emu_context_use(kve_pools[k], 64, NULL);
        kve_cl_run(kve_ref, slots, moves, counts[k], want, NULL, NULL);
        kve_cl_run(kve_emu, slots, moves, counts[k], got, log[k], &n_log[k]);
        ck_assert_msg(memcmp(want, got, sizeof want) == 0, "%s moves: emulated vs CPU",
                      k ? "no" : "some");
        /* with moves, row 0's head 0 entry of slot 5 went to slot 1 first */
        ck_assert(k || want[1 * KVE_CL_BYTES] == ((5 * KVE_CL_BYTES * 7 + 1) & 0xff));
    }
    /* (the last run had no moves: slot 1 of row 0, head 0 kept its byte) */
    ck_assert_uint_eq(want[1 * KVE_CL_BYTES], (1 * KVE_CL_BYTES * 7 + 1) & 0xff);
    /* one launch each, alike */
    ck_assert_uint_eq(n_log[0], 1);
    ck_assert_uint_eq(n_log[1], 1);
    kve_emu_launch_rec *at[2] = {&log[0][0], &log[1][0]};
    ck_assert_str_eq(at[0]->what, "kve_cache_write_kernel");
    ck_assert_str_eq(at[1]->what, at[0]->what);
    ck_assert_uint_eq(at[0]->grid, at[1]->grid);
    ck_assert_uint_eq(at[0]->bytes, at[1]->bytes);
    ck_assert_uint_eq(at[0]->threads, at[1]->threads);
    /* items: 2 caches x 4 tokens x 2 heads writes + 4 rows x 2 heads x 2 pairs */
    ck_assert_uint_eq(at[0]->bytes, 2 * 4 * 2 + 4 * 2 * 2);
}
END_TEST

/* ---- state programs ------------------------------------------------------- */

/* Before program @p i: a random pool; a few programs evict on the emulated
 * device too (one 32-thread block: the eviction body has barriers). */
static const char *kve_program_pool(unsigned i, void *arg)
{
    return kve_shape_name(kve_use_random((uint64_t *)arg, 1, i % 100 == 7 ? kve_pools[0] : NULL));
}

static void kve_scenarios(uint64_t seed, unsigned n, kve_scenario_kind kind)
{
    uint64_t rng = seed ^ 0xa5a5;
    char why[2048];
    int rc =
        kve_scenarios_run(seed, n, kind, kve_ref, kve_emu, kve_program_pool, &rng, why, sizeof why);
    ck_assert_msg(!rc, "%s %s", why, kve_emu_context_message());
}

START_TEST(test_state_random)
{
    kve_scenarios(0x5eed0104, kve_env_count("KVE_EMU_CASES", 2000) / 10, KVE_SCENARIO_SMALL);
}
END_TEST

/* Calls with more jobs than one launch carries. */
START_TEST(test_state_many_rows) { kve_scenarios(0x5eed0105, 3, KVE_SCENARIO_MANY_ROWS); }
END_TEST

/* ---- errors --------------------------------------------------------------- */

/* The (row << 32 | table) of the first round of @p jc whose evicted slots
 * are not ascending within its table, or all ones. */
static uint64_t kve_first_bad_item(const kve_job_case *jc, const kve_job_bufs *b)
{
    const kve_state_update *u = &jc->u;
    uint64_t first = ~0ull;
    size_t tables = (size_t)u->table_layers * u->table_heads;
    for (uint32_t k = 0; k < u->n_jobs; k++) {
        const kve_state_job *j = &jc->jobs[k];
        if (j->kind != KVE_JOB_ROUND)
            continue;
        for (size_t t = 0; t < tables; t++) {
            const int32_t *fr = b->freed + j->base + t * j->stride;
            int bad = 0;
            for (uint32_t i = 0; i < j->count; i++)
                bad |= fr[i] < 0 || (uint32_t)fr[i] >= j->first || (i && fr[i] <= fr[i - 1]);
            uint64_t at = (uint64_t)j->row << 32 | t;
            first = bad && at < first ? at : first;
        }
    }
    return first;
}

/* Freed lists holding slots outside their tables or out of order: the
 * table is skipped, and the lowest (row, table) reported, within bounds
 * (ASan watches). */
START_TEST(test_state_update_errors)
{
    uint64_t rng = 0x5eed0106;
    unsigned raised = 0;
    for (unsigned i = 0; i < 500; i++) { /* rounds read freed lists: a sixth of the jobs */
        uint32_t rows = 1 + kve_rand_below(&rng, 6);
        static kve_job_case jc;
        kve_job_case_make(&rng, &jc, rows);
        kve_job_bufs b;
        kve_job_bufs_fill(&rng, &jc, rows, &b);
        static const int32_t bad[] = {-1, -2, -1000, INT32_MIN, 40, 41, 1 << 30, INT32_MAX};
        for (uint32_t k = 1 + kve_rand_below(&rng, 3); k > 0; k--) {
            size_t at = kve_rand_below(&rng, (uint32_t)jc.n_freed);
            const kve_state_job *j = jc.u.n_jobs ? &jc.jobs[kve_rand_below(&rng, jc.u.n_jobs)] : 0;
            if (j && j->kind == KVE_JOB_ROUND && j->count && kve_chance(&rng, 80)) /* one it reads */
                at = j->base +
                     kve_rand_below(&rng, jc.u.table_layers * jc.u.table_heads) * j->stride +
                     kve_rand_below(&rng, j->count);
            b.freed[at] = bad[kve_rand_below(&rng, 8)];
        }
        uint64_t first = kve_first_bad_item(&jc, &b);
        kve_state_update u = kve_job_bind(&jc, &b);
        kve_use_random(&rng, 0, NULL);
        ck_assert_int_eq(kve_emu->ops->state_update(kve_emu, &u), KVE_OK);
        kve_status st = kve_context_synchronize(kve_emu);
        ck_assert_int_eq(st, first == ~0ull ? KVE_OK : KVE_ERR_INTERNAL);
        if (st != KVE_OK) {
            char want[64];
            snprintf(want, sizeof want, "row %u, table %u:", (unsigned)(first >> 32),
                     (unsigned)first);
            ck_assert_msg(strstr(kve_emu_context_message(), want), "\"%s\": want \"%s\"",
                          kve_emu_context_message(), want);
            raised++;
        }
        kve_job_bufs_free(&b);
    }
    ck_assert_uint_ge(raised, 30);
}
END_TEST


/* ---- the launches of a decode step ----------------------------------------- */

enum { KVE_LS_ROWS = 4, KVE_LS_STEPS = 8, KVE_LS_LOG = 16 };

/* A state of KVE_LS_ROWS rows (P = 2, B = 8, W = 2, r = 4: capacity 12)
 * on @p ctx, row i filled to @p fill[i] tokens. */
static kve_state *kve_ls_state(kve_context *ctx, const uint32_t *fill)
{
    kve_state_desc d = {{7, 0, 8, 2, 4}, KVE_LS_ROWS, 2, 3, 0, 0, 12, 0, 0, 0};
    kve_state *st = NULL;
    ck_assert_int_eq(kve_state_create(ctx, &d, NULL, 0, &st), KVE_OK);
    for (uint32_t i = 0; i < KVE_LS_ROWS; i++) {
        ck_assert_int_eq(kve_state_admit(st, i, 100 + i, 2), KVE_OK);
        ck_assert_int_eq(kve_state_append(st, 1, &i, &fill[i], NULL), KVE_OK);
    }
    return st;
}

/* One decode step of every row (mapping and moves asked for) on the emu
 * state @p e and the CPU state @p c; the emulator's log of it in @p log;
 * returns how many rows evicted. The two states must agree on every table. */
static uint32_t kve_ls_step(kve_state *e, kve_state *c, kve_emu_launch_rec *log, uint32_t *n_log)
{
    static const uint32_t rows[KVE_LS_ROWS] = {0, 1, 2, 3}, ones[KVE_LS_ROWS] = {1, 1, 1, 1};
    int64_t map[2][2 * KVE_LS_ROWS * 3];
    int32_t moves[2][2 * KVE_LS_ROWS * 3 * 4 * 2];
    uint32_t n_moves[2][2 * KVE_LS_ROWS * 3], before[KVE_LS_ROWS], evicted = 0;
    for (uint32_t i = 0; i < KVE_LS_ROWS; i++) {
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_get_seq(c, i, &info), KVE_OK);
        before[i] = info.round;
    }
    for (int k = 0; k < 2; k++) {
        kve_step_buffers out = {.slot_mapping = map[k], .max_tokens = KVE_LS_ROWS, .moves = moves[k],
                                .n_moves = n_moves[k], .max_rows = KVE_LS_ROWS, .max_moves = 4};
        if (!k)
            kve_emu_log_start(log, KVE_LS_LOG);
        ck_assert_int_eq(kve_state_append(k ? c : e, KVE_LS_ROWS, rows, ones, &out), KVE_OK);
        if (!k)
            *n_log = kve_emu_log_stop();
    }
    ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
    ck_assert_mem_eq(map[0], map[1], sizeof map[0]);
    ck_assert_mem_eq(n_moves[0], n_moves[1], sizeof n_moves[0]);
    for (uint32_t i = 0; i < KVE_LS_ROWS; i++) {
        int32_t te[2 * 3 * 12], tc[2 * 3 * 12];
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_read_slots(e, i, te, 72), KVE_OK);
        ck_assert_int_eq(kve_state_read_slots(c, i, tc, 72), KVE_OK);
        ck_assert_mem_eq(te, tc, sizeof te);
        ck_assert_int_eq(kve_state_get_seq(c, i, &info), KVE_OK);
        evicted += info.round != before[i];
    }
    return evicted;
}

/* issue 11: a decode step launches the same kernels on the same grids, and
 * copies the same bytes, whether no row, one row or every row evicts. */
START_TEST(test_state_launches)
{
    static const uint32_t phases[2][KVE_LS_ROWS] = {{11, 8, 8, 8}, {10, 10, 10, 10}};
    static const char *const want[] = {"upload",           "kve_state_plan_kernel",
                                       "kve_state_kernel", "kve_state_evict_kernel",
                                       "kve_state_round_kernel", "kve_state_kernel",
                                       "kve_state_kernel"};
    kve_emu_launch_rec first[KVE_LS_LOG], log[KVE_LS_LOG];
    uint32_t n_first = 0, seen[KVE_LS_ROWS + 1] = {0};
    for (int p = 0; p < 2; p++) {
        kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
        kve_state *e = kve_ls_state(kve_emu, phases[p]), *c = kve_ls_state(kve_ref, phases[p]);
        for (int step = 0; step < KVE_LS_STEPS; step++) {
            uint32_t n_log, ev = kve_ls_step(e, c, n_first ? log : first, &n_log);
            seen[ev]++;
            if (!n_first) {
                ck_assert_uint_eq(n_log, KVE_COUNT(want));
                for (uint32_t k = 0; k < n_log; k++)
                    ck_assert_str_eq(first[k].what, want[k]);
                n_first = n_log;
                continue;
            }
            ck_assert_uint_eq(n_log, n_first);
            for (uint32_t k = 0; k < n_log; k++) {
                ck_assert_str_eq(log[k].what, first[k].what);
                ck_assert_uint_eq(log[k].grid, first[k].grid);
                ck_assert_uint_eq(log[k].bytes, first[k].bytes);
            }
        }
        kve_state_destroy(e);
        kve_state_destroy(c);
    }
    /* the steps covered no eviction, one row's, and every row's */
    ck_assert_uint_gt(seen[0], 0);
    ck_assert_uint_gt(seen[1], 0);
    ck_assert_uint_gt(seen[KVE_LS_ROWS], 0);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(jobs, test_state_jobs_random),
        KVE_TEST(cache_write, test_cache_write_random),
        KVE_TEST(cache_write, test_cache_write_launches),
        KVE_TEST(state, test_state_random),
        KVE_TEST(state, test_state_many_rows),
        KVE_TEST(state, test_state_launches),
        KVE_TEST(engine_errors, test_cache_write_errors),
        KVE_TEST(engine_errors, test_state_update_errors),
    };
    const kve_suite_spec spec = {"emu_engine", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

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
#include "kve_backend_impl.h"
#include "kve_engine_cases.h"
#include "kve_scenario.h"

static kve_context *kve_ref, *kve_emu;

static void kve_engine_setup(void)
{
    kve_pools_setup();
    kve_ref = kve_reference();
    kve_emu = kve_emu_context_create();
    ck_assert_ptr_nonnull(kve_emu);
}

static void kve_engine_teardown(void)
{
    kve_context_destroy(kve_emu);
    kve_context_destroy(kve_ref);
    kve_pools_teardown();
}

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
    size_t n_slot_pos, n_freed, n_map;
    kve_state_job jobs[200];
} kve_job_case;

static void kve_job_case_make(uint64_t *rng, kve_job_case *jc, uint32_t rows)
{
    kve_state_update *u = &jc->u;
    memset(jc, 0, sizeof *jc);
    u->table_layers = 1 + kve_rand_below(rng, 3);
    u->table_heads = 1 + kve_rand_below(rng, 3);
    uint32_t tables = u->table_layers * u->table_heads;
    u->table_stride = 1 + kve_rand_below(rng, 40);
    u->row_stride = tables * u->table_stride + kve_rand_below(rng, 3);
    u->freed_table_stride = 1 + kve_rand_below(rng, (uint32_t)u->table_stride);
    u->freed_row_stride = tables * u->freed_table_stride + kve_rand_below(rng, 3);
    jc->n_slot_pos = rows * u->row_stride;
    jc->n_freed = rows * u->freed_row_stride;
    uint32_t order[200], tokens = 0;
    kve_rand_perm(rng, order, rows);
    u->n_jobs = kve_rand_below(rng, rows + 1);
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        kve_state_job *j = &jc->jobs[i];
        j->kind = kve_rand_below(rng, 6);
        j->row = order[i];
        uint32_t fts = (uint32_t)u->freed_table_stride, st = (uint32_t)u->table_stride;
        if (j->kind == KVE_JOB_LINEAR) {
            j->first = kve_rand_below(rng, st);
            j->count = kve_rand_below(rng, st - j->first + 1);
        } else if (j->kind == KVE_JOB_FREED) {
            j->first = kve_rand_below(rng, fts);
            j->count = kve_rand_below(rng, fts - j->first + 1);
        } else if (j->kind == KVE_JOB_CLEAR) {
            j->count = kve_rand_below(rng, fts + 1);
        } else if (j->kind == KVE_JOB_VERIFY) {
            j->count = kve_rand_below(rng, 20);
        }
        j->pos = kve_rand_below(rng, 1000);
        j->token = tokens;
        j->seq = (kve_seq){kve_rand(rng), kve_rand_below(rng, 50), kve_rand_below(rng, 9)};
        if (j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_FREED || j->kind == KVE_JOB_VERIFY)
            tokens += j->count;
    }
    u->map_layer_stride = (size_t)tokens * u->table_heads;
    jc->n_map = kve_chance(rng, 15) ? 0 : u->table_layers * u->map_layer_stride;
    u->jobs = jc->jobs;
}

/* Buffers of a job case: slot_pos, freed, seqs, mapping (host memory). */
typedef struct {
    int32_t *slot_pos, *freed;
    kve_seq *seqs;
    int64_t *map;
} kve_job_bufs;

static void kve_job_bufs_fill(uint64_t *rng, const kve_job_case *jc, uint32_t rows, kve_job_bufs *b)
{
    const kve_state_update *u = &jc->u;
    b->slot_pos = malloc(jc->n_slot_pos * 4 + 4);
    b->freed = malloc(jc->n_freed * 4 + 4);
    b->seqs = calloc(rows, sizeof *b->seqs);
    b->map = jc->n_map ? malloc(jc->n_map * 8) : NULL;
    ck_assert(b->slot_pos && b->freed && b->seqs);
    for (size_t i = 0; i < jc->n_slot_pos; i++)
        b->slot_pos[i] = (int32_t)kve_rand_below(rng, 60) - 1;
    /* each freed list: distinct slots of its table, as kve_evict leaves them */
    uint32_t perm[40], st = (uint32_t)u->table_stride;
    size_t tables = (size_t)u->table_layers * u->table_heads;
    memset(b->freed, 0, jc->n_freed * 4);
    for (size_t l = 0; l < rows * tables; l++) {
        kve_rand_perm(rng, perm, st);
        int32_t *list =
            b->freed + (l / tables) * u->freed_row_stride + (l % tables) * u->freed_table_stride;
        for (size_t i = 0; i < u->freed_table_stride; i++)
            list[i] = (int32_t)perm[i];
    }
    for (size_t i = 0; i < jc->n_map; i++)
        b->map[i] = (int64_t)kve_rand_below(rng, st + 1) - 1;
}

static void kve_job_bufs_free(kve_job_bufs *b)
{
    free(b->slot_pos);
    free(b->freed);
    free(b->seqs);
    free(b->map);
}

static kve_job_bufs kve_job_bufs_clone(const kve_job_case *jc, uint32_t rows, const kve_job_bufs *b)
{
    kve_job_bufs c = {malloc(jc->n_slot_pos * 4 + 4), malloc(jc->n_freed * 4 + 4),
                      malloc(rows * sizeof(kve_seq)), jc->n_map ? malloc(jc->n_map * 8) : NULL};
    ck_assert(c.slot_pos && c.freed && c.seqs);
    memcpy(c.slot_pos, b->slot_pos, jc->n_slot_pos * 4);
    memcpy(c.freed, b->freed, jc->n_freed * 4);
    memcpy(c.seqs, b->seqs, rows * sizeof(kve_seq));
    if (jc->n_map)
        memcpy(c.map, b->map, jc->n_map * 8);
    return c;
}

static kve_state_update kve_job_bind(const kve_job_case *jc, const kve_job_bufs *b)
{
    kve_state_update u = jc->u;
    u.slot_pos = b->slot_pos;
    u.freed = b->freed;
    u.seqs = b->seqs;
    u.mapping = b->map;
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
        ck_assert_int_eq(kve_emu->ops->state_update(kve_emu, &ug), KVE_OK);
        ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
        const char *what = memcmp(want.slot_pos, got.slot_pos, jc.n_slot_pos * 4) ? "slot_pos"
                           : memcmp(want.seqs, got.seqs, rows * sizeof(kve_seq))  ? "seqs"
                           : jc.n_map && memcmp(want.map, got.map, jc.n_map * 8)  ? "mapping"
                                                                                  : NULL;
        ck_assert_msg(!what, "job list %u (%u jobs, %u rows, %ux%u tables of %zu) [%s]: %s differs",
                      i, jc.u.n_jobs, rows, jc.u.table_layers, jc.u.table_heads, jc.u.table_stride,
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
    kve_status st = kve_case_run(kve_emu, c, &got, NULL, 0);
    ck_assert_msg(st == KVE_OK, "%s: the emulated call itself failed: %s", c->label,
                  kve_last_error());
    st = kve_context_synchronize(kve_emu);
    snprintf(msg, sizeof msg, "%s", st == KVE_OK ? "" : kve_emu_context_message());
    ck_assert_msg(!kve_case_verdict(c, st, msg, &got, st_ref, ref_msg, &want, why, sizeof why),
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
    unsigned n = kve_env_count("KVE_EMU_CASES", 2000), units[17] = {0};
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        ck_assert_int_eq(kve_case_cache_write(&c, &rng, &lim), 0);
        kve_check_cache_write(&c, &rng, 0);
        units[kve_emu_context_last_unit()]++;
        kve_case_free(&c);
    }
    /* every copy unit was taken */
    ck_assert(n < 300 || (units[1] && units[2] && units[4] && units[8] && units[16]));
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

/* The (row << 32 | table) of the first item of @p jc that reads a slot
 * outside its table, or all ones. */
static uint64_t kve_first_bad_item(const kve_job_case *jc, const kve_job_bufs *b)
{
    const kve_state_update *u = &jc->u;
    uint64_t first = ~0ull, st = u->table_stride;
    size_t tables = (size_t)u->table_layers * u->table_heads;
    for (uint32_t k = 0; k < u->n_jobs; k++) {
        const kve_state_job *j = &jc->jobs[k];
        for (size_t t = 0; t < tables; t++) {
            const int32_t *fr = b->freed + j->row * u->freed_row_stride + t * u->freed_table_stride;
            int bad = 0;
            for (uint32_t i = 0; i < j->count; i++) {
                if (j->kind == KVE_JOB_FREED || j->kind == KVE_JOB_CLEAR) {
                    int32_t v = fr[(j->kind == KVE_JOB_FREED ? j->first : 0) + i];
                    bad |= v < 0 || (uint64_t)v >= st;
                } else if (j->kind == KVE_JOB_VERIFY && b->map) {
                    bad |= b->map[(t / u->table_heads) * u->map_layer_stride +
                                  (size_t)(j->token + i) * u->table_heads + t % u->table_heads] >=
                           (int64_t)st;
                }
            }
            uint64_t at = (uint64_t)j->row << 32 | t;
            first = bad && at < first ? at : first;
        }
    }
    return first;
}

/* Freed lists and mappings holding slots outside their tables: skipped,
 * and the lowest (row, table) reported, within bounds (ASan watches). */
START_TEST(test_state_update_errors)
{
    uint64_t rng = 0x5eed0106;
    unsigned raised = 0;
    for (unsigned i = 0; i < 200; i++) {
        uint32_t rows = 1 + kve_rand_below(&rng, 6);
        static kve_job_case jc;
        kve_job_case_make(&rng, &jc, rows);
        kve_job_bufs b;
        kve_job_bufs_fill(&rng, &jc, rows, &b);
        static const int32_t bad[] = {-1, -2, -1000, INT32_MIN, 40, 41, 1 << 30, INT32_MAX};
        for (uint32_t k = 1 + kve_rand_below(&rng, 3); k > 0; k--) {
            if (kve_chance(&rng, 60) || !jc.n_map)
                b.freed[kve_rand_below(&rng, (uint32_t)jc.n_freed)] = bad[kve_rand_below(&rng, 8)];
            else
                b.map[kve_rand_below(&rng, (uint32_t)jc.n_map)] =
                    (int64_t)jc.u.table_stride + kve_rand_below(&rng, 5) * 1000000007ll;
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

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(jobs, test_state_jobs_random),
        KVE_TEST(cache_write, test_cache_write_random),
        KVE_TEST(state, test_state_random),
        KVE_TEST(state, test_state_many_rows),
        KVE_TEST(engine_errors, test_cache_write_errors),
        KVE_TEST(engine_errors, test_state_update_errors),
    };
    const kve_suite_spec spec = {"emu_engine", 1200, 0, kve_engine_setup, kve_engine_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

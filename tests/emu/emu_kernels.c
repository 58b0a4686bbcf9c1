/* emu_kernels.c — kernels_cuda/'s bodies as plain C on the emulator. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_kernels.h"
#include "kve_launch.h"
#include "kve_util.h"


static _Thread_local char kve_emu_message[512];

static kve_status kve_emu_set_error(kve_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kve_emu_message, sizeof kve_emu_message, fmt, ap);
    va_end(ap);
    return status;
}

kve_launch_limits kve_emu_limits(uint32_t max_grid)
{
    kve_launch_limits lim = {max_grid, max_grid, SIZE_MAX};
    return lim;
}

void kve_emu_errors_reset(kve_emu_errors *e) { memset(e->rec, 0xff, sizeof e->rec); }

/* ---- the order check ------------------------------------------------------- */

typedef struct kve_emu_region {
    unsigned char *p;
    size_t bytes;
} kve_emu_region;

static kve_emu_region *kve_emu_regions;
static size_t kve_emu_n_regions, kve_emu_cap_regions;
static int kve_emu_checking;

void kve_emu_track(void *p, size_t bytes)
{
    if (!p)
        return;
    if (kve_emu_n_regions == kve_emu_cap_regions) {
        size_t cap = kve_emu_cap_regions ? 2 * kve_emu_cap_regions : 64;
        kve_emu_region *r = (kve_emu_region *)realloc(kve_emu_regions, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "emu: out of memory tracking device memory\n");
            abort();
        }
        kve_emu_regions = r;
        kve_emu_cap_regions = cap;
    }
    kve_emu_region r = {(unsigned char *)p, bytes};
    kve_emu_regions[kve_emu_n_regions++] = r;
}

void kve_emu_untrack(const void *p)
{
    for (size_t i = 0; i < kve_emu_n_regions; i++)
        if (kve_emu_regions[i].p == (const unsigned char *)p) {
            kve_emu_regions[i] = kve_emu_regions[--kve_emu_n_regions];
            return;
        }
}

int kve_emu_order_check(int on)
{
    int was = kve_emu_checking;
    kve_emu_checking = on;
    return was;
}

static size_t kve_emu_tracked_bytes(void)
{
    size_t n = 0;
    for (size_t i = 0; i < kve_emu_n_regions; i++)
        n += kve_emu_regions[i].bytes;
    return n;
}

/* The tracked memory to @p buf (@p save) or back from it. */
static void kve_emu_snapshot(unsigned char *buf, int save)
{
    for (size_t i = 0; i < kve_emu_n_regions; i++) {
        kve_emu_region *r = &kve_emu_regions[i];
        if (save)
            memcpy(buf, r->p, r->bytes);
        else
            memcpy(r->p, buf, r->bytes);
        buf += r->bytes;
    }
}

/* The first tracked byte (outside the scratch) where the memory now differs
 * from @p ref, as an offset into the snapshot; SIZE_MAX when none. */
static size_t kve_emu_first_diff(const unsigned char *ref, const unsigned char *scratch,
                                 size_t scratch_bytes)
{
    size_t at = 0;
    for (size_t i = 0; i < kve_emu_n_regions; i++) {
        const kve_emu_region *r = &kve_emu_regions[i];
        for (size_t b = 0; b < r->bytes; b++) {
            const unsigned char *q = r->p + b;
            int in_scratch = scratch && q >= scratch && q < scratch + scratch_bytes;
            if (!in_scratch && *q != ref[at + b])
                return at + b;
        }
        at += r->bytes;
    }
    return SIZE_MAX;
}

typedef struct kve_emu_launch_args {
    kve_emu_pool *pool;
    uint32_t grid;
    size_t smem;
    kve_emu_body body;
    void *arg;
} kve_emu_launch_args;

/* One run from the initial memory @p init in @p mode (phase @p flip in
 * @p flip_mode); 0 when it launched. */
static int kve_emu_run_once(const kve_emu_launch_args *l, unsigned char *init, kve_emu_order mode,
                            uint32_t flip, kve_emu_order flip_mode)
{
    kve_emu_snapshot(init, 0);
    kve_emu_pool_order(l->pool, mode, flip, flip_mode);
    int rc = kve_emu_launch(l->pool, l->grid, l->smem, l->body, l->arg);
    kve_emu_pool_order(l->pool, KVE_EMU_ORDER_RANDOM, KVE_EMU_NO_PHASE, KVE_EMU_ORDER_RANDOM);
    return rc;
}

/* The orders disagree: find the first phase whose order alone changes the
 * outputs, say so and stop. */
static void kve_emu_order_failed(const kve_emu_launch_args *l, const char *kernel,
                                 unsigned char *init, const unsigned char *ref, uint32_t phases,
                                 const char *which, const unsigned char *scratch,
                                 size_t scratch_bytes)
{
    uint32_t found = KVE_EMU_NO_PHASE;
    for (uint32_t k = 0; k < phases && found == KVE_EMU_NO_PHASE; k++) {
        for (int m = KVE_EMU_ORDER_REVERSE; m >= KVE_EMU_ORDER_RANDOM; m--) {
            kve_emu_run_once(l, init, KVE_EMU_ORDER_FORWARD, k, (kve_emu_order)m);
            if (kve_emu_first_diff(ref, scratch, scratch_bytes) != SIZE_MAX) {
                found = k;
                break;
            }
        }
    }
    if (found == KVE_EMU_NO_PHASE)
        fprintf(stderr,
                "emu: kernel %s: its outputs depend on the order of a block's threads (forward "
                "and %s differ; no single phase's order alone changes them)\n",
                kernel, which);
    else
        fprintf(stderr,
                "emu: kernel %s: its outputs depend on the order of a block's threads in phase "
                "%u (%s; forward and %s differ)\n",
                kernel, found,
                found == 0 ? "before the first barrier" : "between two barriers", which);
    abort();
}

/* The launch three times, forward, reverse and random, from the same
 * memory; the memory is left as the forward run left it. */
static int kve_emu_run_checked(const kve_emu_launch_args *l, const char *kernel,
                               const unsigned char *scratch, size_t scratch_bytes)
{
    size_t bytes = kve_emu_tracked_bytes();
    unsigned char *init = (unsigned char *)malloc(bytes ? bytes : 1);
    unsigned char *ref = (unsigned char *)malloc(bytes ? bytes : 1);
    if (!init || !ref) {
        free(init);
        free(ref);
        return -1;
    }
    kve_emu_snapshot(init, 1);
    int rc = kve_emu_run_once(l, init, KVE_EMU_ORDER_FORWARD, KVE_EMU_NO_PHASE,
                              KVE_EMU_ORDER_FORWARD);
    uint32_t phases = kve_emu_pool_phases(l->pool);
    kve_emu_snapshot(ref, 1);
    static const kve_emu_order others[] = {KVE_EMU_ORDER_REVERSE, KVE_EMU_ORDER_RANDOM};
    static const char *const names[] = {"reverse", "random"};
    for (int i = 0; i < 2 && !rc; i++) {
        rc = kve_emu_run_once(l, init, others[i], KVE_EMU_NO_PHASE, others[i]);
        if (!rc && kve_emu_first_diff(ref, scratch, scratch_bytes) != SIZE_MAX)
            kve_emu_order_failed(l, kernel, init, ref, phases, names[i], scratch, scratch_bytes);
    }
    if (!rc)
        kve_emu_snapshot(ref, 0);
    free(init);
    free(ref);
    return rc;
}

int kve_emu_run(kve_emu_pool *pool, const char *kernel, uint32_t grid, size_t smem,
                kve_emu_body body, void *arg, const void *scratch, size_t scratch_bytes)
{
    kve_emu_launch_args l = {pool, grid, smem, body, arg};
    if (!kve_emu_checking)
        return kve_emu_launch(pool, grid, smem, body, arg);
    return kve_emu_run_checked(&l, kernel, (const unsigned char *)scratch, scratch_bytes);
}

kve_status kve_emu_errors_status(const kve_emu_errors *e, char *msg, size_t msg_bytes)
{
    kve_emu_message[0] = '\0';
    kve_status st = kve_dev_errors_status(e->rec, kve_emu_set_error);
    snprintf(msg, msg_bytes, "%s", kve_emu_message);
    return st;
}

static void kve_emu_keys_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_keys_grid(tc, (const kve_keys_args *)arg);
}

int kve_emu_keys(kve_emu_pool *pool, uint32_t grid, uint64_t seed, uint32_t flags,
                 const kve_coord *coords, size_t n, uint64_t *keys)
{
    kve_keys_args a = {seed, flags, coords, n, keys};
    return kve_emu_run(pool, "kve_keys_kernel", grid, 0, kve_emu_keys_body, &a, NULL, 0);
}

static void kve_emu_evict_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_evict_grid(tc, (kve_evict_smem *)smem, (const kve_evict_args *)arg,
                   smem + KVE_ALIGN_UP(sizeof(kve_evict_smem), 16));
}

/* The block's shared memory: the fixed state, then the plan's dynamic part. */
static size_t kve_emu_evict_smem(const kve_evict_plan *p)
{
    return KVE_ALIGN_UP(sizeof(kve_evict_smem), 16) + p->dyn_smem;
}

int kve_emu_evict_planned(kve_emu_pool *pool, const kve_evict_plan *p, const kve_batch *b,
                          const kve_evict_out *o, void *workspace, kve_emu_errors *e)
{
    kve_evict_args a = kve_evict_args_make(b, o, p, workspace, e->rec);
    return kve_emu_run(pool, "kve_evict_kernel", p->grid, kve_emu_evict_smem(p),
                       kve_emu_evict_body, &a, workspace,
                       workspace ? p->workspace_bytes + KVE_EVICT_SCRATCH_ALIGN : 0);
}

int kve_emu_evict(kve_emu_pool *pool, uint32_t grid, int global_scratch, const kve_batch *b,
                  const kve_evict_out *o, kve_emu_errors *e)
{
    /* The plan of a device whose shared memory holds everything, or
     * nothing; then the grid asked for, which may exceed the heads. */
    kve_launch_limits lim = {grid, grid, global_scratch ? 0 : SIZE_MAX};
    kve_evict_plan p = kve_evict_plan_make(&lim, b);
    p.grid = grid;
    unsigned char *ws = NULL;
    if (p.place == KVE_SCRATCH_WORKSPACE) {
        size_t bytes = (size_t)grid * p.scratch_stride + KVE_EVICT_SCRATCH_ALIGN;
        ws = (unsigned char *)malloc(bytes);
        if (!ws)
            return -1;
        memset(ws, 0x5a, bytes); /* garbage, as device memory holds */
    }
    int rc = kve_emu_evict_planned(pool, &p, b, o, ws, e);
    free(ws);
    return rc;
}

static void kve_emu_move_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_compact_move_grid(tc, (kve_compact_smem *)smem, (const kve_compact_args *)arg);
}

static void kve_emu_slots_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_compact_slots_grid(tc, (kve_compact_smem *)smem, (const kve_compact_args *)arg);
}

int kve_emu_compact(kve_emu_pool *pool, uint32_t grid, const kve_compact_desc *d,
                    kve_emu_errors *e, uint32_t *unit_used)
{
    kve_compact_args a;
    if (kve_compact_args_make(d, e->rec, kve_emu_set_error, &a) != KVE_OK)
        return -1;
    *unit_used = a.unit;
    if (kve_emu_run(pool, "kve_compact_move_kernel", grid, sizeof(kve_compact_smem),
                    kve_emu_move_body, &a, NULL, 0))
        return -1;
    return kve_emu_run(pool, "kve_compact_slots_kernel", grid, sizeof(kve_compact_smem),
                       kve_emu_slots_body, &a, NULL, 0);
}

static void kve_emu_state_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_state_grid(tc, (const kve_state_args *)arg);
}

int kve_emu_state_update(kve_emu_pool *pool, uint32_t max_grid, const kve_state_update *u,
                         kve_emu_errors *e, uint32_t *grid_used)
{
    uint32_t nt, ws;
    kve_emu_pool_shape(pool, &nt, &ws);
    *grid_used = 0;
    if (!u->n_jobs)
        return 0;
    kve_state_args a = kve_state_args_make(u, e->rec);
    kve_launch_limits lim = kve_emu_limits(max_grid);
    *grid_used = kve_state_plan_grid(&lim, u, nt);
    return kve_emu_run(pool, "kve_state_kernel", *grid_used, 0, kve_emu_state_body, &a, NULL,
                       0);
}

static void kve_emu_state_plan_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_state_plan_run(tc, (kve_plan_smem *)smem, (const kve_state_plan_args *)arg);
}

int kve_emu_state_plan(kve_emu_pool *pool, const kve_state_plan *p, kve_emu_errors *e)
{
    kve_state_plan_args a = {*p, e->rec};
    return kve_emu_run(pool, "kve_state_plan_kernel", 1, sizeof(kve_plan_smem),
                       kve_emu_state_plan_body, &a, NULL, 0);
}

static void kve_emu_state_round_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_state_round_grid(tc, (kve_round_smem *)smem, (const kve_state_args *)arg);
}

int kve_emu_state_round(kve_emu_pool *pool, const kve_launch_limits *lim,
                        const kve_state_update *u, kve_emu_errors *e)
{
    if (!u->n_jobs)
        return 0;
    kve_state_args a = kve_state_args_make(u, e->rec);
    return kve_emu_run(pool, "kve_state_round_kernel", kve_state_round_plan_grid(lim, u),
                       sizeof(kve_round_smem), kve_emu_state_round_body, &a, NULL, 0);
}

static void kve_emu_state_evict_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_state_evict_grid(tc, (kve_evict_smem *)smem, (const kve_state_evict_args *)arg,
                         smem + KVE_ALIGN_UP(sizeof(kve_evict_smem), 16));
}

int kve_emu_state_evict(kve_emu_pool *pool, const kve_evict_plan *p, const kve_state_evict *se,
                        kve_emu_errors *e)
{
    kve_state_evict_args a = kve_state_evict_args_make(se, p, e->rec);
    return kve_emu_run(pool, "kve_state_evict_kernel", p->grid, kve_emu_evict_smem(p),
                       kve_emu_state_evict_body, &a, se->workspace, se->workspace_bytes);
}

static void kve_emu_cache_write_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_cache_write_grid(tc, (const kve_cache_write_args *)arg);
}

kve_status kve_emu_cache_write_plan(const kve_cache_write_desc *d, uint32_t threads,
                                    const kve_launch_limits *lim, kve_cache_write_plan *p)
{
    kve_cache_write_args a;
    memset(&a, 0, sizeof a);
    kve_status st = kve_cache_write_args_make(d, threads, NULL, kve_emu_set_error, &a);
    if (st == KVE_OK)
        *p = kve_cache_write_plan_make(lim, &a, threads);
    return st;
}

kve_status kve_emu_cache_write(kve_emu_pool *pool, uint32_t max_grid,
                               const kve_cache_write_desc *d, kve_emu_errors *e,
                               uint32_t *unit_used)
{
    uint32_t nt, ws;
    kve_emu_pool_shape(pool, &nt, &ws);
    kve_cache_write_args a;
    kve_status st = kve_cache_write_args_make(d, nt, e->rec, kve_emu_set_error, &a);
    if (st != KVE_OK)
        return st;
    *unit_used = a.unit[0]; /* cache 0's: 0 when it converts */
    kve_launch_limits lim = kve_emu_limits(max_grid);
    kve_cache_write_plan p = kve_cache_write_plan_make(&lim, &a, nt);
    return kve_emu_run(pool, "kve_cache_write_kernel", p.grid, 0, kve_emu_cache_write_body,
                       &a, NULL, 0)
               ? KVE_ERR_INTERNAL
               : KVE_OK;
}

static void kve_emu_score_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_score_grid(tc, smem, (const kve_score_args *)arg);
}

int kve_emu_score(kve_emu_pool *pool, const kve_score_plan *p, const kve_score_call *c,
                  unsigned char *scratch, uint32_t *arrived, kve_emu_errors *e)
{
    static kve_score_args a; /* as a kernel's parameters: off the stack */
    kve_score_args_make(c, p, scratch, arrived, e->rec, &a);
    return kve_emu_run(pool, "kve_score_kernel", p->grid, p->smem, kve_emu_score_body, &a, NULL,
                       0);
}

int kve_emu_run_case(kve_emu_pool *pool, uint32_t grid, int global_scratch, const kve_case *c,
                     const kve_case_bufs *bufs, kve_emu_errors *e, uint32_t *unit_used)
{
    if (c->is_compact) {
        kve_compact_desc d;
        kve_case_bind_compact(c, bufs, &d);
        return kve_emu_compact(pool, grid, &d, e, unit_used);
    }
    kve_batch b;
    kve_evict_out o;
    kve_case_bind_evict(c, bufs, &b, &o);
    *unit_used = 0;
    return kve_emu_evict(pool, grid, global_scratch, &b, &o, e);
}

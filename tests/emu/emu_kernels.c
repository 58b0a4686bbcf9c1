/* emu_kernels.c — common/device/'s bodies as plain C on the emulator. */
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
    return kve_emu_launch(pool, grid, 0, kve_emu_keys_body, &a);
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
    return kve_emu_launch(pool, p->grid, kve_emu_evict_smem(p), kve_emu_evict_body, &a);
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
    if (kve_emu_launch(pool, grid, sizeof(kve_compact_smem), kve_emu_move_body, &a))
        return -1;
    return kve_emu_launch(pool, grid, sizeof(kve_compact_smem), kve_emu_slots_body, &a);
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
    return kve_emu_launch(pool, *grid_used, 0, kve_emu_state_body, &a);
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
    return kve_emu_launch(pool, p->grid, kve_emu_evict_smem(p), kve_emu_state_evict_body, &a);
}

static void kve_emu_cache_write_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_cache_write_grid(tc, (const kve_cache_write_args *)arg);
}

static void kve_emu_cache_move_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    (void)smem;
    kve_cache_move_grid(tc, (const kve_cache_write_args *)arg);
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
    kve_cache_write_plan p = kve_cache_write_plan_make(&lim, d, &a, nt);
    if (p.move_entries &&
        kve_emu_launch(pool, p.move_grid, 0, kve_emu_cache_move_body, &a))
        return KVE_ERR_NOMEM;
    return kve_emu_launch(pool, p.write_grid, 0, kve_emu_cache_write_body, &a) ? KVE_ERR_INTERNAL
                                                                               : KVE_OK;
}

static void kve_emu_score_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    kve_score_grid(tc, smem, (const kve_score_args *)arg);
}

int kve_emu_score(kve_emu_pool *pool, uint32_t max_grid, const kve_score_desc *d,
                  kve_emu_errors *e)
{
    uint32_t nt, ws;
    kve_emu_pool_shape(pool, &nt, &ws);
    kve_launch_limits lim = kve_emu_limits(max_grid);
    for (uint32_t k = 0; k < kve_score_launches(d); k++) {
        static kve_score_args a; /* large: off the stack */
        uint32_t items = kve_score_args_make(d, k, e->rec, &a);
        kve_score_plan p = kve_score_plan_make(&lim, &a, items, nt);
        if (kve_emu_launch(pool, p.grid, p.smem, kve_emu_score_body, &a))
            return -1;
    }
    return 0;
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

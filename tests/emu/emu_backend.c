/* emu_backend.c — a CPU context with the emulator as its device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "kve_backend.h"
#include "kve_error.h" /* KVE_TRY */
#include "kve_launch.h"

#define KVE_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static const kve_backend_ops *kve_emu_cpu; /* what the emulator leaves to the CPU */
static kve_emu_pool *kve_emu_pool_now, *kve_emu_evict_pool;
static kve_launch_limits kve_emu_lim; /* the emulated device's, planned with as on a GPU */
static kve_emu_errors kve_emu_records; /* the "device" error records */
static char kve_emu_message_now[512];
static uint32_t kve_emu_unit;

/* ---- the device's own plan -------------------------------------------------- */

static uint32_t kve_emu_dev_warp;             /* 0: the pools of kve_emu_context_use */
static kve_emu_pool *kve_emu_dev_pools[4];    /* blocks of 64, 128, 256, 512 threads */
static kve_launch_limits kve_emu_lim_saved;   /* kve_emu_context_use's, while planning as a device */

/* An H200: 132 multiprocessors, 227 KiB of shared memory a block (opt-in),
 * of which eviction's fixed state takes its part. */
#define KVE_EMU_DEV_SMS 132u
#define KVE_EMU_DEV_SMEM ((size_t)227 << 10)

/* The limits kve_emu_context_use and _evict_limits set: while planning as
 * a device, the device's stay in force and these wait. */
static kve_launch_limits *kve_emu_lim_of_pools(void)
{
    return kve_emu_dev_warp ? &kve_emu_lim_saved : &kve_emu_lim;
}

static void kve_emu_dev_pools_free(void)
{
    for (int i = 0; i < 4; i++) {
        kve_emu_pool_destroy(kve_emu_dev_pools[i]);
        kve_emu_dev_pools[i] = NULL;
    }
}

void kve_emu_context_device_plan(uint32_t warp)
{
    if (warp && !kve_emu_dev_warp) {
        kve_emu_lim_saved = kve_emu_lim;
        kve_emu_lim = kve_launch_limits_of(KVE_EMU_DEV_SMS,
                                           KVE_EMU_DEV_SMEM - sizeof(kve_evict_smem));
    } else if (!warp && kve_emu_dev_warp) {
        kve_emu_lim = kve_emu_lim_saved;
    }
    if (warp != kve_emu_dev_warp)
        kve_emu_dev_pools_free();
    kve_emu_dev_warp = warp;
}

/* The pool of a kernel launched with blocks of @p threads: the device's
 * when planning as a device, else @p dflt. Aborts when it cannot make one
 * (the test cannot go on). */
static kve_emu_pool *kve_emu_pool_for(uint32_t threads, kve_emu_pool *dflt)
{
    if (!kve_emu_dev_warp)
        return dflt;
    int i = threads <= 64 ? 0 : threads <= 128 ? 1 : threads <= 256 ? 2 : 3;
    if (!kve_emu_dev_pools[i])
        kve_emu_dev_pools[i] = kve_emu_pool_create(64u << i, kve_emu_dev_warp);
    if (!kve_emu_dev_pools[i] || (64u << i) != threads) {
        fprintf(stderr, "emu: no pool of %u threads in warps of %u\n", threads, kve_emu_dev_warp);
        abort();
    }
    return kve_emu_dev_pools[i];
}

void kve_emu_context_use(kve_emu_pool *pool, uint32_t max_grid, kve_emu_pool *evict_pool)
{
    kve_launch_limits *lim = kve_emu_lim_of_pools();
    kve_emu_pool_now = pool;
    lim->max_grid = max_grid ? max_grid : 1;
    lim->max_grid_workspace = lim->max_grid;
    kve_emu_evict_pool = evict_pool;
}

void kve_emu_context_evict_limits(size_t evict_smem_max, uint32_t max_grid_workspace)
{
    kve_launch_limits *lim = kve_emu_lim_of_pools();
    lim->evict_smem_max = evict_smem_max;
    lim->max_grid_workspace = max_grid_workspace ? max_grid_workspace : 1;
}

kve_launch_limits kve_emu_context_limits(void) { return kve_emu_lim; }

const char *kve_emu_context_message(void) { return kve_emu_message_now; }

uint32_t kve_emu_context_last_unit(void) { return kve_emu_unit; }

/* ---- injected faults ------------------------------------------------------ */

static kve_emu_fault kve_emu_pending;       /* one shot, taken by the next op it fits */
static const char *kve_emu_failed_launch;   /* the kernel whose launch failed, until synchronize */

void kve_emu_inject(const kve_emu_fault *fault) { kve_emu_pending = *fault; }

int kve_emu_fault_pending(void) { return kve_emu_pending.kind != KVE_EMU_FAULT_NONE; }

static int kve_emu_take(kve_emu_fault_kind kind, kve_emu_fault *out)
{
    if (kve_emu_pending.kind != kind)
        return 0;
    *out = kve_emu_pending;
    kve_emu_pending.kind = KVE_EMU_FAULT_NONE;
    return 1;
}

/* A launch that fails as a faulting kernel does on a GPU: nothing runs, the
 * call returns, and the next synchronize reports it. */
static int kve_emu_launch_fails(const char *kernel)
{
    kve_emu_fault f;
    if (!kve_emu_take(KVE_EMU_FAULT_LAUNCH, &f))
        return 0;
    kve_emu_failed_launch = kernel;
    return 1;
}

/* A copy of @p n entries of @p table with entry @p f->index set to
 * f->value (NULL when out of memory or the index is outside). */
static int32_t *kve_emu_corrupt(const int32_t *table, size_t n, const kve_emu_fault *f)
{
    int32_t *copy = f->index < n ? (int32_t *)malloc(n * sizeof *copy) : NULL;
    if (copy) {
        memcpy(copy, table, n * sizeof *copy);
        copy[f->index] = f->value;
    }
    return copy;
}

/* ---- the launch log -------------------------------------------------------- */

static kve_emu_launch_rec *kve_emu_log;
static uint32_t kve_emu_log_cap, kve_emu_log_n;

void kve_emu_log_start(kve_emu_launch_rec *buf, uint32_t cap)
{
    kve_emu_log = buf;
    kve_emu_log_cap = cap;
    kve_emu_log_n = 0;
}

uint32_t kve_emu_log_stop(void)
{
    kve_emu_log = NULL;
    return kve_emu_log_n;
}

static void kve_emu_log_add(const char *what, uint64_t grid, uint64_t bytes)
{
    if (!kve_emu_log)
        return;
    if (kve_emu_log_n < kve_emu_log_cap) {
        kve_emu_launch_rec *r = &kve_emu_log[kve_emu_log_n];
        memset(r, 0, sizeof *r);
        snprintf(r->what, sizeof r->what, "%s", what);
        r->grid = grid;
        r->bytes = bytes;
    }
    kve_emu_log_n++; /* counted past cap: the caller sees it overflowed */
}

/* An eviction launch: its grid, shared scratch, block size and workspace. */
static void kve_emu_log_evict(const char *what, const kve_evict_plan *p)
{
    kve_emu_log_add(what, p->grid, p->dyn_smem);
    if (kve_emu_log && kve_emu_log_n <= kve_emu_log_cap) {
        kve_emu_launch_rec *r = &kve_emu_log[kve_emu_log_n - 1];
        r->threads = p->threads;
        r->scratch_stride = p->scratch_stride;
    }
}

/* ---- graph capture ---------------------------------------------------------- */

/* A CUDA graph's semantics on the emulator, as cudaStreamBeginCapture in
 * the global mode: while a stream captures, the work a context queues on
 * that stream (ctx->stream) is recorded (a launch with its arguments
 * copied, as a kernel node keeps its parameters; a backend-to-backend
 * copy as a memcpy node) and does not run. What CUDA refuses is refused
 * and breaks the capture: on the capturing stream a copy to or from
 * (pageable) host memory and a synchronize; on any stream an allocation
 * and a free. Work on another stream runs at once, as CUDA runs it, and is
 * not in the graph: the capture's end reports it. A replay runs the
 * recorded nodes in order. */
typedef enum {
    KVE_NODE_PLAN,
    KVE_NODE_UPDATE,
    KVE_NODE_EVICT,
    KVE_NODE_WRITE,
    KVE_NODE_SCORE,
    KVE_NODE_COPY
} kve_emu_node_kind;

typedef struct kve_emu_copy_node {
    void *dst;
    const void *src;
    size_t bytes;
} kve_emu_copy_node;

typedef struct kve_emu_node {
    kve_emu_node_kind kind;
    union {
        kve_state_plan plan;
        kve_state_update update;
        kve_state_evict evict;
        kve_cache_write_desc write;
        kve_score_call score;
        kve_emu_copy_node copy;
    } a;
} kve_emu_node;

struct kve_emu_graph {
    kve_emu_node *nodes;
    uint32_t n, cap;
    void *stream;       /* the capturing stream */
    const char *broken; /* the first operation the capture refused: it cannot replay */
    char missed[200];   /* the first work queued on another stream (not in the graph) */
};

static kve_emu_graph *kve_emu_capturing;

kve_emu_graph *kve_emu_capture_begin_stream(void *stream)
{
    kve_emu_graph *g = (kve_emu_graph *)calloc(1, sizeof *g);
    if (g)
        g->stream = stream;
    kve_emu_capturing = g;
    return g;
}

kve_emu_graph *kve_emu_capture_begin(void) { return kve_emu_capture_begin_stream(NULL); }

const char *kve_emu_capture_end(kve_emu_graph *g, uint32_t *n_nodes)
{
    kve_emu_capturing = NULL;
    *n_nodes = g->n;
    return g->broken ? g->broken : g->missed[0] ? g->missed : NULL;
}

void kve_emu_graph_destroy(kve_emu_graph *g)
{
    if (g)
        free(g->nodes);
    free(g);
}

/* While capturing: whether @p ctx queues on the capturing stream. Work on
 * another stream runs and is noted as missing from the graph (@p what). */
static int kve_emu_on_capture_stream(const kve_context *ctx, const char *what)
{
    kve_emu_graph *g = kve_emu_capturing;
    if (!g)
        return 0;
    if (ctx->stream == g->stream)
        return 1;
    if (!g->missed[0])
        snprintf(g->missed, sizeof g->missed,
                 "%s on stream %p while stream %p captures: run at once, not in the graph",
                 what, ctx->stream, g->stream);
    return 0;
}

/* While capturing on @p ctx's stream: record @p node (returns 1: do not
 * run it); @p what names it when it goes to another stream. */
static int kve_emu_record(const kve_context *ctx, const kve_emu_node *node, const char *what)
{
    kve_emu_graph *g = kve_emu_capturing;
    if (!kve_emu_on_capture_stream(ctx, what))
        return 0;
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? 2 * g->cap : 64;
        kve_emu_node *more = (kve_emu_node *)realloc(g->nodes, cap * sizeof *more);
        if (!more) {
            g->broken = "out of host memory recording a node";
            return 1;
        }
        g->nodes = more;
        g->cap = cap;
    }
    g->nodes[g->n++] = *node;
    return 1;
}

/* While capturing: @p what breaks the capture (returns 1: refuse it). */
static int kve_emu_refused_in_capture(const char *what)
{
    if (!kve_emu_capturing)
        return 0;
    if (!kve_emu_capturing->broken)
        kve_emu_capturing->broken = what;
    return 1;
}

/* While capturing on @p ctx's stream: @p what breaks the capture. */
static int kve_emu_refused_on_stream(const kve_context *ctx, const char *what)
{
    return kve_emu_on_capture_stream(ctx, what) && kve_emu_refused_in_capture(what);
}

/* ---- operations ------------------------------------------------------------ */

static kve_status emu_copy(kve_context *ctx, void *dst, const void *src, size_t bytes,
                           kve_copy_kind kind)
{
    static const char *const names[] = {
        [KVE_COPY_HOST_TO_BACKEND] = "copy host to backend",
        [KVE_COPY_BACKEND_TO_HOST] = "copy backend to host",
        [KVE_COPY_BACKEND_TO_BACKEND] = "copy backend to backend"};
    const char *name = (unsigned)kind < KVE_COUNT_OF(names) ? names[kind] : "copy";
    kve_emu_log_add(name, 0, bytes);
    if (kind == KVE_COPY_BACKEND_TO_BACKEND) { /* a memcpy node */
        kve_emu_node node = {KVE_NODE_COPY, {.copy = {dst, src, bytes}}};
        if (kve_emu_record(ctx, &node, "a copy backend to backend"))
            return KVE_OK;
    } else if (kve_emu_refused_on_stream(ctx, kind == KVE_COPY_BACKEND_TO_HOST
                                                  ? "a copy to pageable host memory"
                                                  : "a copy from pageable host memory")) {
        return KVE_ERR_DEVICE;
    }
    return kve_emu_cpu->copy(ctx, dst, src, bytes, kind);
}

static kve_status emu_upload(kve_context *ctx, void *dst, const void *src, size_t bytes)
{
    kve_emu_log_add("upload", 0, bytes);
    if (kve_emu_refused_on_stream(ctx, "an upload from pageable host memory"))
        return KVE_ERR_DEVICE;
    return kve_emu_cpu->copy(ctx, dst, src, bytes, KVE_COPY_HOST_TO_BACKEND);
}

static kve_status emu_state_round(kve_context *ctx, const kve_state_update *u);

static kve_status emu_state_update(kve_context *ctx, const kve_state_update *u)
{
    (void)ctx;
    if (!u->n_jobs)
        return KVE_OK;
    if (u->rounds)
        return emu_state_round(ctx, u);
    kve_emu_node node = {KVE_NODE_UPDATE, {.update = *u}};
    if (kve_emu_record(ctx, &node, "a launch of kve_state_kernel"))
        return KVE_OK;
    if (kve_emu_launch_fails("kve_state_kernel"))
        return KVE_OK;
    uint32_t grid;
    int rc = kve_emu_state_update(kve_emu_pool_for(KVE_STATE_THREADS, kve_emu_pool_now),
                                  kve_emu_lim.max_grid, u, &kve_emu_records, &grid);
    kve_emu_log_add("kve_state_kernel", grid, 0);
    return rc ? KVE_ERR_INTERNAL : KVE_OK;
}

/* A pool for a body with barriers (the planner, the round kernel) outside
 * the device plan: threaded, of the current pool's shape (which may be
 * serial). Aborts when it cannot make one. */
static kve_emu_pool *kve_emu_round_pool;
static uint32_t kve_emu_round_nt, kve_emu_round_ws;

static kve_emu_pool *kve_emu_barrier_pool(void)
{
    uint32_t nt = 32, ws = 32;
    if (kve_emu_pool_now)
        kve_emu_pool_shape(kve_emu_pool_now, &nt, &ws);
    if (!kve_emu_round_pool || nt != kve_emu_round_nt || ws != kve_emu_round_ws) {
        kve_emu_pool_destroy(kve_emu_round_pool);
        kve_emu_round_pool = kve_emu_pool_create(nt, ws);
        kve_emu_round_nt = nt;
        kve_emu_round_ws = ws;
    }
    if (!kve_emu_round_pool) {
        fprintf(stderr, "emu: no pool of %u threads in warps of %u\n", nt, ws);
        abort();
    }
    return kve_emu_round_pool;
}

/* The planner synchronizes its block: the device's pool, or a threaded
 * one of the current pool's shape. */
static kve_status emu_state_plan(kve_context *ctx, const kve_state_plan *p)
{
    kve_emu_log_add("kve_state_plan_kernel", 1, 0);
    kve_emu_node node = {KVE_NODE_PLAN, {.plan = *p}};
    if (kve_emu_record(ctx, &node, "a launch of kve_state_plan_kernel"))
        return KVE_OK;
    (void)ctx;
    kve_emu_pool *pool = kve_emu_dev_warp ? kve_emu_pool_for(KVE_STATE_PLAN_THREADS, NULL)
                                          : kve_emu_barrier_pool();
    if (kve_emu_launch_fails("kve_state_plan_kernel"))
        return KVE_OK;
    int rc = kve_emu_state_plan(pool, p, &kve_emu_records);
    return rc ? KVE_ERR_INTERNAL : KVE_OK;
}

/* state_update of a wave's rounds: logged as the GPU driver plans it (the
 * round kernel, a block per table). */
static kve_status emu_state_round(kve_context *ctx, const kve_state_update *u)
{
    kve_emu_log_add("kve_state_round_kernel", kve_state_round_plan_grid(&kve_emu_lim, u), 0);
    kve_emu_node node = {KVE_NODE_UPDATE, {.update = *u}};
    if (kve_emu_record(ctx, &node, "a launch of kve_state_round_kernel"))
        return KVE_OK;
    if (kve_emu_launch_fails("kve_state_round_kernel"))
        return KVE_OK;
    kve_emu_pool *pool =
        kve_emu_dev_warp ? kve_emu_pool_for(KVE_ROUND_THREADS, NULL) : kve_emu_barrier_pool();
    return kve_emu_state_round(pool, &kve_emu_lim, u, &kve_emu_records)
               ? KVE_ERR_INTERNAL
               : KVE_OK;
}

/* The larger of the plan's workspace and the CPU's: kve_evict runs on
 * either (kve_emu_context_use), and a cache state sizes its workspace once. */
static kve_status emu_evict_workspace_size(kve_context *ctx, const kve_batch *b, size_t *out)
{
    size_t cpu = 0, plan = kve_evict_plan_make(&kve_emu_lim, b).workspace_bytes;
    KVE_TRY(kve_emu_cpu->evict_workspace_size(ctx, b, &cpu));
    *out = plan > cpu ? plan : cpu;
    return KVE_OK;
}

/* Evict over rows: on the eviction pool when there is one (the CPU's
 * otherwise), planned as the GPU driver plans it; logged with that plan
 * either way. */
static kve_status emu_state_evict(kve_context *ctx, const kve_state_evict *e)
{
    kve_evict_plan p = kve_evict_plan_make(&kve_emu_lim, &e->b);
    kve_emu_log_evict("kve_state_evict_kernel", &p);
    kve_emu_node node = {KVE_NODE_EVICT, {.evict = *e}};
    if (kve_emu_record(ctx, &node, "a launch of kve_state_evict_kernel"))
        return KVE_OK;
    kve_emu_pool *pool = kve_emu_pool_for(p.threads, kve_emu_evict_pool);
    if (!pool) {
        kve_evict_call cpu = {&e->b, NULL, e->workspace, e->workspace_bytes, e};
        return kve_emu_cpu->evict(ctx, &cpu);
    }
    if (kve_emu_launch_fails("kve_state_evict_kernel"))
        return KVE_OK;
    return kve_emu_state_evict(pool, &p, e, &kve_emu_records) ? KVE_ERR_INTERNAL : KVE_OK;
}

static kve_status emu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    (void)ctx;
    kve_emu_pool *pool = kve_emu_pool_for(KVE_CACHE_WRITE_THREADS, kve_emu_pool_now);
    /* logged as the GPU driver plans it (gpu_cache_write): one launch */
    kve_cache_write_plan p;
    if (kve_emu_cache_write_plan(d, KVE_CACHE_WRITE_THREADS, &kve_emu_lim, &p) == KVE_OK) {
        kve_emu_log_add("kve_cache_write_kernel", p.grid, p.items);
        if (kve_emu_log && kve_emu_log_n <= kve_emu_log_cap)
            kve_emu_log[kve_emu_log_n - 1].threads = KVE_CACHE_WRITE_THREADS;
    }
    kve_emu_node node = {KVE_NODE_WRITE, {.write = *d}};
    if (kve_emu_record(ctx, &node, "a launch of kve_cache_write_kernel"))
        return KVE_OK;
    if (kve_emu_launch_fails("kve_cache_write_kernel"))
        return KVE_OK;
    kve_emu_fault f;
    if (d->pages.kind != KVE_PAGES_NONE && kve_emu_take(KVE_EMU_FAULT_PAGE, &f)) {
        int blocks = d->pages.kind == KVE_PAGES_BLOCK_TABLE;
        const int32_t *table = blocks ? d->pages.block_table : d->pages.indices;
        size_t n = blocks ? (size_t)d->pages.n_rows * d->pages.blocks_per_row : (size_t)d->pages.indptr[d->pages.n_rows];
        int32_t *bad = kve_emu_corrupt(table, n, &f);
        if (!bad)
            return KVE_ERR_INTERNAL;
        kve_cache_write_desc t = *d;
        *(blocks ? &t.pages.block_table : &t.pages.indices) = bad;
        kve_status st = kve_emu_cache_write(pool, kve_emu_lim.max_grid, &t, &kve_emu_records,
                                            &kve_emu_unit);
        free(bad);
        return st;
    }
    return kve_emu_cache_write(pool, kve_emu_lim.max_grid, d, &kve_emu_records, &kve_emu_unit);
}

/* The scorer's device memory (kve_score_plan): the scratch (rows, raw
 * scores) and the counters, grown as calls need, the counters zeroed when
 * new; freed with the context. */
static unsigned char *kve_emu_score_scratch;
static uint32_t *kve_emu_score_arrived;
static size_t kve_emu_score_scratch_bytes, kve_emu_score_arrived_bytes;

static kve_status emu_alloc(kve_context *ctx, size_t bytes, void **out);
static kve_status emu_free(kve_context *ctx, void *ptr);

/* *buf of at least @p need bytes (*have now), zeroed when @p zero. */
static kve_status kve_emu_grow(kve_context *ctx, void **buf, size_t *have, size_t need, int zero)
{
    if (need <= *have && *buf)
        return KVE_OK;
    if (*buf)
        emu_free(ctx, *buf);
    *buf = NULL;
    *have = 0;
    KVE_TRY(emu_alloc(ctx, need, buf));
    *have = need;
    if (zero)
        memset(*buf, 0, need);
    return KVE_OK;
}

static void kve_emu_score_free(kve_context *ctx)
{
    if (kve_emu_score_scratch)
        emu_free(ctx, kve_emu_score_scratch);
    if (kve_emu_score_arrived)
        emu_free(ctx, kve_emu_score_arrived);
    kve_emu_score_scratch = NULL;
    kve_emu_score_arrived = NULL;
    kve_emu_score_scratch_bytes = kve_emu_score_arrived_bytes = 0;
}

/* As gpu_score: one launch whatever n_rows, after one upload of the given
 * rows; the context's scratch (kve_score) grown as calls need, the state's
 * (c->scratch) taken as it is, so a listed call allocates and uploads
 * nothing and a graph records it. */
static kve_status emu_score(kve_context *ctx, const kve_score_call *c)
{
    uint32_t nt, ws;
    kve_emu_pool *pool = kve_emu_pool_for(KVE_SCORE_THREADS, kve_emu_pool_now);
    kve_emu_pool_shape(pool, &nt, &ws);
    kve_score_plan p = kve_score_plan_make(&kve_emu_lim, c, nt);
    unsigned char *scratch = (unsigned char *)c->scratch;
    uint32_t *arrived = c->arrived;
    if (!scratch) {
        if (p.scratch_bytes == SIZE_MAX)
            return KVE_ERR_NOMEM;
        KVE_TRY(kve_emu_grow(ctx, (void **)&kve_emu_score_scratch, &kve_emu_score_scratch_bytes,
                             p.scratch_bytes, 0));
        KVE_TRY(kve_emu_grow(ctx, (void **)&kve_emu_score_arrived, &kve_emu_score_arrived_bytes,
                             p.arrived_bytes, 1));
        scratch = kve_emu_score_scratch;
        arrived = kve_emu_score_arrived;
    }
    if (p.rows_bytes)
        KVE_TRY(emu_upload(ctx, scratch, c->d.rows, p.rows_bytes));
    kve_emu_log_add("kve_score_kernel", p.grid, p.smem);
    if (kve_emu_log && kve_emu_log_n <= kve_emu_log_cap)
        kve_emu_log[kve_emu_log_n - 1].threads = nt;
    /* a given call's rows are host memory: only its upload is refused in a
     * capture (above); a listed call is recorded */
    kve_emu_node node = {KVE_NODE_SCORE, {.score = *c}};
    if (c->list.rows && kve_emu_record(ctx, &node, "a launch of kve_score_kernel"))
        return KVE_OK;
    if (kve_emu_launch_fails("kve_score_kernel"))
        return KVE_OK;
    return kve_emu_score(pool, &p, c, scratch, arrived, &kve_emu_records) ? KVE_ERR_INTERNAL
                                                                           : KVE_OK;
}

static kve_status emu_evict_heads(kve_context *ctx, const kve_batch *b, const kve_evict_out *o,
                                  void *workspace, size_t workspace_bytes)
{
    kve_evict_plan p = kve_evict_plan_make(&kve_emu_lim, b);
    kve_emu_pool *pool = kve_emu_pool_for(p.threads, kve_emu_evict_pool);
    if (!pool) {
        kve_evict_call cpu = {b, o, workspace, workspace_bytes, NULL};
        return kve_emu_cpu->evict(ctx, &cpu);
    }
    kve_emu_log_evict("kve_evict_kernel", &p);
    if (kve_emu_launch_fails("kve_evict_kernel"))
        return KVE_OK;
    kve_emu_fault f;
    kve_batch t = *b;
    int32_t *bad = NULL;
    if (b->n_slots && kve_emu_take(KVE_EMU_FAULT_SLOT, &f)) {
        /* The device sees the bad slot; the host checks were skipped (device
         * memory), and under KVE_TRUSTED_SLOTS the kernel checks range only. */
        uint64_t heads = (uint64_t)b->n_seqs * b->n_layers * b->n_heads;
        bad = kve_emu_corrupt(b->slot_pos, (heads - 1) * b->slot_pos_stride + b->n_slots, &f);
        if (!bad)
            return KVE_ERR_INTERNAL;
        t.slot_pos = bad;
        t.flags |= KVE_TRUSTED_SLOTS;
    }
    int rc = kve_emu_evict_planned(pool, &p, &t, o, workspace, &kve_emu_records);
    free(bad);
    return rc ? KVE_ERR_INTERNAL : KVE_OK;
}

/* The op evict, as gpu_evict: a batch's heads, or over rows a wave's. */
static kve_status emu_evict(kve_context *ctx, const kve_evict_call *c)
{
    return c->rows ? emu_state_evict(ctx, c->rows)
                   : emu_evict_heads(ctx, c->b, c->o, c->workspace, c->workspace_bytes);
}

/* The GPU glue's synchronize: report the records, then clear them. */
static kve_status emu_synchronize(kve_context *ctx)
{
    /* another stream's synchronize is no work of the graph's: not noted */
    if (kve_emu_capturing && ctx->stream == kve_emu_capturing->stream &&
        kve_emu_refused_in_capture("a synchronize"))
        return KVE_ERR_DEVICE;
    kve_status st;
    if (kve_emu_failed_launch) {
        snprintf(kve_emu_message_now, sizeof kve_emu_message_now,
                 "emulated device: %s: launch failed (injected fault); its outputs are untouched",
                 kve_emu_failed_launch);
        kve_emu_failed_launch = NULL;
        st = KVE_ERR_DEVICE;
    } else {
        st = kve_emu_errors_status(&kve_emu_records, kve_emu_message_now,
                                   sizeof kve_emu_message_now);
    }
    kve_emu_errors_reset(&kve_emu_records);
    return st;
}

/* The CPU's operations the emulated device leaves to the CPU. */
static kve_status emu_probe(int *out_available) { return kve_emu_cpu->probe(out_available); }

static kve_status emu_context_init(kve_context *ctx) { return kve_emu_cpu->context_init(ctx); }

static void emu_context_fini(kve_context *ctx)
{
    kve_emu_untrack(&kve_emu_records);
    kve_emu_score_free(ctx);
    kve_emu_context_device_plan(0);
    kve_emu_pool_destroy(kve_emu_round_pool);
    kve_emu_round_pool = NULL;
    kve_emu_cpu->context_fini(ctx);
}

static kve_status emu_set_device(kve_context *ctx, int device)
{
    return kve_emu_cpu->set_device(ctx, device);
}

/* Exactly @p bytes (no rounding into a larger block: ASan sees a read past
 * the end), aligned as cudaMalloc's, garbage as device memory starts. */
static kve_status emu_alloc(kve_context *ctx, size_t bytes, void **out)
{
    (void)ctx;
    void *p = NULL;
    if (kve_emu_refused_in_capture("an allocation"))
        return KVE_ERR_DEVICE;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0)
        return KVE_ERR_NOMEM;
    memset(p, 0x5a, bytes);
    kve_emu_track(p, bytes);
    *out = p;
    return KVE_OK;
}

static kve_status emu_free(kve_context *ctx, void *ptr)
{
    (void)ctx;
    if (kve_emu_refused_in_capture("a free"))
        return KVE_ERR_DEVICE;
    kve_emu_untrack(ptr);
    free(ptr);
    return KVE_OK;
}

static kve_status emu_keys(kve_context *ctx, uint64_t seed, uint32_t flags,
                           const kve_coord *coords, size_t n, uint64_t *keys)
{
    return kve_emu_cpu->keys(ctx, seed, flags, coords, n, keys);
}

static kve_status emu_compact(kve_context *ctx, const kve_compact_desc *d)
{
    return kve_emu_cpu->compact(ctx, d);
}

/* Not host memory: the core skips the content checks it skips for a GPU. */
static const kve_backend_ops kve_emu_ops = {
    .abi_version = KVE_BACKEND_ABI_VERSION,
    .kind = KVE_BACKEND_CPU,
    .name = "emu",
    .host_memory = 0,
    .probe = emu_probe,
    .context_init = emu_context_init,
    .context_fini = emu_context_fini,
    .set_device = emu_set_device,
    .alloc = emu_alloc,
    .free = emu_free,
    .copy = emu_copy,
    .synchronize = emu_synchronize,
    .keys = emu_keys,
    .evict_workspace_size = emu_evict_workspace_size,
    .evict = emu_evict,
    .compact = emu_compact,
    .state_update = emu_state_update,
    .cache_write = emu_cache_write,
    .upload = emu_upload,
    .state_plan = emu_state_plan,
    .score = emu_score,
};

kve_context *kve_emu_context_create(void)
{
    kve_context *ctx = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK ||
        kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_SCALAR) != KVE_OK ||
        kve_context_set_threads(ctx, 1) != KVE_OK) {
        kve_context_destroy(ctx);
        return NULL;
    }
    kve_emu_cpu = ctx->ops;
    kve_emu_lim = kve_emu_limits(1);
    kve_emu_log = NULL;
    kve_emu_errors_reset(&kve_emu_records);
    kve_emu_track(&kve_emu_records, sizeof kve_emu_records);
    kve_emu_message_now[0] = '\0';
    kve_emu_pending.kind = KVE_EMU_FAULT_NONE;
    kve_emu_failed_launch = NULL;
    ctx->ops = &kve_emu_ops;
    /* ctest runs every emulator suite a second time as the device plans
     * it, and under the order check (tests/emu/CMakeLists.txt). */
    const char *dev = getenv("KVE_EMU_DEVICE"), *check = getenv("KVE_EMU_ORDER_CHECK");
    if (dev && *dev)
        kve_emu_context_device_plan((uint32_t)strtoul(dev, NULL, 10));
    if (check && *check)
        kve_emu_order_check(atoi(check));
    return ctx;
}

kve_status kve_emu_graph_replay(kve_context *ctx, const kve_emu_graph *g)
{
    if (kve_emu_capturing || g->broken)
        return KVE_ERR_INVALID;
    for (uint32_t i = 0; i < g->n; i++) {
        const kve_emu_node *n = &g->nodes[i];
        kve_status st = n->kind == KVE_NODE_PLAN     ? emu_state_plan(ctx, &n->a.plan)
                        : n->kind == KVE_NODE_UPDATE ? emu_state_update(ctx, &n->a.update)
                        : n->kind == KVE_NODE_EVICT  ? emu_state_evict(ctx, &n->a.evict)
                        : n->kind == KVE_NODE_SCORE  ? emu_score(ctx, &n->a.score)
                        : n->kind == KVE_NODE_COPY
                            ? kve_emu_cpu->copy(ctx, n->a.copy.dst, n->a.copy.src, n->a.copy.bytes,
                                                KVE_COPY_BACKEND_TO_BACKEND)
                                                     : emu_cache_write(ctx, &n->a.write);
        if (st != KVE_OK)
            return st;
    }
    return KVE_OK;
}

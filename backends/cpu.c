/*
 * cpu.c — the CPU backend's table of operations: threads across heads
 * in contiguous ranges (kve_cpu_parallel), each head evicted on its own
 * (a second kernel call only when the first declined to check it), so
 * results cannot depend on the thread count. Kernels come from the
 * context's ISA table; the other operations hand their plain data to
 * kernels_cpu/'s whole-call kernels with the context's ISA and threads.
 */
#include <stdlib.h>
#include <string.h>

#include "kve_backend.h"
#include "kve_cpu_isa.h"
#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"
#include "kve_error.h"
#include "kve_scores_check.h"
#include "kve_util.h"
#include "state_body.h" /* kve_state_evict_row */

static kve_status cpu_probe(int *out)
{
    *out = 1;
    return KVE_OK;
}

/* A CPU context's own memory (ctx->impl): the scorers' scratch for calls
 * that bring none (kve_score, a state call past its score_group), grown as
 * calls need, so a call of a shape seen before allocates nothing. */
typedef struct {
    void *score;
    size_t score_bytes;
} cpu_impl;

static kve_status cpu_context_init(kve_context *ctx)
{
    ctx->impl = calloc(1, sizeof(cpu_impl));
    KVE_RETURN_ERROR_IF(!ctx->impl, KVE_ERR_NOMEM, "cannot allocate a CPU context");
    return KVE_OK;
}

static void cpu_context_fini(kve_context *ctx)
{
    cpu_impl *g = (cpu_impl *)ctx->impl;
    if (g)
        free(g->score);
    free(g);
    ctx->impl = NULL;
}

static kve_status cpu_set_device(kve_context *ctx, int device)
{
    (void)ctx;
    KVE_RETURN_ERROR_IF(device != 0, KVE_ERR_RANGE, "device = %d: the CPU backend has device 0 only",
                        device);
    return KVE_OK;
}

static kve_status cpu_alloc(kve_context *ctx, size_t bytes, void **out)
{
    (void)ctx;
    size_t rounded = KVE_ALIGN_UP(bytes, 64);
    KVE_RETURN_ERROR_IF(rounded < bytes, KVE_ERR_OVERFLOW, "bytes = %zu: too large", bytes);
    *out = aligned_alloc(256, (rounded + 255) & ~(size_t)255);
    KVE_RETURN_ERROR_IF(!*out, KVE_ERR_NOMEM, "cannot allocate %zu bytes of CPU backend memory",
                        bytes);
    return KVE_OK;
}

static kve_status cpu_free(kve_context *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
    return KVE_OK;
}

static kve_status cpu_copy(kve_context *ctx, void *dst, const void *src, size_t bytes,
                           kve_copy_kind kind)
{
    (void)ctx;
    (void)kind;
    memmove(dst, src, bytes);
    return KVE_OK;
}

static kve_status cpu_upload(kve_context *ctx, void *dst, const void *src, size_t bytes)
{
    return cpu_copy(ctx, dst, src, bytes, KVE_COPY_HOST_TO_BACKEND);
}

static kve_status cpu_synchronize(kve_context *ctx)
{
    (void)ctx;
    return KVE_OK;
}

/* One cpu_keys call. */
typedef struct {
    const kve_cpu_kernels *k;
    uint64_t seed;
    uint32_t flags;
    const kve_coord *coords;
    size_t n;
    uint64_t *keys;
} cpu_keys_call;

/* Chunks big enough to amortize a seq_seed, small enough to spread. */
#define KVE_KEYS_CHUNK 4096u

static int cpu_keys_range(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const cpu_keys_call *c = (const cpu_keys_call *)arg;
    for (size_t ch = lo; ch < hi; ch++) {
        size_t at = ch * KVE_KEYS_CHUNK, len = c->n - at < KVE_KEYS_CHUNK ? c->n - at : KVE_KEYS_CHUNK;
        c->k->keys(c->seed, c->flags, c->coords + at, len, c->keys + at);
    }
    return 0;
}

static kve_status cpu_keys(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                           size_t n, uint64_t *keys)
{
    cpu_keys_call c = {kve_cpu_kernels_get(ctx->isa), seed, flags, coords, n, keys};
    kve_cpu_parallel(ctx->threads, (n + KVE_KEYS_CHUNK - 1) / KVE_KEYS_CHUNK, cpu_keys_range, &c);
    return KVE_OK;
}

static size_t cpu_scratch_per_thread(const kve_context *ctx, uint32_t n_slots)
{
    return KVE_ALIGN_UP(kve_cpu_kernels_get(ctx->isa)->evict_scratch_bytes(n_slots), 64);
}

static kve_status cpu_evict_workspace_size(kve_context *ctx, const kve_batch *b, size_t *out)
{
    *out = (size_t)ctx->threads * cpu_scratch_per_thread(ctx, b->n_slots) + 64;
    return KVE_OK;
}

/* docs/SPEC.md §11: the wrapping sum of the running digest's elements of the
 * head's evicted tokens — the spec's key with the digest seed and the real
 * round — through the ISA's own key kernel, while the head is hot. */
static uint64_t kve_cpu_round_digest(const kve_cpu_kernels *k, const kve_head_job *job)
{
    kve_head_job e = *job;
    e.seed ^= KVE_RUN_DIGEST_TWEAK;
    e.key_flags &= ~(uint32_t)KVE_PERSISTENT;
    int32_t pos[64];
    uint64_t keys[64], sum = 0;
    for (uint32_t i = 0; i < job->n_evicted;) {
        uint32_t n = 0;
        for (; n < 64 && i < job->n_evicted; n++, i++)
            pos[n] = job->slot_pos[job->evicted[i]];
        k->head_keys(&e, pos, n, keys);
        for (uint32_t j = 0; j < n; j++)
            sum += keys[j];
    }
    return sum;
}

/* A head's first problem (kve_check_rows.h's rule for slot_pos, then a NaN
 * score at a candidate); head SIZE_MAX: none. */
typedef struct {
    size_t head;
    kve_slot_problem slot;
    int nan;
} kve_head_problem;

/* Head i's content checks, run just before its eviction, while its tables
 * are in L1 (they replace a separate pass over every table from L3). */
static int cpu_check_head(const kve_cpu_kernels *k, const kve_batch *b, size_t i, void *map,
                          void *scratch, kve_head_problem *q)
{
    const int32_t *row = b->slot_pos + i * b->slot_pos_stride;
    int check_dups = !(b->flags & KVE_TRUSTED_SLOTS);
    if (kve_row_check(k, row, b->n_slots, check_dups, map, (uint64_t *)scratch, &q->slot)) {
        q->head = i;
        q->nan = 0;
        return 1;
    }
    if (!(b->flags & KVE_SCORED))
        return 0;
    uint32_t t = kve_scores_head_nan_slot(b, i, (uint32_t *)scratch);
    if (t == UINT32_MAX)
        return 0;
    q->head = i;
    q->slot.slot = t;
    q->nan = 1;
    return 1;
}

/* The presence map of each thread's fused checks (kve_head_job.check_map),
 * zero between jobs: zeroed at thread start, and every job zeroes what it
 * marked, so no call clears all 64 KiB but one that met a bad value or a
 * window of 2^16 positions or more. */
static _Thread_local unsigned char kve_fused_map[KVE_FUSED_MAP_BYTES + 64];

/* Head i's eviction with its content checks: fused into the kernel's pass
 * when the job asks (job->check) and the kernel can, else first. 1 and *q
 * on a problem (the outputs are then unspecified). */
static int cpu_checked_evict(const kve_cpu_kernels *k, const kve_batch *b, size_t i,
                             kve_head_job *job, void *map, void *scratch, kve_head_problem *q)
{
    int check = b->n_slots != 0;
    if (check && !job->check && cpu_check_head(k, b, i, map, scratch, q))
        return 1;
    k->evict_head(job, scratch);
    if (!job->check || job->check_result == KVE_JOB_CLEAN)
        return 0;
    if (cpu_check_head(k, b, i, map, scratch, q))
        return 1;
    if (job->check_result == KVE_JOB_UNCHECKED) { /* checked now: run it plainly */
        job->check = 0;
        k->evict_head(job, scratch);
    }
    return 0;
}

static kve_status cpu_problem_error(const kve_head_problem *q)
{
    if (q->nan)
        return kve_error_set(KVE_ERR_INVALID,
                             "batch.scores[head %zu][slot %u] is NaN: a candidate's score must be "
                             "a number (+-inf allowed)",
                             q->head, q->slot.slot);
    if (q->slot.duplicate)
        return kve_error_set(KVE_ERR_DUPLICATE,
                             "batch.slot_pos[head %zu][slot %u] = %d: position already held by "
                             "another slot of this head",
                             q->head, q->slot.slot, q->slot.value);
    return kve_error_set(KVE_ERR_RANGE,
                         "batch.slot_pos[head %zu][slot %u] = %d: positions must be >= 0, or -1 "
                         "for an empty slot",
                         q->head, q->slot.slot, q->slot.value);
}

/* Head i's job. Rows of length 0 have no memory behind them: the validation
 * lets their pointers be NULL and their strides anything, so no offset is
 * formed. */
static void cpu_head_job(const kve_batch *b, const kve_evict_out *o, size_t i, kve_head_hint *hint,
                         kve_head_job *job)
{
    size_t per_seq = (size_t)b->n_layers * b->n_heads;
    int has_slots = b->n_slots != 0, has_evicted = b->n_slots > b->budget;
    const kve_seq *seq = &b->seqs[i / per_seq];
    job->slot_pos = has_slots ? b->slot_pos + i * b->slot_pos_stride : b->slot_pos;
    job->n_slots = b->n_slots;
    job->prompt = seq->prompt_len;
    job->window = b->window;
    job->budget = b->budget;
    job->seed = b->seed;
    job->seq_id = seq->seq_id;
    job->key_flags = b->flags & KVE_KEY_FLAGS;
    job->layer = b->layer_offset + (uint32_t)((i / b->n_heads) % b->n_layers);
    job->head = b->head_offset + (uint32_t)(i % b->n_heads);
    job->round = seq->round;
    job->hint = hint;
    job->scores = has_slots && (b->flags & KVE_SCORED) ? b->scores + i * b->scores_stride : NULL;
    job->evicted = has_evicted ? o->evicted + i * o->evicted_stride : o->evicted;
    job->kept = o->kept && has_slots ? o->kept + i * o->kept_stride : o->kept;
}

/* Head i's outputs from its finished job. */
static void cpu_head_outputs(const kve_cpu_kernels *k, const kve_batch *b, const kve_evict_out *o,
                             size_t i, const kve_head_job *job)
{
    o->n_evicted[i] = job->n_evicted;
    o->n_kept[i] = job->n_kept;
    if (o->round_digest || o->run_digest) {
        uint64_t d = kve_cpu_round_digest(k, job);
        if (o->round_digest)
            o->round_digest[i] = d;
        if (o->run_digest) /* wrapping sums: any thread order gives one value */
            __atomic_fetch_add(&o->run_digest[i / ((size_t)b->n_layers * b->n_heads)],
                               (o->run_digest_weight ? o->run_digest_weight : 1) * d,
                               __ATOMIC_RELAXED);
    }
    if (o->head_flags)
        o->head_flags[i] = job->over_budget ? KVE_HEAD_OVER_BUDGET : 0;
}

/* Slots a thread's share of one kve_evict has at least: about 10 us of
 * checked eviction (G1 spreads over 18 threads; one layer of 8 heads of
 * 2112 slots stays on one). */
#define KVE_EVICT_THREAD_SLOTS 32768u

/* One cpu_evict call, shared by its threads. */
typedef struct {
    const kve_cpu_kernels *k;
    const kve_batch *b;
    const kve_evict_out *o;
    char *ws;
    size_t per; /* scratch bytes a thread */
    uint32_t check;
    size_t stop;            /* the lowest problem head found so far */
    kve_head_problem first; /* that head's problem, under kve_cpu_evict_problem */
} cpu_evict_call;

/* One thread's heads, ascending (so the hint carries from one head to the
 * next of the same sequence). */
static int cpu_evict_range(void *arg, size_t lo, size_t hi, int thread)
{
    cpu_evict_call *c = (cpu_evict_call *)arg;
    kve_head_hint hint;
    memset(&hint, 0, sizeof hint);
    uint64_t map[KVE_CHECK_MAP_BYTES / 8 + 2];
    kve_head_problem mine = {SIZE_MAX, {0, 0, 0}, 0};
    char *scratch = c->ws + (size_t)thread * c->per;
    for (size_t i = lo; i < hi && i <= __atomic_load_n(&c->stop, __ATOMIC_RELAXED); i++) {
        kve_head_job job;
        cpu_head_job(c->b, c->o, i, &hint, &job);
        job.check = c->check;
        job.check_map = kve_fused_map;
        if (cpu_checked_evict(c->k, c->b, i, &job, map, scratch, &mine)) {
            for (size_t s = __atomic_load_n(&c->stop, __ATOMIC_RELAXED);
                 i < s && !__atomic_compare_exchange_n(&c->stop, &s, i, 0, __ATOMIC_RELAXED,
                                                       __ATOMIC_RELAXED);)
                ;
            break;
        }
        cpu_head_outputs(c->k, c->b, c->o, i, &job);
    }
    if (mine.head == SIZE_MAX)
        return 0;
#pragma omp critical(kve_cpu_evict_problem)
    if (mine.head < c->first.head)
        c->first = mine;
    return 1;
}

/* Checks and evicts every head in one pass: each thread's heads ascend, so
 * its first problem is its lowest, and the lowest over all threads is the
 * batch's, whatever the thread count. A thread stops at its own problem,
 * and skips heads above one already found. */
static kve_status cpu_evict_heads(kve_context *ctx, const kve_batch *b, const kve_evict_out *o,
                                  void *workspace)
{
    cpu_evict_call c = {kve_cpu_kernels_get(ctx->isa), b, o,
                        (char *)KVE_ALIGN_UP((uintptr_t)workspace, 64),
                        cpu_scratch_per_thread(ctx, b->n_slots), 0, SIZE_MAX,
                        {SIZE_MAX, {0, 0, 0}, 0}};
    if (b->n_slots != 0 && c.k->fused_checks)
        c.check = KVE_JOB_CHECK_RANGE | (b->flags & KVE_TRUSTED_SLOTS ? 0 : KVE_JOB_CHECK_DUPS);
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    /* A thread pays off past a few microseconds of work (waking it costs
     * about that): at most a thread per KVE_EVICT_THREAD_SLOTS slots. */
    size_t per = b->n_slots ? (KVE_EVICT_THREAD_SLOTS + b->n_slots - 1) / b->n_slots : SIZE_MAX;
    size_t most = heads / per; /* heads * n_slots would overflow for the largest batches */
    int threads = most < (size_t)ctx->threads ? (most ? (int)most : 1) : ctx->threads;
    kve_cpu_parallel(threads, heads, cpu_evict_range, &c);
    return c.first.head == SIZE_MAX ? KVE_OK : cpu_problem_error(&c.first);
}

/* A batch's heads; over rows, the rows that are due, one after another,
 * each the heads of its tables (threads across them inside); the row list
 * is host memory here. */
static kve_status cpu_evict(kve_context *ctx, const kve_evict_call *call)
{
    const kve_state_evict *e = call->rows;
    if (!e)
        return cpu_evict_heads(ctx, call->b, call->o, call->workspace);
    for (uint32_t i = 0; i < e->b.n_seqs; i++) {
        if (!e->rows[i].count)
            continue;
        kve_batch b;
        kve_evict_out o;
        kve_state_evict_row(e, i, &e->rows[i], &b, &o);
        KVE_TRY(cpu_evict_heads(ctx, &b, &o, e->workspace));
    }
    return KVE_OK;
}

static kve_status cpu_compact(kve_context *ctx, const kve_compact_desc *d)
{
    kve_cpu_compact_run(d, ctx->isa, ctx->threads, kve_cpu_near_moves_plain());
    return KVE_OK;
}

static kve_status cpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    return kve_cpu_state_jobs(u, ctx->threads);
}

static kve_status cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    kve_cpu_cache_write_run(d, ctx->isa, ctx->threads);
    return KVE_OK;
}

/* The scorers in the state's scratch when one thread's buffers fit there,
 * else in the context's own, grown to a thread each. */
static kve_status cpu_score(kve_context *ctx, const kve_score_call *call)
{
    size_t per = kve_cpu_score_call_bytes(call) + 64, all;
    KVE_RETURN_ERROR_IF(per < 64 || __builtin_mul_overflow(per, (size_t)ctx->threads, &all),
                        KVE_ERR_OVERFLOW,
                        "kve_score: the CPU scratch of %d threads overflows size_t", ctx->threads);
    if (call->scratch && call->scratch_bytes >= per)
        return kve_cpu_score_run(call, ctx->isa, ctx->threads, call->scratch, call->scratch_bytes);
    cpu_impl *g = (cpu_impl *)ctx->impl;
    if (g->score_bytes < all) {
        free(g->score);
        g->score_bytes = 0;
        g->score = malloc(all);
        KVE_RETURN_ERROR_IF(!g->score, KVE_ERR_NOMEM,
                            "kve_score: cannot allocate %zu bytes of CPU scratch (%d threads)", all,
                            ctx->threads);
        g->score_bytes = all;
    }
    return kve_cpu_score_run(call, ctx->isa, ctx->threads, g->score, g->score_bytes);
}

size_t kve_cpu_score_scratch_size(int threads, uint32_t nq, uint32_t max_slots)
{
    size_t per = kve_cpu_score_thread_bytes(nq, KVE_SCORE_MAX_FREQS, max_slots), all;
    if (per == SIZE_MAX || __builtin_mul_overflow(per, (size_t)threads, &all) || all > SIZE_MAX - 64)
        return SIZE_MAX;
    return all + 64;
}

static const kve_backend_ops kve_cpu_ops = {
    .abi_version = KVE_BACKEND_ABI_VERSION,
    .kind = KVE_BACKEND_CPU,
    .name = "cpu",
    .host_memory = 1,
    .probe = cpu_probe,
    .context_init = cpu_context_init,
    .context_fini = cpu_context_fini,
    .set_device = cpu_set_device,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .keys = cpu_keys,
    .evict_workspace_size = cpu_evict_workspace_size,
    .evict = cpu_evict, /* checks each head's tables in its pass */
    .compact = cpu_compact,
    .state_update = cpu_state_update,
    .cache_write = cpu_cache_write,
    .upload = cpu_upload,
    .state_plan = kve_cpu_state_plan,
    .score = cpu_score,
};

const kve_backend_ops *kve_cpu_backend_ops(void) { return &kve_cpu_ops; }

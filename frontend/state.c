/*
 * state.c — the cache state: docs/SPEC.md "Schedule" for a batch of
 * sequences. Its plan, creation and memory, the job upload and launch
 * every other part uses, admit and retire, and the read-back calls. Slot
 * tables and freed-slot lists live in backend memory and change only
 * through the backend's state_update jobs and evict over rows; the rows'
 * counts and rounds live there too (advanced by the planner), mirrored on
 * the host (kve_state_mirror, kve_state_push_rows). The rest of the state is in
 * state_pool.c (slot capacity), state_append.c (the waves of an append),
 * state_scored.c (KVE_SCORED checks) and state_rebuild.c (rebuild).
 */
#include <stdlib.h>
#include <string.h>

#include "kve_check.h"
#include "kve_cpu_isa.h" /* kve_cpu_score_scratch_size */
#include "kve_error.h"
#include "kve_state_impl.h"
#include "kve_util.h"
#include "score_body.h"
#include "state_body.h"

kve_status kve_schedule_capacity(const kve_schedule *s, uint32_t prompt_len, uint32_t *out_slots)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "schedule is NULL");
    KVE_RETURN_ERROR_IF(!out_slots, KVE_ERR_NULL, "out_slots is NULL");
    KVE_RETURN_ERROR_IF(s->flags & ~(uint32_t)(KVE_KEY_FLAGS | KVE_SCORED), KVE_ERR_INVALID,
                        "schedule.flags = 0x%x: only KVE_PERSISTENT, KVE_SHARED_HEADS, "
                        "KVE_SHARED_LAYERS, KVE_SCORED",
                        s->flags);
    KVE_RETURN_ERROR_IF((s->flags & KVE_SCORED) && (s->flags & KVE_PERSISTENT), KVE_ERR_INVALID,
                        "schedule.flags = 0x%x: KVE_SCORED and KVE_PERSISTENT exclude each other",
                        s->flags);
    KVE_TRY(kve_check_i32("schedule.budget", s->budget));
    KVE_TRY(kve_check_i32("schedule.window", s->window));
    KVE_RETURN_ERROR_IF(s->interval == 0 || s->interval > KVE_I32_MAX, KVE_ERR_RANGE,
                        "schedule.interval = %u: must be 1..2^31-1 (each round frees r slots)",
                        s->interval);
    uint64_t protect = (uint64_t)prompt_len + s->window;
    uint64_t c = (protect > s->budget ? protect : s->budget) + s->interval;
    KVE_RETURN_ERROR_IF(c > KVE_I32_MAX, KVE_ERR_OVERFLOW,
                        "prompt_len = %u: capacity max(B, P + W) + r = %llu exceeds 2^31-1",
                        prompt_len, (unsigned long long)c);
    *out_slots = (uint32_t)c;
    return KVE_OK;
}

/* The scorer's scratch for desc.score_group (0: 1 for a KVE_SCORED state,
 * else none; kve_score_call): for max_seqs rows x table_heads x query heads
 * a table x max_slots, the given rows' copy and the raw scores
 * (kve_score_scratch_bytes), then a counter per (row, table of a layer);
 * on the CPU (host memory), the scorers' buffers of the context's threads
 * (kve_cpu_score_scratch_size) in place of rows and raw scores. */
static kve_status kve_state_score_part(kve_context *ctx, const kve_state_desc *d, kve_state *s,
                                       size_t *bytes)
{
    s->score_group = d->score_group ? d->score_group : (d->schedule.flags & KVE_SCORED) != 0;
    *bytes = 0;
    uint64_t hpt = s->table_heads == 1 ? d->n_heads : 1, nq;
    /* a scoring call takes at most KVE_SCORE_MAX_QHEADS query heads a table */
    KVE_RETURN_ERROR_IF(hpt * s->score_group > KVE_SCORE_MAX_QHEADS, KVE_ERR_RANGE,
                        "desc.score_group = %u: a table's query heads (%u x %llu KV heads) exceed "
                        "%u, the most a scoring call takes",
                        d->score_group, d->score_group, (unsigned long long)hpt,
                        KVE_SCORE_MAX_QHEADS);
    if (!s->score_group)
        return KVE_OK;
    size_t raw_at, n = SIZE_MAX;
    if (!__builtin_mul_overflow(hpt, (uint64_t)s->score_group, &nq))
        n = ctx->ops->host_memory
                ? kve_cpu_score_scratch_size(ctx->threads,
                                             nq > KVE_SCORE_MAX_QHEADS ? KVE_SCORE_MAX_QHEADS
                                                                       : (uint32_t)nq,
                                             d->max_slots)
                : kve_score_scratch_bytes(d->max_seqs, s->table_heads, nq, d->max_slots, &raw_at);
    KVE_RETURN_ERROR_IF(n > SIZE_MAX / 2, KVE_ERR_OVERFLOW,
                        "desc.score_group = %u: the scorer's scratch (%u rows x %zu tables x "
                        "%llu query heads x %u slots of floats) overflows",
                        d->score_group, d->max_seqs, (size_t)s->table_heads,
                        (unsigned long long)hpt * s->score_group, d->max_slots);
    s->score_raw_bytes = KVE_ALIGN_UP(n, 256);
    *bytes = s->score_raw_bytes + (size_t)d->max_seqs * s->table_heads * 4;
    return KVE_OK;
}

/* Checks @p d and lays out the state's backend memory. */
static kve_status kve_state_layout_plan(kve_context *ctx, const kve_state_desc *d, kve_state *s)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(!d, KVE_ERR_NULL, "desc is NULL");
    uint32_t min_slots;
    KVE_TRY(kve_schedule_capacity(&d->schedule, 0, &min_slots));
    KVE_RETURN_ERROR_IF(d->max_seqs == 0, KVE_ERR_RANGE, "desc.max_seqs = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->n_layers == 0, KVE_ERR_RANGE, "desc.n_layers = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->n_heads == 0, KVE_ERR_RANGE, "desc.n_heads = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(d->layer_offset > UINT32_MAX - (d->n_layers - 1), KVE_ERR_OVERFLOW,
                        "desc.layer_offset = %u: layer_offset + n_layers - 1 exceeds 2^32-1",
                        d->layer_offset);
    KVE_RETURN_ERROR_IF(d->head_offset > UINT32_MAX - (d->n_heads - 1), KVE_ERR_OVERFLOW,
                        "desc.head_offset = %u: head_offset + n_heads - 1 exceeds 2^32-1",
                        d->head_offset);
    KVE_RETURN_ERROR_IF(d->max_slots > KVE_I32_MAX, KVE_ERR_RANGE,
                        "desc.max_slots = %u: must be <= 2^31-1", d->max_slots);
    KVE_RETURN_ERROR_IF(d->max_slots < min_slots, KVE_ERR_RANGE,
                        "desc.max_slots = %u: below max(B, W) + r = %u, the capacity of an "
                        "empty prompt",
                        d->max_slots, min_slots);
    KVE_RETURN_ERROR_IF(d->max_draft > KVE_I32_MAX - d->max_slots, KVE_ERR_RANGE,
                        "desc.max_draft = %u: max_slots + max_draft (%u + %u) must be <= 2^31-1, "
                        "a row's slots with its draft slots",
                        d->max_draft, d->max_slots, d->max_draft);
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->d = *d;
    s->table_layers = (d->schedule.flags & KVE_SHARED_LAYERS) ? 1 : d->n_layers;
    s->table_heads = (d->schedule.flags & KVE_SHARED_HEADS) ? 1 : d->n_heads;
    s->tables = (size_t)s->table_layers * s->table_heads;
    s->row_elems = s->tables * d->max_slots;
    KVE_RETURN_ERROR_IF(d->pool_slots && d->pool_slots < d->max_slots, KVE_ERR_RANGE,
                        "desc.pool_slots = %llu: below max_slots = %u (0: max_seqs x max_slots)",
                        (unsigned long long)d->pool_slots, d->max_slots);
    s->pool = d->pool_slots ? d->pool_slots : (uint64_t)d->max_seqs * d->max_slots;
    size_t sizes[KVE_STATE_PARTS];
    /* Tables and freed lists (kve_evict wants capacity - B entries a head,
     * so a row's freed lists take its capacity too) share the pool's layout. */
    KVE_RETURN_ERROR_IF(s->pool > SIZE_MAX / 4 ||
                            __builtin_mul_overflow(s->tables, (size_t)s->pool * 4,
                                                   &sizes[KVE_PART_SLOT_POS]),
                        KVE_ERR_OVERFLOW, "desc: %zu tables x %llu pool slots overflows",
                        s->tables, (unsigned long long)s->pool);
    sizes[KVE_PART_FREED] = sizes[KVE_PART_SLOT_POS];
    sizes[KVE_PART_JOBS] = (size_t)d->max_seqs * KVE_STATE_JOB_SETS * sizeof(kve_state_job);
    KVE_RETURN_ERROR_IF(__builtin_mul_overflow(s->tables, (size_t)d->max_seqs * 4 * 2,
                                               &sizes[KVE_PART_COUNTS]), /* n_evicted, n_kept */
                        KVE_ERR_OVERFLOW, "desc: %u rows x %zu tables of counts overflows",
                        d->max_seqs, s->tables);
    kve_batch b = kve_state_batch(s, d->max_seqs); /* the largest eviction of a wave */
    KVE_TRY(ctx->ops->evict_workspace_size(ctx, &b, &sizes[KVE_PART_WORKSPACE]));
    sizes[KVE_PART_DIGESTS] = (size_t)d->max_seqs * 8; /* running digests */
    sizes[KVE_PART_ROWS] = (size_t)d->max_seqs * (sizeof(kve_state_row) + sizeof(kve_state_work) +
                                                  4 * sizeof(uint32_t)) +
                           16; /* the call's tokens, the refusal; 16 keeps the sizes even */
    KVE_TRY(kve_state_score_part(ctx, d, s, &sizes[KVE_PART_SCORE]));
    s->digest_weight = ((d->schedule.flags & KVE_SHARED_HEADS) ? (uint64_t)d->n_heads : 1) *
                       ((d->schedule.flags & KVE_SHARED_LAYERS) ? (uint64_t)d->n_layers : 1);
    size_t off = 0;
    for (int i = 0; i < KVE_STATE_PARTS; i++) {
        s->offsets[i] = off;
        KVE_RETURN_ERROR_IF(off + KVE_ALIGN_UP(sizes[i], KVE_ALLOC_ALIGN) < off, KVE_ERR_OVERFLOW,
                            "desc: state memory overflows");
        off += KVE_ALIGN_UP(sizes[i], KVE_ALLOC_ALIGN);
    }
    s->workspace_bytes = sizes[KVE_PART_WORKSPACE];
    s->memory_bytes = off;
    return KVE_OK;
}

kve_batch kve_state_batch(const kve_state *s, uint32_t n_rows)
{
    const kve_schedule *sc = &s->d.schedule;
    kve_batch b = {sc->seed,
                   sc->flags | KVE_TRUSTED_SLOTS, /* the state's own tables: unique by design */
                   n_rows,
                   NULL, /* each row's coordinates travel in its row list entry */
                   s->table_layers,
                   s->table_heads,
                   s->d.layer_offset,
                   s->d.head_offset,
                   s->d.max_slots,
                   sc->budget,
                   sc->window,
                   s->slot_pos,
                   s->d.max_slots,
                   NULL, /* scores: per row, from the step's buffers (kve_state_wave) */
                   0};
    return b;
}

kve_status kve_state_memory_size(kve_context *ctx, const kve_state_desc *desc, size_t *out_bytes)
{
    KVE_RETURN_ERROR_IF(!out_bytes, KVE_ERR_NULL, "out_bytes is NULL");
    kve_state s;
    KVE_TRY(kve_state_layout_plan(ctx, desc, &s));
    *out_bytes = s.memory_bytes;
    return KVE_OK;
}

/* One host allocation holds rows, jobs and work, in that order. */
_Static_assert(sizeof(kve_state_row) % 8 == 0 && sizeof(kve_state_job) % 8 == 0,
               "rows and jobs keep the next array 8-byte aligned");

kve_status kve_state_create(kve_context *ctx, const kve_state_desc *desc, void *memory,
                            size_t memory_bytes, kve_state **out)
{
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    *out = NULL;
    kve_state plan;
    KVE_TRY(kve_state_layout_plan(ctx, desc, &plan));
    KVE_RETURN_ERROR_IF(!ctx->ops->state_update || !ctx->ops->upload,
                        KVE_ERR_UNAVAILABLE,
                        "kve_state_create: the %s backend does not implement cache states yet",
                        ctx->ops->name);
    KVE_RETURN_ERROR_IF(!memory && memory_bytes, KVE_ERR_NULL,
                        "memory is NULL but memory_bytes = %zu", memory_bytes);
    KVE_RETURN_ERROR_IF(memory && memory_bytes < plan.memory_bytes, KVE_ERR_WORKSPACE,
                        "memory_bytes = %zu: kve_state_memory_size says %zu", memory_bytes,
                        plan.memory_bytes);
    KVE_RETURN_ERROR_IF((uintptr_t)memory % KVE_ALLOC_ALIGN, KVE_ERR_INVALID,
                        "memory (%p): must be %d-byte aligned, as kve_alloc returns (the state's "
                        "tables, jobs and digests are laid out from it)",
                        memory, KVE_ALLOC_ALIGN);
    if (plan.score_group) /* a scoring call checks at most max_seqs rows of table_heads */
        KVE_TRY(kve_score_spans_reserve(ctx, (size_t)desc->max_seqs * plan.table_heads));
    kve_state *s = (kve_state *)malloc(sizeof *s);
    size_t n = desc->max_seqs;
    void *host = calloc(n + 1, sizeof(kve_state_row) + sizeof(kve_score_row) +
                                   KVE_STATE_JOB_SETS * sizeof(kve_state_job) +
                                   sizeof(kve_state_work) + 3 * sizeof(uint32_t) + 1);
    if (!s || !host) {
        free(s);
        free(host);
        return kve_error_set(KVE_ERR_NOMEM,
                             "cannot allocate a state for %u rows (%zu + %zu bytes)",
                             desc->max_seqs, sizeof *s,
                             n * (sizeof(kve_state_row) + sizeof(kve_state_work) +
                                  KVE_STATE_JOB_SETS * sizeof(kve_state_job)));
    }
    *s = plan;
    s->host = host;
    s->rows = (kve_state_row *)host; /* 8-byte aligned sizes first */
    s->score_rows = (kve_score_row *)(s->rows + n);
    s->jobs = (kve_state_job *)(s->score_rows + n);
    s->work = (kve_state_work *)(s->jobs + KVE_STATE_JOB_SETS * n);
    s->host_call = (uint32_t *)(s->work + n);
    s->score_seen = (uint8_t *)(s->host_call + 3 * n);
    s->free_runs = (kve_pool_run *)malloc((n + 1) * sizeof(kve_pool_run));
    if (!s->free_runs) {
        free(host);
        free(s);
        return kve_error_set(KVE_ERR_NOMEM, "cannot allocate a state for %u rows", desc->max_seqs);
    }
    s->free_runs[0] = (kve_pool_run){0, s->pool};
    s->n_runs = 1;
    if (!memory) {
        kve_status st = kve_alloc(ctx, plan.memory_bytes, &memory);
        if (st != KVE_OK) {
            free(host);
            free(s->free_runs);
            free(s);
            return st;
        }
        s->owned = 1;
    }
    kve_status reg = kve_handle_open(&s->handle, KVE_HANDLE_STATE, s); /* live from here */
    if (reg != KVE_OK) {
        if (s->owned)
            kve_free(ctx, memory);
        free(host);
        free(s->free_runs);
        free(s);
        return reg;
    }
    kve_handle_attach(&ctx->handle, &s->handle); /* destroyed on a later failure */
    char *base = (char *)memory;
    s->memory = memory;
    s->slot_pos = (int32_t *)(base + s->offsets[KVE_PART_SLOT_POS]);
    s->freed = (int32_t *)(base + s->offsets[KVE_PART_FREED]);
    s->dev_jobs = (kve_state_job *)(base + s->offsets[KVE_PART_JOBS]);
    s->n_evicted = (uint32_t *)(base + s->offsets[KVE_PART_COUNTS]);
    s->n_kept = s->n_evicted + (size_t)desc->max_seqs * s->tables;
    s->workspace = s->workspace_bytes ? base + s->offsets[KVE_PART_WORKSPACE] : NULL;
    s->run_digest = (uint64_t *)(base + s->offsets[KVE_PART_DIGESTS]);
    s->dev_rows = (kve_state_row *)(base + s->offsets[KVE_PART_ROWS]);
    s->dev_work = (kve_state_work *)(s->dev_rows + n);
    s->call_rows = (uint32_t *)(s->dev_work + n);
    s->call_new = s->call_rows + n;
    s->call_base = s->call_new + n; /* n + 1 entries */
    s->marks = s->call_base + n + 1;
    s->refused = s->marks + n;
    /* The planner's rows start free, its marks zero: backend memory holds
     * garbage until written. The host rows are zero still (calloc), and
     * at least 4 bytes a row. */
    kve_status st = kve_copy(ctx, s->dev_rows, s->rows, n * sizeof(kve_state_row),
                             KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_copy(ctx, s->marks, s->rows, n * 4, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK && s->score_raw_bytes) { /* the scorer's counters start at zero */
        s->score_scratch = base + s->offsets[KVE_PART_SCORE];
        size_t counters = n * s->table_heads * 4;
        void *zeros = calloc(counters, 1);
        st = zeros ? kve_copy(ctx, base + s->offsets[KVE_PART_SCORE] + s->score_raw_bytes, zeros,
                              counters, KVE_COPY_HOST_TO_BACKEND)
                   : kve_error_set(KVE_ERR_NOMEM, "cannot allocate %zu bytes", counters);
        free(zeros);
    }
    if (st != KVE_OK) {
        kve_state_destroy(s); /* frees what was taken */
        return st;
    }
    if (ctx->ops->host_memory) /* the backend's rows are the host's: no mirror to keep */
        s->rows = s->dev_rows;
    kve_error_clear();
    *out = s;
    return KVE_OK;
}

kve_status kve_state_destroy(kve_state *s)
{
    if (s) {
        KVE_CHECK_STATE(s);
        if (s->owned) {
            kve_context_synchronize(s->ctx);
            kve_free(s->ctx, s->memory);
        }
        free(s->host);
        free(s->free_runs);
        kve_handle_retire(&s->handle, s); /* its struct quarantined, not freed */
    }
    return KVE_OK;
}

kve_status kve_state_mirror(const kve_state *cs)
{
    kve_state *s = (kve_state *)cs; /* the mirror is a cache of backend memory */
    if (!s->device_planned || s->rows == s->dev_rows)
        return KVE_OK;
    return kve_copy(s->ctx, s->rows, s->dev_rows, (size_t)s->d.max_seqs * sizeof(kve_state_row),
                    KVE_COPY_BACKEND_TO_HOST);
}

kve_status kve_state_push_rows(kve_state *s)
{
    if (s->rows == s->dev_rows)
        return KVE_OK;
    return s->ctx->ops->upload(s->ctx, s->dev_rows, s->rows,
                               (size_t)s->d.max_seqs * sizeof(kve_state_row));
}

kve_status kve_state_upload(kve_state *s, uint32_t n_jobs)
{
    return n_jobs ? s->ctx->ops->upload(s->ctx, s->dev_jobs, s->jobs,
                                        (size_t)n_jobs * sizeof(kve_state_job))
                  : KVE_OK;
}

/* Uploaded jobs [first, first + n_jobs) through state_update (@p rounds:
 * all of them ROUND jobs). */
static kve_status kve_state_launch_op(kve_state *s, uint32_t first, uint32_t n_jobs,
                                      uint64_t work, const kve_step_buffers *out, uint32_t rounds)
{
    if (n_jobs == 0)
        return KVE_OK;
    kve_state_update u = {.table_layers = s->table_layers,
                          .table_heads = s->table_heads,
                          .slot_pos = s->slot_pos,
                          .freed = s->freed,
                          .run_digest = s->run_digest,
                          .n_jobs = n_jobs,
                          .jobs = s->dev_jobs + first,
                          .work = work,
                          .rounds = rounds};
    if (out) {
        u.mapping = out->slot_mapping;
        u.map_layer_stride = (size_t)out->max_tokens * s->table_heads;
        u.moves = out->moves;
        u.n_moves = out->n_moves;
        u.move_rows = out->max_rows;
        u.max_moves = out->max_moves;
    }
    return s->ctx->ops->state_update(s->ctx, &u);
}

kve_status kve_state_launch(kve_state *s, uint32_t first, uint32_t n_jobs, uint64_t work,
                            const kve_step_buffers *out)
{
    return kve_state_launch_op(s, first, n_jobs, work, out, 0);
}

kve_status kve_state_launch_round(kve_state *s, uint32_t first, uint32_t n_jobs, uint64_t work,
                                  const kve_step_buffers *out)
{
    return kve_state_launch_op(s, first, n_jobs, work, out, 1);
}

kve_status kve_state_run(kve_state *s, uint32_t n_jobs, uint64_t work, const kve_step_buffers *out)
{
    KVE_TRY(kve_state_upload(s, n_jobs));
    return kve_state_launch(s, 0, n_jobs, work, out);
}

static kve_status kve_check_row(const kve_state *s, uint32_t row, int want_active)
{
    KVE_CHECK_STATE(s);
    KVE_TRY(kve_state_mirror(s));
    KVE_RETURN_ERROR_IF(row >= s->d.max_seqs, KVE_ERR_RANGE, "row = %u: must be 0..%u", row,
                        s->d.max_seqs - 1);
    const kve_state_row *r = &s->rows[row];
    KVE_RETURN_ERROR_IF(want_active == 1 && !r->active, KVE_ERR_INVALID,
                        "row = %u: holds no sequence (admit one first)", row);
    KVE_RETURN_ERROR_IF(want_active == 0 && r->active, KVE_ERR_INVALID,
                        "row = %u: already holds seq_id %llu (retire it first)", row,
                        (unsigned long long)r->seq_id);
    return KVE_OK;
}

kve_status kve_state_check_prompt(const kve_state *s, uint32_t prompt_len, uint32_t *capacity)
{
    KVE_TRY(kve_schedule_capacity(&s->d.schedule, prompt_len, capacity));
    KVE_RETURN_ERROR_IF(*capacity > s->d.max_slots, KVE_ERR_RANGE,
                        "prompt_len = %u: needs max(B, P + W) + r = %u slots per head, but the "
                        "state has max_slots = %u",
                        prompt_len, *capacity, s->d.max_slots);
    return KVE_OK;
}

kve_state_job kve_state_job_make(const kve_state *s, uint32_t kind, uint32_t row, uint32_t first,
                                 uint32_t count, uint32_t pos, uint32_t token)
{
    return kve_job_of(&s->rows[row], s->tables, kind, row, first, count, pos, token);
}

uint32_t kve_state_rounds_for(const kve_state *s, uint32_t capacity, uint32_t n_valid,
                              uint32_t n_new)
{
    return kve_rounds_for(capacity, n_valid, n_new, s->d.schedule.interval);
}

void kve_state_close_row(kve_state *s, uint32_t row)
{
    s->rows[row].active = 0;
    kve_pool_release(s, row);
}

kve_status kve_state_open_row(kve_state *s, uint32_t row, uint64_t seq_id, uint32_t prompt_len,
                              uint32_t capacity)
{
    kve_state_row *r = &s->rows[row];
    KVE_TRY(kve_pool_check(s, row, prompt_len, capacity)); /* a refusal leaves the row as it was */
    kve_pool_release(s, row);
    memset(r, 0, sizeof *r);
    kve_status taken = kve_pool_take(s, row, prompt_len, capacity);
    if (taken != KVE_OK) { /* the pool may have been compacted: rows moved */
        kve_state_push_rows(s);
        return taken;
    }
    r->capacity = capacity;
    s->jobs[0] = kve_state_job_make(s, KVE_JOB_RESET, row, 0, 0, 0, 0);
    kve_status st = kve_state_run(s, 1, (uint64_t)s->tables * capacity, NULL);
    if (st != KVE_OK) {
        kve_pool_release(s, row);
        kve_state_push_rows(s);
        return st;
    }
    r->active = 1;
    r->seq_id = seq_id;
    r->prompt = prompt_len;
    return kve_state_push_rows(s); /* the planner reads the rows in backend memory */
}

kve_status kve_state_admit(kve_state *s, uint32_t row, uint64_t seq_id, uint32_t prompt_len)
{
    KVE_TRY(kve_check_row(s, row, 0));
    uint32_t capacity;
    KVE_TRY(kve_state_check_prompt(s, prompt_len, &capacity));
    return kve_state_open_row(s, row, seq_id, prompt_len, capacity);
}

kve_status kve_state_retire(kve_state *s, uint32_t row)
{
    KVE_TRY(kve_check_row(s, row, 1));
    kve_state_close_row(s, row);
    return kve_state_push_rows(s);
}


kve_status kve_state_get_layout(const kve_state *s, kve_state_layout *out)
{
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    *out = (kve_state_layout){s->slot_pos,       s->row_elems,     s->table_layers,
                              s->table_heads,    s->d.max_slots,  s->d.max_seqs,
                              s->pool};
    return KVE_OK;
}

kve_status kve_state_get_seq(const kve_state *s, uint32_t row, kve_state_seq_info *out)
{
    KVE_TRY(kve_check_row(s, row, -1));
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    const kve_state_row *r = &s->rows[row];
    memset(out, 0, sizeof *out); /* padding too: callers may compare infos bytewise */
    out->active = r->active;
    out->prompt_len = r->prompt;
    out->seq_id = r->seq_id;
    out->capacity = r->capacity;
    out->n_tokens = r->n_tokens;
    out->round = r->round;
    out->n_valid = r->n_valid;
    out->n_used = r->n_valid;
    out->table_offset = r->off * s->tables;
    out->draft_first = r->capacity;
    out->max_draft = s->d.max_draft;
    return KVE_OK;
}

kve_status kve_state_read_digest(kve_state *s, uint32_t row, uint64_t *out)
{
    KVE_TRY(kve_check_row(s, row, 1));
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    return kve_copy(s->ctx, out, s->run_digest + row, 8, KVE_COPY_BACKEND_TO_HOST);
}

kve_status kve_state_read_slots(kve_state *s, uint32_t row, int32_t *out, size_t out_len)
{
    KVE_TRY(kve_check_row(s, row, 1));
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    KVE_RETURN_ERROR_IF(out_len < s->row_elems, KVE_ERR_RANGE,
                        "out_len = %zu: a row holds %u x %u tables x %u slots = %zu", out_len,
                        s->table_layers, s->table_heads, s->d.max_slots, s->row_elems);
    const kve_state_row *r = &s->rows[row];
    size_t C = r->capacity, M = s->d.max_slots;
    KVE_TRY(kve_copy(s->ctx, out, s->slot_pos + r->off * s->tables, s->tables * C * 4,
                     KVE_COPY_BACKEND_TO_HOST));
    for (size_t t = s->tables; t-- > 0;) { /* spread to max_slots per table, last first */
        memmove(out + t * M, out + t * C, C * 4);
        for (size_t i = C; i < M; i++)
            out[t * M + i] = -1;
    }
    return KVE_OK;
}

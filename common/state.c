/*
 * state.c — the cache state: docs/SPEC.md "Schedule" for a batch of
 * sequences. Slot tables and freed-slot lists live in backend memory and
 * change only through the backend's state_update jobs and state_evict;
 * counts and rounds are host bookkeeping, so the host plans a whole wave of
 * an append (which rows evict, what each writes) before the device runs
 * it. The jobs are uploaded to backend memory, one copy a wave, and every
 * launch of a wave is sized by the call's shape (rows, tokens) alone: a
 * decode step launches the same kernels on the same grids whichever rows
 * evict (docs/GPU.md "CUDA graphs"). Rebuild is in state_rebuild.c.
 */
#include <stdlib.h>
#include <string.h>

#include "kve_error.h"
#include "kve_state_impl.h"

#define KVE_I32_MAX 0x7fffffffu
#define KVE_ALIGN256(x) (((x) + 255) & ~(size_t)255)

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
    KVE_RETURN_ERROR_IF(s->budget > KVE_I32_MAX, KVE_ERR_RANGE,
                        "schedule.budget = %u: must be <= 2^31-1", s->budget);
    KVE_RETURN_ERROR_IF(s->window > KVE_I32_MAX, KVE_ERR_RANGE,
                        "schedule.window = %u: must be <= 2^31-1", s->window);
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

/* Checks @p d and lays out the state's backend memory. */
static kve_status kve_state_plan(kve_context *ctx, const kve_state_desc *d, kve_state *s)
{
    KVE_RETURN_ERROR_IF(!ctx, KVE_ERR_NULL, "ctx is NULL");
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
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->d = *d;
    s->tl = (d->schedule.flags & KVE_SHARED_LAYERS) ? 1 : d->n_layers;
    s->th = (d->schedule.flags & KVE_SHARED_HEADS) ? 1 : d->n_heads;
    s->tables = (size_t)s->tl * s->th;
    s->row_elems = s->tables * d->max_slots;
    KVE_RETURN_ERROR_IF(d->pool_slots && d->pool_slots < d->max_slots, KVE_ERR_RANGE,
                        "desc.pool_slots = %llu: below max_slots = %u (0: max_seqs x max_slots)",
                        (unsigned long long)d->pool_slots, d->max_slots);
    s->pool = d->pool_slots ? d->pool_slots : (uint64_t)d->max_seqs * d->max_slots;
    size_t sizes[KVE_STATE_PARTS];
    /* Tables and freed lists (kve_evict wants capacity - B entries a head,
     * so a row's freed lists take its capacity too) share the pool's layout. */
    KVE_RETURN_ERROR_IF(s->pool > SIZE_MAX / 4 ||
                            __builtin_mul_overflow(s->tables, (size_t)s->pool * 4, &sizes[0]),
                        KVE_ERR_OVERFLOW, "desc: %zu tables x %llu pool slots overflows",
                        s->tables, (unsigned long long)s->pool);
    sizes[1] = sizes[0];
    sizes[2] = (size_t)d->max_seqs * KVE_STATE_JOB_SETS * sizeof(kve_state_job);
    sizes[3] = (size_t)d->max_seqs * s->tables * 4 * 2; /* n_evicted, n_kept per call row */
    kve_batch b = kve_state_batch(s, d->max_seqs); /* the largest eviction of a wave */
    KVE_TRY(ctx->ops->evict_workspace_size(ctx, &b, &sizes[4]));
    sizes[5] = (size_t)d->max_seqs * 8; /* running digests */
    s->digest_weight = ((d->schedule.flags & KVE_SHARED_HEADS) ? (uint64_t)d->n_heads : 1) *
                       ((d->schedule.flags & KVE_SHARED_LAYERS) ? (uint64_t)d->n_layers : 1);
    size_t off = 0;
    for (int i = 0; i < KVE_STATE_PARTS; i++) {
        s->offsets[i] = off;
        KVE_RETURN_ERROR_IF(off + KVE_ALIGN256(sizes[i]) < off, KVE_ERR_OVERFLOW,
                            "desc: state memory overflows");
        off += KVE_ALIGN256(sizes[i]);
    }
    s->workspace_bytes = sizes[4];
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
                   s->tl,
                   s->th,
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
    KVE_TRY(kve_state_plan(ctx, desc, &s));
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
    KVE_TRY(kve_state_plan(ctx, desc, &plan));
    KVE_RETURN_ERROR_IF(!ctx->ops->state_update || !ctx->ops->state_evict || !ctx->ops->upload,
                        KVE_ERR_UNAVAILABLE,
                        "kve_state_create: the %s backend does not implement cache states yet",
                        ctx->ops->name);
    KVE_RETURN_ERROR_IF(!memory && memory_bytes, KVE_ERR_NULL,
                        "memory is NULL but memory_bytes = %zu", memory_bytes);
    KVE_RETURN_ERROR_IF(memory && memory_bytes < plan.memory_bytes, KVE_ERR_WORKSPACE,
                        "memory_bytes = %zu: kve_state_memory_size says %zu", memory_bytes,
                        plan.memory_bytes);
    kve_state *s = (kve_state *)malloc(sizeof *s);
    size_t n = desc->max_seqs;
    void *host = calloc(n, sizeof(kve_state_row) + KVE_STATE_JOB_SETS * sizeof(kve_state_job) +
                               sizeof(kve_state_work));
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
    s->rows = (kve_state_row *)host; /* 8-byte aligned sizes first */
    s->jobs = (kve_state_job *)(s->rows + n);
    s->work = (kve_state_work *)(s->jobs + KVE_STATE_JOB_SETS * n);
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
    char *base = (char *)memory;
    s->memory = memory;
    s->slot_pos = (int32_t *)(base + s->offsets[0]);
    s->freed = (int32_t *)(base + s->offsets[1]);
    s->dev_jobs = (kve_state_job *)(base + s->offsets[2]);
    s->n_evicted = (uint32_t *)(base + s->offsets[3]);
    s->n_kept = s->n_evicted + (size_t)desc->max_seqs * s->tables;
    s->workspace = s->workspace_bytes ? base + s->offsets[4] : NULL;
    s->run_digest = (uint64_t *)(base + s->offsets[5]);
    kve_error_clear();
    *out = s;
    return KVE_OK;
}

kve_status kve_state_destroy(kve_state *s)
{
    if (s) {
        if (s->owned) {
            kve_context_synchronize(s->ctx);
            kve_free(s->ctx, s->memory);
        }
        free(s->rows);
        free(s->free_runs);
        free(s);
    }
    return KVE_OK;
}

kve_status kve_state_upload(kve_state *s, uint32_t n_jobs)
{
    return n_jobs ? s->ctx->ops->upload(s->ctx, s->dev_jobs, s->jobs,
                                        (size_t)n_jobs * sizeof(kve_state_job))
                  : KVE_OK;
}

kve_status kve_state_launch(kve_state *s, uint32_t first, uint32_t n_jobs, uint64_t work,
                            const kve_step_buffers *out)
{
    if (n_jobs == 0)
        return KVE_OK;
    kve_state_update u = {.table_layers = s->tl,
                          .table_heads = s->th,
                          .slot_pos = s->slot_pos,
                          .freed = s->freed,
                          .run_digest = s->run_digest,
                          .n_jobs = n_jobs,
                          .jobs = s->dev_jobs + first,
                          .work = work};
    if (out) {
        u.mapping = out->slot_mapping;
        u.map_layer_stride = (size_t)out->max_tokens * s->th;
        u.moves = out->moves;
        u.n_moves = out->n_moves;
        u.move_rows = out->max_rows;
        u.max_moves = out->max_moves;
    }
    return s->ctx->ops->state_update(s->ctx, &u);
}

kve_status kve_state_run(kve_state *s, uint32_t n_jobs, uint64_t work, const kve_step_buffers *out)
{
    KVE_TRY(kve_state_upload(s, n_jobs));
    return kve_state_launch(s, 0, n_jobs, work, out);
}

static kve_status kve_check_row(const kve_state *s, uint32_t row, int want_active)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
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
    const kve_state_row *r = &s->rows[row];
    kve_state_job j = {r->off * s->tables, r->capacity, kind, row, first, count, pos, token, 0,
                       {0, 0, 0}};
    return j;
}

/* Give row @p row's pool slots back (merging with the free runs beside them). */
static void kve_pool_release(kve_state *s, uint32_t row)
{
    kve_state_row *r = &s->rows[row];
    if (!r->held)
        return;
    r->held = 0;
    uint64_t start = r->off, len = r->capacity;
    uint32_t i = 0;
    while (i < s->n_runs && s->free_runs[i].start < start)
        i++;
    if (i > 0 && s->free_runs[i - 1].start + s->free_runs[i - 1].len == start) {
        s->free_runs[i - 1].len += len; /* joins the run before */
        if (i < s->n_runs && start + len == s->free_runs[i].start) {
            s->free_runs[i - 1].len += s->free_runs[i].len;
            memmove(&s->free_runs[i], &s->free_runs[i + 1],
                    (s->n_runs - i - 1) * sizeof(kve_pool_run));
            s->n_runs--;
        }
        return;
    }
    if (i < s->n_runs && start + len == s->free_runs[i].start) {
        s->free_runs[i].start = start;
        s->free_runs[i].len += len;
        return;
    }
    memmove(&s->free_runs[i + 1], &s->free_runs[i], (s->n_runs - i) * sizeof(kve_pool_run));
    s->free_runs[i] = (kve_pool_run){start, len};
    s->n_runs++;
}

/* Move every held row's tables down to the start of the pool, in pool
 * order, leaving one free run at the end. Backend copies, stream-ordered,
 * in pieces no longer than the shift so that no piece overlaps itself.
 * (Freed lists are scratch of a round: they do not move.) */
static kve_status kve_pool_compact(kve_state *s)
{
    uint64_t next = 0;
    for (;;) {
        uint32_t pick = s->d.max_seqs;
        for (uint32_t r = 0; r < s->d.max_seqs; r++)
            if (s->rows[r].held && s->rows[r].off >= next &&
                (pick == s->d.max_seqs || s->rows[r].off < s->rows[pick].off))
                pick = r;
        if (pick == s->d.max_seqs)
            break;
        kve_state_row *r = &s->rows[pick];
        uint64_t shift = (r->off - next) * s->tables, len = (uint64_t)r->capacity * s->tables;
        int32_t *dst = s->slot_pos + next * s->tables, *src = s->slot_pos + r->off * s->tables;
        for (uint64_t done = 0; shift && done < len;) {
            uint64_t piece = len - done < shift ? len - done : shift;
            KVE_TRY(kve_copy(s->ctx, dst + done, src + done, piece * 4,
                             KVE_COPY_BACKEND_TO_BACKEND));
            done += piece;
        }
        r->off = next;
        next += r->capacity;
    }
    s->free_runs[0] = (kve_pool_run){next, s->pool - next};
    s->n_runs = next < s->pool;
    return KVE_OK;
}

/* Take @p capacity slots for row @p row: the first free run that fits,
 * after compacting the pool when the free slots suffice but no run does. */
static kve_status kve_pool_take(kve_state *s, uint32_t row, uint32_t prompt_len, uint32_t capacity)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n_runs; i++)
        total += s->free_runs[i].len;
    int fits = 0;
    for (uint32_t i = 0; i < s->n_runs; i++)
        fits |= s->free_runs[i].len >= capacity;
    if (!fits && total >= capacity)
        KVE_TRY(kve_pool_compact(s));
    uint64_t free_slots = 0, largest = 0;
    for (uint32_t i = 0; i < s->n_runs; i++) {
        kve_pool_run *run = &s->free_runs[i];
        free_slots += run->len;
        largest = run->len > largest ? run->len : largest;
        if (run->len < capacity)
            continue;
        s->rows[row].off = run->start;
        s->rows[row].held = 1;
        run->start += capacity;
        run->len -= capacity;
        if (!run->len) {
            memmove(run, run + 1, (s->n_runs - i - 1) * sizeof(kve_pool_run));
            s->n_runs--;
        }
        return KVE_OK;
    }
    return kve_error_set(KVE_ERR_RANGE,
                         "prompt_len = %u: capacity %u slots, but the pool of %llu has %llu free, "
                         "at most %llu in one run (retire a row, or size desc.pool_slots larger)",
                         prompt_len, capacity, (unsigned long long)s->pool,
                         (unsigned long long)free_slots, (unsigned long long)largest);
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
    kve_pool_release(s, row);
    memset(r, 0, sizeof *r);
    KVE_TRY(kve_pool_take(s, row, prompt_len, capacity));
    r->capacity = capacity;
    s->jobs[0] = kve_state_job_make(s, KVE_JOB_RESET, row, 0, 0, 0, 0);
    kve_status st = kve_state_run(s, 1, (uint64_t)s->tables * capacity, NULL);
    if (st != KVE_OK) {
        kve_pool_release(s, row);
        return st;
    }
    r->active = 1;
    r->seq_id = seq_id;
    r->prompt = prompt_len;
    return KVE_OK;
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
    return KVE_OK;
}

uint32_t kve_state_rounds_for(const kve_state *s, uint32_t capacity, uint32_t n_valid,
                              uint32_t n_new)
{
    uint32_t room = capacity - n_valid, r = s->d.schedule.interval;
    return n_new <= room ? 0 : (uint32_t)(((uint64_t)n_new - room + r - 1) / r);
}

kve_status kve_state_max_moves(const kve_state *s, uint32_t max_new, uint32_t *out_moves)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(!out_moves, KVE_ERR_NULL, "out_moves is NULL");
    uint64_t r = s->d.schedule.interval, m = r * ((max_new + r - 1) / r);
    *out_moves = m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
    return KVE_OK;
}

/* Rows of kve_state_append: distinct, active, positions within int32; the
 * buffers large enough for the call. */
static kve_status kve_append_check(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                   const uint32_t *n_new, const kve_step_buffers *out)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    int with_moves = out && (out->moves || out->n_moves);
    if (with_moves) {
        KVE_RETURN_ERROR_IF(!out->moves || !out->n_moves, KVE_ERR_NULL,
                            "out->%s is NULL: moves and n_moves go together",
                            out->moves ? "n_moves" : "moves");
        KVE_RETURN_ERROR_IF(out->max_rows < n_rows, KVE_ERR_RANGE,
                            "out->max_rows = %u: the call has n_rows = %u", out->max_rows, n_rows);
    }
    uint64_t total = 0;
    uint32_t rounds = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        KVE_RETURN_ERROR_IF(rows[i] >= s->d.max_seqs, KVE_ERR_RANGE, "rows[%u] = %u: must be 0..%u",
                            i, rows[i], s->d.max_seqs - 1);
        const kve_state_row *r = &s->rows[rows[i]];
        KVE_RETURN_ERROR_IF(!r->active, KVE_ERR_INVALID, "rows[%u] = %u: holds no sequence", i,
                            rows[i]);
        KVE_RETURN_ERROR_IF(s->work[rows[i]].mark, KVE_ERR_INVALID,
                            "rows[%u] = %u: appears twice in this call", i, rows[i]);
        s->work[rows[i]].mark = 1;
        KVE_RETURN_ERROR_IF((uint64_t)r->n_tokens + n_new[i] > KVE_I32_MAX, KVE_ERR_RANGE,
                            "n_new[%u] = %u: row %u would pass position 2^31-1 (it holds %u "
                            "tokens)",
                            i, n_new[i], rows[i], r->n_tokens);
        uint32_t k = kve_state_rounds_for(s, r->capacity, r->n_valid, n_new[i]);
        rounds = k > rounds ? k : rounds;
        total += n_new[i];
    }
    KVE_RETURN_ERROR_IF(total > KVE_I32_MAX, KVE_ERR_RANGE,
                        "n_new sums to %llu tokens: at most 2^31-1 per call",
                        (unsigned long long)total);
    KVE_RETURN_ERROR_IF(out && out->slot_mapping && out->max_tokens < total, KVE_ERR_RANGE,
                        "out->max_tokens = %u: the call appends %llu tokens", out->max_tokens,
                        (unsigned long long)total);
    uint64_t need = (uint64_t)rounds * s->d.schedule.interval;
    KVE_RETURN_ERROR_IF(with_moves && out->max_moves < need, KVE_ERR_RANGE,
                        "out->max_moves = %u: a row of this call runs %u rounds, up to r = %u "
                        "moves each (%llu)",
                        out->max_moves, rounds, s->d.schedule.interval, (unsigned long long)need);
    return KVE_OK;
}

/* Waves an append whose rows take at most @p max_new tokens runs: enough
 * for any row whatever its fill (a row with room takes it first, then
 * evicts once every r tokens), so the count depends on the call's shape. */
static uint32_t kve_state_waves(const kve_state *s, uint32_t max_new)
{
    uint64_t r = s->d.schedule.interval;
    return max_new ? 1 + (uint32_t)((max_new - 1 + r - 1) / r) : 0;
}

/* Plan call row @p i's part of a wave: its row list entry (due when it
 * still has tokens and is full), its round (a no-op when not due) and its
 * next run of tokens at its first free slot, in s->jobs (sets of n_rows). */
static void kve_state_plan_row(kve_state *s, uint32_t n_rows, uint32_t i, uint32_t row)
{
    kve_state_row *r = &s->rows[row];
    kve_state_work *w = &s->work[row];
    uint32_t r_slots = s->d.schedule.interval;
    w->evict = w->left && r->n_valid == r->capacity;
    kve_state_job *j = s->jobs + i;
    *j = kve_state_job_make(s, KVE_JOB_EVICT, row, 0, w->evict, 0, i);
    j->seq = (kve_seq){r->seq_id, r->prompt, r->round};
    j[n_rows] = kve_state_job_make(s, KVE_JOB_ROUND, row, r->capacity, w->evict ? r_slots : 0,
                                   w->pos0, i);
    if (w->evict) {
        r->n_valid = r->capacity - r_slots;
        r->round++;
        w->rounds = 1;
    }
    uint32_t room = r->capacity - r->n_valid, count = w->left < room ? w->left : room;
    j[2 * n_rows] = kve_state_job_make(s, KVE_JOB_LINEAR, row, r->n_valid, count, r->n_tokens,
                                       w->base + w->done);
    r->n_valid += count;
    r->n_tokens += count;
    w->done += count;
    w->left -= count;
}

/* Host memory: every table of a row that evicted lost exactly r slots. */
static kve_status kve_state_check_evicted(const kve_state *s, uint32_t n_rows,
                                          const uint32_t *rows)
{
    for (uint32_t i = 0; s->ctx->ops->host_memory && i < n_rows; i++)
        for (size_t t = 0; s->work[rows[i]].evict && t < s->tables; t++)
            KVE_RETURN_ERROR_IF(s->n_evicted[i * s->tables + t] != s->d.schedule.interval,
                                KVE_ERR_INTERNAL,
                                "row %u, table %zu: a full head evicted %u slots, not r = %u",
                                rows[i], t, s->n_evicted[i * s->tables + t],
                                s->d.schedule.interval);
    return KVE_OK;
}

/* One wave on the device: its jobs uploaded in one copy, then the move
 * lists cleared (the call's first wave), the due rows evicted, the rounds
 * placed, the runs written, the final mappings (its last wave). Every
 * launch and its size follow from the call's shape. */
static kve_status kve_state_wave(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 uint64_t tokens, int first, int last, const kve_step_buffers *out)
{
    int clear = first && out && out->moves, final = last && out && out->slot_mapping;
    uint64_t n = n_rows, per_row = n * s->tables;
    KVE_TRY(kve_state_upload(s, (uint32_t)((clear ? 5 : final ? 4 : 3) * n)));
    if (clear)
        KVE_TRY(kve_state_launch(s, 4 * n_rows, n_rows, per_row, out));
    kve_state_evict e = {kve_state_batch(s, n_rows),
                         s->freed,
                         s->n_evicted,
                         s->n_kept,
                         s->run_digest,
                         s->digest_weight,
                         s->dev_jobs,
                         s->workspace,
                         s->workspace_bytes,
                         NULL,
                         0,
                         0};
    if ((s->d.schedule.flags & KVE_SCORED) && out) { /* checked: scores given */
        e.scores = out->scores;
        e.scores_stride_row = out->scores_stride_row;
        e.scores_stride_table = out->scores_stride_table;
    }
    KVE_TRY(s->ctx->ops->state_evict(s->ctx, &e));
    KVE_TRY(kve_state_check_evicted(s, n_rows, rows));
    KVE_TRY(kve_state_launch(s, n_rows, n_rows, per_row, out));
    KVE_TRY(kve_state_launch(s, 2 * n_rows, n_rows, tokens * s->tables, out));
    if (final)
        KVE_TRY(kve_state_launch(s, 3 * n_rows, n_rows, per_row, out));
    return KVE_OK;
}

/* The waves of an append (a fixed number for the call's shape): each wave
 * evicts the rows that are full and places their round (moving kept
 * entries down), then writes every row's next run of tokens at its first
 * free slot. Rows that went through a round get their final mapping in the
 * last wave: a later round may have moved the call's tokens down. */
kve_status kve_state_append_rows(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 const uint32_t *n_new, const kve_step_buffers *out)
{
    uint32_t base = 0, max_new = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        kve_state_work *w = &s->work[rows[i]];
        *w = (kve_state_work){n_new[i], 0, base, s->rows[rows[i]].n_tokens, i, 0, 0, 0};
        base += n_new[i];
        max_new = n_new[i] > max_new ? n_new[i] : max_new;
    }
    uint32_t waves = kve_state_waves(s, max_new);
    if (!waves && out && out->moves) { /* every list of the call starts empty */
        for (uint32_t i = 0; i < n_rows; i++)
            s->jobs[i] = kve_state_job_make(s, KVE_JOB_MOVES_CLEAR, rows[i], 0, 0, 0, i);
        return kve_state_run(s, n_rows, (uint64_t)n_rows * s->tables, out);
    }
    for (uint32_t k = 0; k < waves; k++) {
        for (uint32_t i = 0; i < n_rows; i++)
            kve_state_plan_row(s, n_rows, i, rows[i]);
        for (uint32_t i = 0; k + 1 == waves && i < n_rows; i++) {
            const kve_state_work *w = &s->work[rows[i]];
            KVE_RETURN_ERROR_IF(w->left, KVE_ERR_INTERNAL,
                                "row %u: %u tokens left after the %u waves of the call", rows[i],
                                w->left, waves);
            s->jobs[3 * n_rows + i] =
                kve_state_job_make(s, KVE_JOB_FINAL, rows[i], s->rows[rows[i]].n_valid,
                                   w->rounds ? w->done : 0, w->pos0, w->base);
        }
        for (uint32_t i = 0; k == 0 && i < n_rows; i++)
            s->jobs[4 * n_rows + i] = kve_state_job_make(s, KVE_JOB_MOVES_CLEAR, rows[i], 0, 0, 0, i);
        KVE_TRY(kve_state_wave(s, n_rows, rows, base, k == 0, k + 1 == waves, out));
    }
    return KVE_OK;
}

kve_status kve_state_append(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                            const uint32_t *n_new, const kve_step_buffers *out)
{
    kve_status st = kve_append_check(s, n_rows, rows, n_new, out);
    for (uint32_t i = 0; s && rows && i < n_rows && rows[i] < s->d.max_seqs; i++)
        s->work[rows[i]].mark = 0;
    KVE_TRY(st);
    KVE_TRY(kve_state_check_scored(s, n_rows, rows, n_new, out));
    return kve_state_append_rows(s, n_rows, rows, n_new, out);
}

kve_status kve_state_get_layout(const kve_state *s, kve_state_layout *out)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    *out = (kve_state_layout){s->slot_pos,     s->row_elems,  s->tl,  s->th,
                              s->d.max_slots, s->d.max_seqs, s->pool};
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
                        s->tl, s->th, s->d.max_slots, s->row_elems);
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

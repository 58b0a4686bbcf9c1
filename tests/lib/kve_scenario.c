/* kve_scenario.c — cache-state programs run on two contexts in lockstep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_scenario.h"

static uint32_t kve_sc_between(uint64_t *rng, uint32_t lo, uint32_t hi)
{
    return lo + kve_rand_below(rng, hi - lo + 1);
}

void kve_scenario_make(kve_scenario *s, uint64_t *rng, kve_scenario_kind kind)
{
    static const uint32_t entries[] = {0, 2, 4, 6, 16};
    memset(s, 0, sizeof *s);
    s->kind = kind;
    kve_state_desc *d = &s->desc;
    kve_schedule *sc = &d->schedule;
    sc->seed = kve_splitmix64(rng);
    sc->flags = kve_rand_below(rng, 8); /* any of the 8 sharing / key modes */
    d->layer_offset = kve_rand_below(rng, 50);
    d->head_offset = kve_rand_below(rng, 50);
    if (kind == KVE_SCENARIO_LARGE) {
        *sc = (kve_schedule){sc->seed, sc->flags, 256, 16, 16};
        d->max_seqs = 8;
        d->n_layers = 4;
        d->n_heads = 8;
        s->steps = 200;
        s->max_prompt = 128;
        s->max_new = 40;
        s->entry_bytes = 16;
    } else if (kind == KVE_SCENARIO_MANY_ROWS) {
        sc->budget = kve_sc_between(rng, 4, 12);
        sc->window = kve_rand_below(rng, 4);
        sc->interval = kve_sc_between(rng, 1, 4);
        d->max_seqs = kve_sc_between(rng, 65, 140);
        d->n_layers = 1;
        d->n_heads = kve_sc_between(rng, 1, 2);
        s->steps = kve_sc_between(rng, 12, 20);
        s->max_prompt = 8;
        s->max_new = 4;
        s->entry_bytes = 4;
    } else {
        sc->budget = kve_rand_below(rng, 25);
        sc->window = kve_rand_below(rng, 7);
        sc->interval = kve_sc_between(rng, 1, 6);
        d->max_seqs = kve_sc_between(rng, 1, 4);
        d->n_layers = kve_sc_between(rng, 1, 3);
        d->n_heads = kve_sc_between(rng, 1, 3);
        s->steps = kve_sc_between(rng, 40, 100);
        s->max_prompt = kve_rand_below(rng, 21);
        s->max_new = kve_sc_between(rng, 2, 12);
        s->entry_bytes = entries[kve_rand_below(rng, 5)];
    }
    uint32_t cap;
    kve_schedule_capacity(sc, s->max_prompt, &cap); /* small numbers: cannot fail */
    d->max_slots = cap + (kind == KVE_SCENARIO_LARGE ? 0 : kve_rand_below(rng, 4));
    s->seed = kve_splitmix64(rng);
    snprintf(s->label, sizeof s->label,
             "state: flags 0x%x, %u rows x %u layers x %u heads, B %u, W %u, r %u, max_slots %u, "
             "prompts <= %u, steps %u, entry %u",
             sc->flags, d->max_seqs, d->n_layers, d->n_heads, sc->budget, sc->window, sc->interval,
             d->max_slots, s->max_prompt, s->steps, s->entry_bytes);
}

/* One context's state and backend buffers. */
typedef struct {
    kve_context *ctx;
    kve_state *st;
    int64_t *map;
    int32_t *moves;
    uint32_t *n_moves;
    unsigned char *cache, *src;
    int32_t *token_row, *move_row;
} kve_side;

typedef struct {
    const kve_scenario *s;
    uint64_t rng;
    kve_side side[2];       /* reference, subject */
    uint32_t tl, th;        /* table layers, table heads */
    size_t tables, map_cap; /* mapping elements */
    size_t max_total;       /* tokens one append may carry */
    uint32_t max_moves;     /* pairs per move list */
    size_t n_lists;         /* move lists: table_layers x max_seqs x table_heads */
    size_t layer_bytes, cache_bytes;
    int64_t *map_h[2]; /* host copies */
    int32_t *moves_h[2];
    int32_t *tab_h[2];
    unsigned char *cache_h[2], *src_h;
    int32_t *row_h;
    uint32_t *active;
    char *why;
    size_t why_bytes;
} kve_sc_run;

#define SC_FAIL(r, ...)                                                                          \
    do {                                                                                         \
        snprintf((r)->why, (r)->why_bytes, __VA_ARGS__);                                         \
        return 1;                                                                                \
    } while (0)

static int kve_sc_open(kve_sc_run *r, int k, kve_context *ctx)
{
    kve_side *sd = &r->side[k];
    sd->ctx = ctx;
    if (kve_state_create(ctx, &r->s->desc, NULL, 0, &sd->st) != KVE_OK)
        SC_FAIL(r, "side %d: kve_state_create: %s", k, kve_last_error());
    size_t row_bytes = r->max_total * 4 + 4,
           src_bytes = r->max_total * r->s->desc.n_heads * (r->s->entry_bytes + 1);
    uint32_t max_new = r->s->max_prompt + 1 > r->s->max_new ? r->s->max_prompt + 1 : r->s->max_new;
    if (kve_state_max_moves(sd->st, max_new, &r->max_moves) != KVE_OK)
        SC_FAIL(r, "side %d: kve_state_max_moves: %s", k, kve_last_error());
    size_t pairs = r->n_lists * r->max_moves * 2;
    if (!r->moves_h[k])
        r->moves_h[k] = (int32_t *)calloc(pairs + r->n_lists, 4);
    if (!r->moves_h[k])
        SC_FAIL(r, "out of host memory");
    memset(r->map_h[0], 0, r->map_cap * 8);
    if (kve_alloc(ctx, r->map_cap * 8, (void **)&sd->map) != KVE_OK ||
        kve_alloc(ctx, pairs * 4, (void **)&sd->moves) != KVE_OK ||
        kve_alloc(ctx, r->n_lists * 4, (void **)&sd->n_moves) != KVE_OK ||
        kve_copy(ctx, sd->map, r->map_h[0], r->map_cap * 8, KVE_COPY_HOST_TO_BACKEND) ||
        kve_copy(ctx, sd->moves, r->map_h[0], pairs * 4, KVE_COPY_HOST_TO_BACKEND) ||
        kve_copy(ctx, sd->n_moves, r->map_h[0], r->n_lists * 4, KVE_COPY_HOST_TO_BACKEND) ||
        kve_alloc(ctx, r->cache_bytes, (void **)&sd->cache) != KVE_OK ||
        kve_alloc(ctx, src_bytes, (void **)&sd->src) != KVE_OK ||
        kve_alloc(ctx, row_bytes, (void **)&sd->token_row) != KVE_OK ||
        kve_alloc(ctx, r->s->desc.max_seqs * 4, (void **)&sd->move_row) != KVE_OK ||
        kve_copy(ctx, sd->cache, r->cache_h[0], r->cache_bytes, KVE_COPY_HOST_TO_BACKEND))
        SC_FAIL(r, "side %d: backend memory: %s", k, kve_last_error());
    return 0;
}

static void kve_sc_close(kve_sc_run *r)
{
    for (int k = 0; k < 2; k++) {
        kve_side *sd = &r->side[k];
        if (!sd->ctx)
            continue;
        kve_context_synchronize(sd->ctx);
        kve_state_destroy(sd->st);
        kve_free(sd->ctx, sd->map);
        kve_free(sd->ctx, sd->moves);
        kve_free(sd->ctx, sd->n_moves);
        kve_free(sd->ctx, sd->cache);
        kve_free(sd->ctx, sd->src);
        kve_free(sd->ctx, sd->token_row);
        kve_free(sd->ctx, sd->move_row);
    }
    for (int k = 0; k < 2; k++) {
        free(r->map_h[k]);
        free(r->moves_h[k]);
        free(r->tab_h[k]);
        free(r->cache_h[k]);
    }
    free(r->src_h);
    free(r->row_h);
    free(r->active);
}

/* Both statuses OK, or the difference. */
static int kve_sc_both(kve_sc_run *r, const char *call, kve_status a, const char *msg_a,
                       kve_status b)
{
    if (a != KVE_OK || b != KVE_OK)
        SC_FAIL(r, "%s: reference %s (%s), subject %s (%s)", call, kve_status_string(a), msg_a,
                kve_status_string(b), kve_last_error());
    return 0;
}

/* The @p bytes at both sides' buffers @p bufs agree (through host @p host). */
static int kve_sc_same(kve_sc_run *r, const char *what, void *const bufs[2], size_t bytes,
                       void *const host[2])
{
    for (int k = 0; k < 2; k++)
        if (kve_copy(r->side[k].ctx, host[k], bufs[k], bytes, KVE_COPY_BACKEND_TO_HOST) != KVE_OK)
            SC_FAIL(r, "%s: copy: %s", what, kve_last_error());
    if (memcmp(host[0], host[1], bytes)) {
        size_t at = 0;
        while (((unsigned char *)host[0])[at] == ((unsigned char *)host[1])[at])
            at++;
        SC_FAIL(r, "%s: differs at byte %zu of %zu", what, at, bytes);
    }
    return 0;
}

static int kve_sc_same_map(kve_sc_run *r, const char *what, size_t n)
{
    void *bufs[2] = {r->side[0].map, r->side[1].map}, *host[2] = {r->map_h[0], r->map_h[1]};
    return kve_sc_same(r, what, bufs, n * 8, host);
}

/* Both sides' move lists, pairs and counts, agree. */
static int kve_sc_same_moves(kve_sc_run *r)
{
    size_t pairs = r->n_lists * r->max_moves * 2;
    void *bufs[2] = {r->side[0].moves, r->side[1].moves}, *host[2] = {r->moves_h[0], r->moves_h[1]};
    if (kve_sc_same(r, "append's moves", bufs, pairs * 4, host))
        return 1;
    void *counts[2] = {r->side[0].n_moves, r->side[1].n_moves};
    return kve_sc_same(r, "append's n_moves", counts, r->n_lists * 4, host);
}

/* Every row's bookkeeping and, for active rows, tables; then the device's
 * error records. */
static int kve_sc_check_rows(kve_sc_run *r, uint32_t step)
{
    const kve_state_desc *d = &r->s->desc;
    size_t row_elems = r->tables * d->max_slots;
    for (uint32_t row = 0; row < d->max_seqs; row++) {
        kve_state_seq_info a, b;
        kve_state_get_seq(r->side[0].st, row, &a);
        kve_state_get_seq(r->side[1].st, row, &b);
        if (a.active != b.active || a.n_tokens != b.n_tokens || a.round != b.round ||
            a.n_valid != b.n_valid || a.n_used != b.n_used || a.seq_id != b.seq_id)
            SC_FAIL(r, "step %u, row %u: tokens %u/%u, round %u/%u, valid %u/%u", step, row,
                    a.n_tokens, b.n_tokens, a.round, b.round, a.n_valid, b.n_valid);
        if (!a.active)
            continue;
        for (int k = 0; k < 2; k++)
            if (kve_state_read_slots(r->side[k].st, row, r->tab_h[k], row_elems) != KVE_OK)
                SC_FAIL(r, "step %u, row %u: read_slots: %s", step, row, kve_last_error());
        for (size_t i = 0; i < row_elems; i++)
            if (r->tab_h[0][i] != r->tab_h[1][i])
                SC_FAIL(r, "step %u, row %u, table %zu, slot %zu: %d (reference) vs %d", step, row,
                        i / d->max_slots, i % d->max_slots, r->tab_h[0][i], r->tab_h[1][i]);
        uint64_t dg[2] = {0, 1};
        for (int k = 0; k < 2; k++)
            if (kve_state_read_digest(r->side[k].st, row, &dg[k]) != KVE_OK)
                SC_FAIL(r, "step %u, row %u: read_digest: %s", step, row, kve_last_error());
        if (dg[0] != dg[1])
            SC_FAIL(r, "step %u, row %u: running digest 0x%016llx (reference) vs 0x%016llx", step,
                    row, (unsigned long long)dg[0], (unsigned long long)dg[1]);
    }
    kve_status sync = kve_context_synchronize(r->side[1].ctx);
    if (sync != KVE_OK)
        SC_FAIL(r, "step %u: the subject's synchronize: %s (%s)", step, kve_status_string(sync),
                kve_last_error());
    return 0;
}

/* The engine's write of one append: each layer's K rows at the mapping. */
static kve_status kve_sc_write(kve_sc_run *r, const kve_side *sd, size_t total, uint32_t n_rows)
{
    const kve_state_desc *d = &r->s->desc;
    kve_cache_write_desc w;
    memset(&w, 0, sizeof w);
    w.n_tokens = (uint32_t)total;
    w.n_heads = d->n_heads;
    w.entry_bytes = r->s->entry_bytes;
    w.n_caches = 1;
    w.src[0] = sd->src;
    w.layout = KVE_LAYOUT_HND; /* contiguous [row][head][slot][entry] */
    w.pages.page_size = d->max_slots;
    w.pages.n_pages = w.pages.n_rows = d->max_seqs;
    w.slots_stride_token = r->th;
    w.slots_stride_head = r->th > 1; /* shared heads: one slot for every head */
    w.token_row = sd->token_row;
    w.pages.kind = KVE_PAGES_NONE;
    w.n_move_rows = n_rows;
    w.max_moves = r->max_moves;
    w.moves_stride_row = r->th;
    w.moves_stride_head = r->th > 1;
    w.move_row = sd->move_row;
    for (uint32_t l = 0; l < d->n_layers; l++) {
        size_t tl = r->tl > 1 ? l : 0, lists = (size_t)d->max_seqs * r->th;
        w.dst[0] = sd->cache + l * r->layer_bytes;
        w.slots = sd->map + tl * r->max_total * r->th;
        w.moves = sd->moves + tl * lists * r->max_moves * 2;
        w.n_moves = sd->n_moves + tl * lists;
        kve_status st = kve_cache_write(sd->ctx, &w);
        if (st != KVE_OK)
            return st;
    }
    return KVE_OK;
}

static int kve_sc_append(kve_sc_run *r, uint32_t n, const uint32_t *rows, const uint32_t *n_new,
                         int with_map)
{
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < n_new[i]; k++)
            r->row_h[total++] = (int32_t)rows[i];
    size_t len = r->tl * r->max_total * r->th;
    kve_status st[2] = {KVE_OK, KVE_OK};
    char msg[512];
    /* A call the reference took in which every row brings the same count
     * c >= 1 (so the planned call leaves no mapping entry to pad), now and
     * then planned on the subject's backend instead (kve_state_append_device,
     * rows and counts in its memory, max_new = c): the same append. */
    uint32_t c = n ? n_new[0] : 0, shape_moves = 0;
    int uniform = c > 0;
    for (uint32_t i = 1; i < n; i++)
        uniform &= n_new[i] == c;
    for (int k = 0; k < 2; k++) {
        kve_side *sd = &r->side[k];
        kve_step_buffers out = {sd->map,   (uint32_t)r->max_total, sd->moves, sd->n_moves,
                                n,         r->max_moves, NULL, 0, 0};
        int planned = k == 1 && st[0] == KVE_OK && uniform &&
                      !(r->s->desc.schedule.flags & KVE_SCORED) &&
                      kve_state_max_moves(sd->st, c, &shape_moves) == KVE_OK &&
                      shape_moves <= r->max_moves && kve_chance(&r->rng, 50);
        if (planned) { /* move_row and token_row are rewritten before the writes read them */
            if (kve_copy(sd->ctx, sd->move_row, rows, n * 4, KVE_COPY_HOST_TO_BACKEND) ||
                kve_copy(sd->ctx, sd->token_row, n_new, n * 4, KVE_COPY_HOST_TO_BACKEND))
                SC_FAIL(r, "copy: %s", kve_last_error());
            st[k] = kve_state_append_device(sd->st, n, (const uint32_t *)sd->move_row,
                                            (const uint32_t *)sd->token_row, c,
                                            with_map ? &out : NULL);
            if (st[k] == KVE_OK)
                st[k] = kve_context_synchronize(sd->ctx); /* a device refusal shows here */
        } else {
            st[k] = kve_state_append(sd->st, n, rows, n_new, with_map ? &out : NULL);
        }
        if (k == 0)
            snprintf(msg, sizeof msg, "%s", kve_last_error());
    }
    if (kve_sc_both(r, "kve_state_append", st[0], msg, st[1]))
        return 1;
    if (!with_map)
        return 0;
    if (kve_sc_same_map(r, "append's slot_mapping", len) || kve_sc_same_moves(r))
        return 1;
    if (!r->s->entry_bytes || !total)
        return 0;
    size_t src_bytes = total * r->s->desc.n_heads * r->s->entry_bytes;
    for (size_t i = 0; i < src_bytes; i++)
        r->src_h[i] = (unsigned char)kve_splitmix64(&r->rng);
    for (int k = 0; k < 2; k++) {
        kve_side *sd = &r->side[k];
        if (kve_copy(sd->ctx, sd->src, r->src_h, src_bytes, KVE_COPY_HOST_TO_BACKEND) ||
            kve_copy(sd->ctx, sd->token_row, r->row_h, total * 4, KVE_COPY_HOST_TO_BACKEND) ||
            kve_copy(sd->ctx, sd->move_row, rows, n * 4, KVE_COPY_HOST_TO_BACKEND))
            SC_FAIL(r, "copy: %s", kve_last_error());
        st[k] = kve_sc_write(r, sd, total, n);
        if (k == 0)
            snprintf(msg, sizeof msg, "%s", kve_last_error());
    }
    return kve_sc_both(r, "kve_cache_write", st[0], msg, st[1]);
}

/* Rebuild live row @p live into free row @p spare on both sides, with the
 * recompute mapping when it fits. */
static int kve_sc_rebuild(kve_sc_run *r, uint32_t live, uint32_t spare)
{
    kve_state_seq_info info;
    kve_state_get_seq(r->side[0].st, live, &info);
    size_t len = (size_t)info.n_tokens * r->tables;
    int with_map = len <= r->map_cap && kve_chance(&r->rng, 70);
    kve_status st[2];
    char msg[512];
    for (int k = 0; k < 2; k++) {
        st[k] = kve_state_rebuild(r->side[k].st, spare, info.seq_id, info.prompt_len, info.n_tokens,
                                  NULL, 0, with_map ? r->side[k].map : NULL, with_map ? len : 0);
        if (k == 0)
            snprintf(msg, sizeof msg, "%s", kve_last_error());
    }
    if (kve_sc_both(r, "kve_state_rebuild", st[0], msg, st[1]))
        return 1;
    r->active[spare] = 1;
    return with_map ? kve_sc_same_map(r, "rebuild's slot_mapping", len) : 0;
}

/* One step: admissions and retirements, one append of the active rows in a
 * random order (prompts whole, decode tokens, sometimes several), now and
 * then a rebuild. */
static int kve_sc_step(kve_sc_run *r, uint32_t step, uint32_t *rows, uint32_t *n_new)
{
    const kve_scenario *s = r->s;
    uint32_t R = s->desc.max_seqs, n = 0, spare = R;
    int many = s->kind == KVE_SCENARIO_MANY_ROWS;
    for (uint32_t row = 0; row < R; row++) {
        uint32_t prompt = 0;
        if (!r->active[row] && (step == 0 || (!many && kve_chance(&r->rng, 20)))) {
            uint64_t id = kve_splitmix64(&r->rng);
            prompt = kve_rand_below(&r->rng, s->max_prompt + 1);
            for (int k = 0; k < 2; k++)
                if (kve_state_admit(r->side[k].st, row, id, prompt) != KVE_OK)
                    SC_FAIL(r, "step %u: admit row %u: %s", step, row, kve_last_error());
            r->active[row] = 1;
        } else if (r->active[row] && kve_chance(&r->rng, many ? 0 : 2)) {
            for (int k = 0; k < 2; k++)
                kve_state_retire(r->side[k].st, row);
            r->active[row] = 0;
        }
        if (!r->active[row]) {
            spare = row;
            continue;
        }
        if (!prompt && kve_chance(&r->rng, 15))
            continue; /* not in this step's batch */
        rows[n] = row;
        n_new[n++] = prompt                    ? prompt + kve_rand_below(&r->rng, 2)
                     : kve_chance(&r->rng, 12) ? 1 + kve_rand_below(&r->rng, s->max_new)
                                               : 1;
    }
    for (uint32_t i = n; i > 1; i--) { /* the batch in a random row order */
        uint32_t j = kve_rand_below(&r->rng, i), t = rows[i - 1], u = n_new[i - 1];
        rows[i - 1] = rows[j];
        n_new[i - 1] = n_new[j];
        rows[j] = t;
        n_new[j] = u;
    }
    if (kve_sc_append(r, n, rows, n_new, kve_chance(&r->rng, 90)))
        return 1;
    if (n && spare < R && kve_chance(&r->rng, 5) && kve_sc_rebuild(r, rows[0], spare))
        return 1;
    return 0;
}

int kve_scenario_run(const kve_scenario *s, kve_context *ref, kve_context *sub, char *why,
                     size_t why_bytes)
{
    kve_sc_run r;
    memset(&r, 0, sizeof r);
    const kve_state_desc *d = &s->desc;
    r.s = s;
    r.rng = s->seed;
    r.why = why;
    r.why_bytes = why_bytes;
    r.tl = (d->schedule.flags & KVE_SHARED_LAYERS) ? 1 : d->n_layers;
    r.th = (d->schedule.flags & KVE_SHARED_HEADS) ? 1 : d->n_heads;
    r.tables = (size_t)r.tl * r.th;
    r.max_total = (size_t)d->max_seqs * (s->max_prompt + 1 + s->max_new);
    r.map_cap = (r.max_total > 4096 ? r.max_total : 4096) * r.tables;
    r.n_lists = r.tables * d->max_seqs;
    r.layer_bytes = (size_t)d->max_seqs * d->n_heads * d->max_slots * s->entry_bytes;
    r.cache_bytes = d->n_layers * r.layer_bytes + 1;
    for (int k = 0; k < 2; k++) {
        r.map_h[k] = (int64_t *)malloc(r.map_cap * 8);
        r.tab_h[k] = (int32_t *)malloc(r.tables * d->max_slots * 4);
        r.cache_h[k] = (unsigned char *)calloc(r.cache_bytes, 1);
    }
    r.src_h = (unsigned char *)malloc(r.max_total * d->n_heads * (s->entry_bytes + 1));
    r.row_h = (int32_t *)malloc(r.max_total * 4 + 4);
    r.active = (uint32_t *)calloc(d->max_seqs, sizeof *r.active);
    uint32_t *rows = (uint32_t *)malloc(d->max_seqs * 2 * sizeof *rows);
    int rc =
        !r.map_h[1] || !r.tab_h[1] || !r.cache_h[1] || !r.src_h || !r.row_h || !r.active || !rows;
    if (rc)
        snprintf(why, why_bytes, "out of host memory");
    for (int k = 0; k < 2 && !rc; k++)
        rc = kve_sc_open(&r, k, k ? sub : ref);
    for (uint32_t step = 0; step < s->steps && !rc; step++) {
        rc = kve_sc_step(&r, step, rows, rows + d->max_seqs);
        if (!rc && (step % 10 == 9 || step + 1 == s->steps))
            rc = kve_sc_check_rows(&r, step);
    }
    if (!rc && s->entry_bytes) {
        void *bufs[2] = {r.side[0].cache, r.side[1].cache}, *host[2] = {r.cache_h[0], r.cache_h[1]};
        rc = kve_sc_same(&r, "the K cache the mappings wrote", bufs, r.cache_bytes, host);
    }
    free(rows);
    kve_sc_close(&r);
    return rc;
}

int kve_scenarios_run(uint64_t seed, unsigned n, kve_scenario_kind kind, kve_context *ref,
                      kve_context *sub, const char *(*before)(unsigned i, void *arg), void *arg,
                      char *why, size_t why_bytes)
{
    uint64_t rng = seed;
    char diff[1024];
    for (unsigned i = 0; i < n; i++) {
        kve_scenario sc;
        kve_scenario_make(&sc, &rng, kind);
        const char *note = before ? before(i, arg) : "";
        if (kve_scenario_run(&sc, ref, sub, diff, sizeof diff)) {
            snprintf(why, why_bytes, "program %u, %s [%s]: %s", i, sc.label, note, diff);
            return 1;
        }
    }
    return 0;
}

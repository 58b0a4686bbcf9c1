/*
 * state_rebuild.c — kve_state_rebuild: a row's exact tables from (seed,
 * seq_id, prompt length, tokens appended, schedule) alone.
 *
 * The placement (docs/SPEC.md "Placement") depends on how the appends met
 * the rounds, so a rebuild walks the appends (steps): consecutive appends
 * that run no round place tokens exactly as one append of all of them does,
 * and are merged. Fresh keys change every round, so the merged appends are
 * replayed through the append path (kve_evict on the backend). Persistent
 * keys never change: the candidates kept after a round are the bottom-k by
 * (key, pos) of every token scored so far (docs/SPEC.md "Key"), so each
 * token is hashed once and each round's r evictions are the r largest of a
 * max-heap; the round's placement is the device's own code
 * (kve_round_table), run on the host.
 */
#include <stdlib.h>
#include <string.h>

#include "kve_error.h"
#include "kve_key.h"
#include "kve_util.h"
#include "state_body.h"
#include "kve_state_impl.h"

typedef struct {
    uint64_t key;
    uint32_t pos, slot;
} kve_cand;

static int kve_cand_less(kve_cand a, kve_cand b)
{
    return kve_key_pos_less(a.key, a.pos, b.key, b.pos);
}

static void kve_heap_push(kve_cand *h, size_t *n, kve_cand c)
{
    size_t i = (*n)++;
    for (; i && kve_cand_less(h[(i - 1) / 2], c); i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static kve_cand kve_heap_pop(kve_cand *h, size_t *n)
{
    kve_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && kve_cand_less(h[c], h[c + 1]))
            c++;
        if (!kve_cand_less(last, h[c]))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* The appends of a rebuild, merged where no round separates them. */
typedef struct {
    const kve_state *s;
    const uint32_t *steps; /* NULL: the prompt, then one token per append */
    uint32_t n_steps, next, n, P, C, nv;
    uint32_t pos; /* first position of the next merged append */
} kve_calls;

/* Size of append @p i of the history. */
static uint32_t kve_step_at(const kve_calls *c, uint32_t i)
{
    if (c->steps)
        return c->steps[i];
    uint32_t first = c->P < c->n ? c->P : c->n;
    return i == 0 ? first : 1;
}

static uint32_t kve_steps_count(const kve_calls *c)
{
    if (c->steps)
        return c->n_steps;
    uint32_t first = c->P < c->n ? c->P : c->n;
    return 1 + (c->n - first);
}

/* The next merged append: its size (0 at the end). An append that runs a
 * round starts a new one: its tokens placed before the round are its own
 * (they end in position order on top), not its predecessors'. */
static uint32_t kve_calls_next(kve_calls *c)
{
    uint32_t total = 0, count = kve_steps_count(c);
    while (c->next < count) {
        uint32_t k = kve_step_at(c, c->next);
        uint32_t rounds = kve_state_rounds_for(c->s, c->C, c->nv, k);
        if (rounds && total)
            break;
        c->next++;
        total += k;
        if (rounds) {
            uint32_t r = c->s->d.schedule.interval, beyond = k - (c->C - c->nv);
            c->nv = c->C - r + (beyond - (rounds - 1) * r);
        } else {
            c->nv += k;
        }
    }
    return total;
}

/* Host buffers of one direct rebuild. */
typedef struct {
    int32_t *tab;     /* [max_slots], one table at a time */
    int32_t *freed;   /* [r] */
    int32_t *slot_of; /* [n]: slot of each position, while it is held */
    kve_cand *heap;   /* [capacity] */
    uint32_t round;   /* of the table being rebuilt */
    uint64_t digest;  /* running digest of the row, all tables so far */
    int64_t *map;     /* [table_layers][n][table_heads] or NULL */
    uint32_t *steps;  /* the row's merged appends */
} kve_rebuild_bufs;

/* One persistent round of table @p t: evict the r largest of the heap
 * (after scoring every candidate up to the trigger token @p tm), then place
 * the round. Returns 1 when it did not free exactly r slots (a bug). */
static int kve_rebuild_round(const kve_state *s, const kve_state_row *r, size_t t, uint32_t tm,
                             uint32_t pos0, kve_rebuild_bufs *b, size_t *hn, uint32_t *next)
{
    const kve_schedule *sc = &s->d.schedule;
    uint32_t C = r->capacity, P = r->prompt, W = sc->window, rs = sc->interval;
    uint32_t layer = s->d.layer_offset + (uint32_t)(t / s->table_heads);
    uint32_t head = s->d.head_offset + (uint32_t)(t % s->table_heads);
    uint64_t seq_seed = kve_seq_seed(sc->seed, r->seq_id);
    uint64_t keep_max = sc->budget > (uint64_t)P + W ? sc->budget - P - W : 0;
    for (; *next + W < tm; ++*next) {
        kve_cand c = {kve_key(seq_seed, sc->flags, layer, head, *next, 0), *next, 0};
        kve_heap_push(b->heap, hn, c);
    }
    size_t keep = *hn < keep_max ? *hn : (size_t)keep_max;
    if (*hn - keep != rs)
        return 1;
    /* SPEC §11: each evicted token's element, at this round, weighted. */
    uint64_t dseed = kve_seq_seed(sc->seed ^ KVE_RUN_DIGEST_TWEAK, r->seq_id);
    uint32_t dflags = sc->flags & KVE_KEY_FLAGS & ~(uint32_t)KVE_PERSISTENT;
    for (uint32_t i = 0; i < rs; i++) {
        uint32_t p = kve_heap_pop(b->heap, hn).pos;
        b->freed[i] = b->slot_of[p];
        b->digest += s->digest_weight * kve_key(dseed, dflags, layer, head, p, b->round);
    }
    b->round++;
    qsort(b->freed, rs, sizeof *b->freed, kve_cmp_i32);
    if (kve_round_table(b->tab, b->freed, C, rs, (int32_t)pos0, NULL, NULL, 0))
        return 1;
    for (uint32_t i = 0; i < C - rs; i++)
        b->slot_of[b->tab[i]] = (int32_t)i;
    return 0;
}

/* One table through the row's merged appends (b->steps[0 .. n_calls)). */
static int kve_rebuild_table(const kve_state *s, const kve_state_row *r, size_t t, uint32_t n_calls,
                             kve_rebuild_bufs *b)
{
    b->round = 0;
    uint32_t C = r->capacity, nv = 0, pos = 0, next = r->prompt;
    size_t hn = 0;
    for (uint32_t i = 0; i < C; i++)
        b->tab[i] = -1;
    for (uint32_t k = 0; k < n_calls; k++) {
        uint32_t pos0 = pos, left = b->steps[k];
        while (left) {
            if (nv == C) {
                if (kve_rebuild_round(s, r, t, pos, pos0, b, &hn, &next))
                    return 1;
                nv = C - s->d.schedule.interval;
            }
            uint32_t cnt = left < C - nv ? left : C - nv;
            for (uint32_t i = 0; i < cnt; i++) {
                b->tab[nv + i] = (int32_t)(pos + i);
                b->slot_of[pos + i] = (int32_t)(nv + i);
            }
            nv += cnt;
            pos += cnt;
            left -= cnt;
        }
    }
    if (b->map)
        for (uint32_t i = 0; i < nv; i++)
            b->map[((t / s->table_heads) * pos + (size_t)b->tab[i]) * s->table_heads + t % s->table_heads] = i;
    return 0;
}

static kve_status kve_rebuild_direct(kve_state *s, uint32_t row, uint32_t n, uint32_t n_calls,
                                     kve_rebuild_bufs *b, int64_t *mapping)
{
    kve_state_row *r = &s->rows[row];
    size_t map_n = mapping ? (size_t)n * s->tables : 0;
    size_t C = r->capacity;
    int32_t *tables = (int32_t *)malloc(s->tables * C * 4);
    b->tab = NULL;
    b->freed = (int32_t *)malloc((size_t)s->d.schedule.interval * 4);
    b->slot_of = (int32_t *)malloc(((size_t)n + 1) * 4);
    b->heap = (kve_cand *)malloc((size_t)r->capacity * sizeof(kve_cand));
    b->map = map_n ? (int64_t *)malloc(map_n * 8) : NULL;
    b->digest = 0;
    kve_status st = KVE_OK;
    if (!tables || !b->freed || !b->slot_of || !b->heap || (map_n && !b->map))
        st = kve_error_set(KVE_ERR_NOMEM,
                           "cannot allocate host buffers to rebuild row %u (%zu bytes)", row,
                           s->tables * C * 4 + (size_t)s->d.schedule.interval * 4 +
                               ((size_t)n + 1) * 4 + (size_t)r->capacity * sizeof(kve_cand) +
                               map_n * 8);
    for (size_t i = 0; i < map_n && st == KVE_OK; i++)
        b->map[i] = -1;
    for (size_t t = 0; t < s->tables && st == KVE_OK; t++) {
        b->tab = tables + t * C;
        if (kve_rebuild_table(s, r, t, n_calls, b))
            st = kve_error_set(KVE_ERR_INTERNAL, "rebuild of row %u: a round did not free r slots",
                               row);
    }
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->slot_pos + r->off * s->tables, tables, s->tables * C * 4,
                      KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK && map_n)
        st = kve_copy(s->ctx, mapping, b->map, map_n * 8, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->run_digest + row, &b->digest, 8, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK) {
        r->n_tokens = n;
        r->round = n > r->capacity ? (uint32_t)((n - r->capacity + s->d.schedule.interval - 1) /
                                                s->d.schedule.interval)
                                   : 0;
    }
    free(tables);
    free(b->freed);
    free(b->slot_of);
    free(b->heap);
    free(b->map);
    return st;
}

/* Fresh keys: replay the merged appends, then the mapping of every position. */
static kve_status kve_rebuild_replay(kve_state *s, uint32_t row, uint32_t n, uint32_t n_calls,
                                     const uint32_t *calls, int64_t *mapping)
{
    for (uint32_t k = 0; k < n_calls; k++)
        KVE_TRY(kve_state_append_rows(s, 1, &row, &calls[k], NULL));
    if (!mapping)
        return KVE_OK;
    kve_step_buffers out = {mapping, n, NULL, NULL, 0, 0, NULL, 0, 0};
    s->jobs[0] = kve_state_job_make(s, KVE_JOB_FINAL, row, s->rows[row].n_valid, n, 0, 0);
    return kve_state_run(s, 1, s->tables, &out);
}

kve_status kve_state_rebuild(kve_state *s, uint32_t row, uint64_t seq_id, uint32_t prompt_len,
                             uint32_t n_tokens, const uint32_t *steps, uint32_t n_steps,
                             int64_t *slot_mapping, size_t mapping_len)
{
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(row >= s->d.max_seqs, KVE_ERR_RANGE, "row = %u: must be 0..%u", row,
                        s->d.max_seqs - 1);
    KVE_TRY(kve_state_mirror(s));
    uint32_t capacity;
    KVE_TRY(kve_state_check_prompt(s, prompt_len, &capacity));
    KVE_RETURN_ERROR_IF(n_tokens > KVE_I32_MAX, KVE_ERR_RANGE,
                        "n_tokens = %u: positions must stay below 2^31", n_tokens);
    KVE_RETURN_ERROR_IF(!slot_mapping && mapping_len, KVE_ERR_NULL,
                        "slot_mapping is NULL but mapping_len = %zu", mapping_len);
    KVE_RETURN_ERROR_IF(!steps && n_steps, KVE_ERR_NULL, "steps is NULL but n_steps = %u",
                        n_steps);
    uint64_t sum = 0;
    for (uint32_t i = 0; steps && i < n_steps; i++)
        sum += steps[i];
    KVE_RETURN_ERROR_IF(steps && sum != n_tokens, KVE_ERR_INVALID,
                        "steps sum to %llu tokens over %u appends, but n_tokens = %u",
                        (unsigned long long)sum, n_steps, n_tokens);
    KVE_RETURN_ERROR_IF((s->d.schedule.flags & KVE_SCORED) && n_tokens > capacity, KVE_ERR_INVALID,
                        "n_tokens = %u: scored rounds depend on the cache contents; a scored "
                        "row is rebuilt only before its first round (n_tokens <= capacity %u)",
                        n_tokens, capacity);
    uint64_t need = (uint64_t)n_tokens * s->tables;
    KVE_RETURN_ERROR_IF(slot_mapping && mapping_len < need, KVE_ERR_RANGE,
                        "mapping_len = %zu: %u tokens x %u table layers x %u table heads need "
                        "%llu",
                        mapping_len, n_tokens, s->table_layers, s->table_heads, (unsigned long long)need);
    KVE_TRY(kve_pool_check(s, row, prompt_len, capacity)); /* before the row is dropped */
    kve_calls c = {s, steps, n_steps, 0, n_tokens, prompt_len, capacity, 0, 0};
    uint32_t n_calls = 0, *calls = (uint32_t *)malloc(((size_t)kve_steps_count(&c) + 1) * 4);
    KVE_RETURN_ERROR_IF(!calls, KVE_ERR_NOMEM, "cannot allocate the appends of row %u", row);
    for (uint32_t k; (k = kve_calls_next(&c)) != 0;)
        calls[n_calls++] = k;
    s->rows[row].active = 0;
    kve_status st = kve_state_open_row(s, row, seq_id, prompt_len, capacity); /* from the pool */
    if (st == KVE_OK && (s->d.schedule.flags & KVE_PERSISTENT)) {
        kve_rebuild_bufs b;
        b.steps = calls;
        st = kve_rebuild_direct(s, row, n_tokens, n_calls, &b, slot_mapping);
        if (st == KVE_OK)
            s->rows[row].n_valid = c.nv;
    } else if (st == KVE_OK) {
        st = kve_rebuild_replay(s, row, n_tokens, n_calls, calls, slot_mapping);
    }
    free(calls);
    if (st != KVE_OK)
        kve_state_close_row(s, row);
    kve_status pushed = kve_state_push_rows(s);
    return st != KVE_OK ? st : pushed;
}

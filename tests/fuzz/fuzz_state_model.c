/*
 * fuzz_state_model.c — fuzz_state's independent model of docs/SPEC.md §5
 * (capacity, placement, rounds, the shared pool), whose evictions are
 * fuzz_ref.h's §3 and whose running digest is SPEC §11's.
 */
#include "fuzz_state.h"
#include "fuzz_ref.h"

uint32_t model_capacity(const model *m, uint32_t prompt)
{
    const kve_schedule *s = &m->desc.schedule;
    uint64_t c = (uint64_t)prompt + s->window;
    if (c < s->budget)
        c = s->budget;
    c += s->interval;
    return c > 0xffffffffu ? 0xffffffffu : (uint32_t)c;
}

/* PLACEMENT: the slot a new token takes in a table (SPEC §5: slot i while
 * the table fills, then the freed slots in ascending order). */
static uint32_t model_place(const model *m, const model_row *r, const int32_t *table)
{
    (void)m;
    if (r->n_tokens < r->capacity)
        return r->n_tokens;
    for (uint32_t t = 0; t < r->capacity; t++)
        if (table[t] < 0)
            return t;
    FZ_FAIL("model: no free slot");
}

/* One eviction round of a full row (SPEC §5 with §3 in every table). */
static void model_round(const model *m, model_row *r)
{
    const kve_schedule *s = &m->desc.schedule;
    for (uint32_t tb = 0; tb < m->tables; tb++) {
        ref_head h = {s->seed, r->seq_id, s->flags, m->desc.layer_offset + tb / m->th,
                      m->desc.head_offset + tb % m->th, r->round, r->prompt, s->window, s->budget,
                      NULL};
        uint8_t ev[MAX_SLOTS];
        uint32_t ne, nk;
        ref_evict_head(&h, r->table[tb], r->capacity, ev, &ne, &nk);
        FZ_CHECK(ne == s->interval, "model: a full table evicted %u, not r = %u", ne, s->interval);
        /* SPEC §11: each evicted token's element, weighted by the heads the table stands for */
        uint64_t w = (s->flags & KVE_SHARED_HEADS ? m->desc.n_heads : 1u) *
                     (uint64_t)(s->flags & KVE_SHARED_LAYERS ? m->desc.n_layers : 1u);
        for (uint32_t t = 0; t < r->capacity; t++)
            if (ev[t]) {
                r->digest += w * ref_key(s->seed ^ 0x6b76652d72756e31ull,
                                         s->flags & (KVE_SHARED_HEADS | KVE_SHARED_LAYERS),
                                         r->seq_id, h.layer, h.head, (uint32_t)r->table[tb][t],
                                         r->round);
                r->table[tb][t] = -1;
            }
    }
    r->round++;
    r->free_left = s->interval;
}

void model_append_one(const model *m, model_row *r)
{
    if (r->n_tokens >= r->capacity && r->free_left == 0)
        model_round(m, r);
    for (uint32_t tb = 0; tb < m->tables; tb++) {
        uint32_t slot = model_place(m, r, r->table[tb]);
        r->table[tb][slot] = (int32_t)r->n_tokens;
    }
    if (r->n_tokens >= r->capacity)
        r->free_left--;
    r->n_tokens++;
}

/* Rounds row @p r runs if it receives @p n tokens (model_append_one's rule,
 * counted without changing the row): kve_state_rounds_due's answer. */
uint32_t model_rounds_due(const model *m, const model_row *r, uint32_t n)
{
    uint32_t rounds = 0, n_tokens = r->n_tokens, free_left = r->free_left;
    for (uint32_t k = 0; k < n; k++) {
        if (n_tokens >= r->capacity && free_left == 0) {
            rounds++;
            free_left = m->desc.schedule.interval;
        }
        if (n_tokens >= r->capacity)
            free_left--;
        n_tokens++;
    }
    return rounds;
}

void model_open(const model *m, model_row *r, uint64_t seq_id, uint32_t prompt)
{
    memset(r, 0, sizeof *r);
    r->active = 1;
    r->seq_id = seq_id;
    r->prompt = prompt;
    r->capacity = model_capacity(m, prompt);
    r->one_by_one = 1;
    for (uint32_t tb = 0; tb < MAX_TABLES; tb++)
        for (uint32_t t = 0; t < MAX_SLOTS; t++)
            r->table[tb][t] = -1;
}

/* Pool slots per table free for row @p row: the pool less what the other
 * active rows hold (the library compacts the pool when no run suffices). */
uint64_t model_pool_free(const model *m, uint32_t row)
{
    uint64_t pool = m->desc.pool_slots ? m->desc.pool_slots
                                       : (uint64_t)m->desc.max_seqs * m->desc.max_slots;
    for (uint32_t r = 0; r < m->desc.max_seqs; r++)
        if (r != row && m->rows[r].active)
            pool -= m->rows[r].capacity;
    return pool;
}

int32_t find_pos(const int32_t *table, uint32_t n, int32_t pos)
{
    for (uint32_t t = 0; t < n; t++)
        if (table[t] == pos)
            return (int32_t)t;
    return -1;
}

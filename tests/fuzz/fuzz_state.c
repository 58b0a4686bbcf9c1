/*
 * fuzz_state — random programs of kve_state_admit / append / retire /
 * rebuild and the reads, checked after every call against an independent
 * model of docs/SPEC.md §5 (the schedule), whose evictions are fuzz_ref.h's
 * §3. Checked: every row's counts and rounds, each table's keep-set as a
 * set of positions, the prompt and the window present, slot_mapping, a
 * rebuild equal to the live row, and that a failed call changes nothing.
 * Where the tokens sit inside a table (placement) is checked apart, in
 * model_place / check_placement, the one piece a placement change touches;
 * and the move lists with the mapping, replayed onto the tables as they
 * were before the call, must give the tables after it (check_moves). The
 * pool is sometimes smaller than max_seqs x max_slots: admissions and
 * rebuilds it cannot hold must be refused.
 */
#include "fuzz_common.h"
#include "fuzz_ref.h"

#define MAX_ROWS 4u
#define MAX_TABLES 6u
#define MAX_SLOTS 64u

typedef struct {
    int active;
    uint64_t seq_id;
    uint32_t prompt, capacity, n_tokens, round, free_left;
    uint32_t call_pos0; /* first position of the last append (placement v1) */
    uint64_t digest;    /* the running digest (SPEC §11) */
    int one_by_one;     /* the history rebuild assumes without steps: linear fill, then
                         * one token per append once the tables are full */
    int32_t table[MAX_TABLES][MAX_SLOTS]; /* the model's slot tables */
} model_row;

typedef struct {
    kve_state_desc desc;
    uint32_t tl, th, tables;
    model_row rows[MAX_ROWS];
} model;

static uint32_t model_capacity(const model *m, uint32_t prompt)
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

static void model_append_one(const model *m, model_row *r)
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
static uint32_t model_rounds_due(const model *m, const model_row *r, uint32_t n)
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

static void model_open(const model *m, model_row *r, uint64_t seq_id, uint32_t prompt)
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
static uint64_t model_pool_free(const model *m, uint32_t row)
{
    uint64_t pool = m->desc.pool_slots ? m->desc.pool_slots
                                       : (uint64_t)m->desc.max_seqs * m->desc.max_slots;
    for (uint32_t r = 0; r < m->desc.max_seqs; r++)
        if (r != row && m->rows[r].active)
            pool -= m->rows[r].capacity;
    return pool;
}

static int32_t find_pos(const int32_t *table, uint32_t n, int32_t pos)
{
    for (uint32_t t = 0; t < n; t++)
        if (table[t] == pos)
            return (int32_t)t;
    return -1;
}

/* PLACEMENT (SPEC "Placement", v1): every table holds its valid tokens in
 * slots 0 .. n_valid-1 and nothing after; the last append's surviving
 * tokens are the top slots, in position order, above every older one. */
static void check_placement(const model *m, uint32_t row, const int32_t *lib, uint32_t n_valid)
{
    const model_row *r = &m->rows[row];
    for (uint32_t tb = 0; tb < m->tables; tb++) {
        const int32_t *t = lib + (size_t)tb * m->desc.max_slots;
        for (uint32_t i = 0; i < m->desc.max_slots; i++)
            FZ_CHECK((t[i] >= 0) == (i < n_valid), "row %u table %u slot %u: %d with n_valid %u",
                     row, tb, i, t[i], n_valid);
        int top = 1;
        for (uint32_t i = n_valid; i-- > 0;) {
            int mine = t[i] >= (int32_t)r->call_pos0;
            FZ_CHECK(!mine || top, "row %u table %u slot %u: the call's position %d below an "
                     "older token", row, tb, i, t[i]);
            FZ_CHECK(!mine || i + 1 == n_valid || t[i] < t[i + 1],
                     "row %u table %u slot %u: the call's tokens out of order", row, tb, i);
            top = top && mine;
        }
    }
}

/* Everything about one row that does not depend on placement. */
static void check_row(const model *m, kve_state *st, uint32_t row)
{
    const model_row *r = &m->rows[row];
    kve_state_seq_info info;
    FZ_CHECK(kve_state_get_seq(st, row, &info) == KVE_OK, "get_seq row %u", row);
    FZ_CHECK(info.active == (uint32_t)r->active, "row %u active %u", row, info.active);
    int32_t lib[MAX_TABLES * MAX_SLOTS];
    size_t len = (size_t)m->tables * m->desc.max_slots;
    kve_status s = kve_state_read_slots(st, row, lib, len);
    uint64_t digest = 0;
    kve_status sd = kve_state_read_digest(st, row, &digest);
    if (!r->active) {
        FZ_CHECK(s == KVE_ERR_INVALID, "read_slots of a free row: %s", kve_status_string(s));
        FZ_CHECK(sd == KVE_ERR_INVALID, "read_digest of a free row: %s", kve_status_string(sd));
        return;
    }
    FZ_CHECK(sd == KVE_OK && digest == r->digest, "row %u: running digest %llx, SPEC %llx", row,
             (unsigned long long)digest, (unsigned long long)r->digest);
    FZ_CHECK(s == KVE_OK, "read_slots row %u: %s", row, kve_status_string(s));
    const kve_schedule *sc = &m->desc.schedule;
    uint32_t used = 0; /* n_valid: the model's count (every table holds as many) */
    for (uint32_t t = 0; t < r->capacity; t++)
        used += r->table[0][t] >= 0;
    uint64_t rounds = r->n_tokens <= r->capacity
                          ? 0
                          : ((uint64_t)r->n_tokens - r->capacity + sc->interval - 1) / sc->interval;
    FZ_CHECK(info.seq_id == r->seq_id && info.prompt_len == r->prompt &&
                 info.capacity == r->capacity && info.n_tokens == r->n_tokens,
             "row %u: ids or counts differ", row);
    FZ_CHECK(info.round == r->round && r->round == rounds, "row %u: round %u, model %u, formula %llu",
             row, info.round, r->round, (unsigned long long)rounds);
    FZ_CHECK(info.n_used == used, "row %u: n_used %u, want %u", row, info.n_used, used);
    /* The layout's view is the same memory read_slots copies. */
    kve_state_layout lay;
    FZ_CHECK(kve_state_get_layout(st, &lay) == KVE_OK, "get_layout");
    for (uint32_t tb = 0; tb < m->tables; tb++)
        FZ_CHECK(!memcmp(lay.slot_pos + info.table_offset + (size_t)tb * r->capacity,
                         lib + (size_t)tb * m->desc.max_slots, r->capacity * 4),
                 "row %u table %u: the layout view differs", row, tb);
    for (uint32_t tb = 0; tb < m->tables; tb++) {
        const int32_t *t_lib = lib + (size_t)tb * m->desc.max_slots;
        uint32_t valid = 0, model_valid = 0;
        for (uint32_t t = 0; t < m->desc.max_slots; t++) {
            int32_t p = t_lib[t];
            FZ_CHECK(p >= -1 && p < (int32_t)r->n_tokens, "row %u table %u slot %u: %d", row, tb, t, p);
            if (p < 0)
                continue;
            valid++;
            FZ_CHECK(t < used, "row %u table %u: a token at slot %u >= n_used %u", row, tb, t, used);
            FZ_CHECK(find_pos(r->table[tb], r->capacity, p) >= 0,
                     "row %u table %u: position %d kept, the spec evicted it", row, tb, p);
            FZ_CHECK(find_pos(t_lib, t, p) < 0, "row %u table %u: position %d twice", row, tb, p);
        }
        for (uint32_t t = 0; t < r->capacity; t++)
            model_valid += r->table[tb][t] >= 0;
        FZ_CHECK(valid == model_valid && valid == info.n_valid,
                 "row %u table %u: %u valid, model %u, n_valid %u", row, tb, valid, model_valid,
                 info.n_valid);
        /* the prompt and the window: never evicted */
        uint32_t np = r->prompt < r->n_tokens ? r->prompt : r->n_tokens;
        uint32_t gen = r->n_tokens - np, win = sc->window < gen ? sc->window : gen;
        for (uint32_t p = 0; p < np; p++)
            FZ_CHECK(find_pos(t_lib, m->desc.max_slots, (int32_t)p) >= 0, "row %u: prompt %u lost", row, p);
        for (uint32_t k = 1; k <= win; k++)
            FZ_CHECK(find_pos(t_lib, m->desc.max_slots, (int32_t)(r->n_tokens - k)) >= 0,
                     "row %u: window position %u lost", row, r->n_tokens - k);
    }
    check_placement(m, row, lib, info.n_valid);
}

static void check_all(const model *m, kve_state *st)
{
    for (uint32_t row = 0; row < m->desc.max_seqs; row++)
        check_row(m, st, row);
}

/* The library's whole observable state, for "errors change nothing". */
typedef struct {
    kve_state_seq_info info[MAX_ROWS];
    int32_t slots[MAX_ROWS][MAX_TABLES * MAX_SLOTS];
} snapshot;

static void take(const model *m, kve_state *st, snapshot *s)
{
    memset(s, 0, sizeof *s);
    for (uint32_t row = 0; row < m->desc.max_seqs; row++) {
        kve_state_get_seq(st, row, &s->info[row]);
        if (s->info[row].active)
            kve_state_read_slots(st, row, s->slots[row], (size_t)m->tables * m->desc.max_slots);
    }
}

/* A mapping buffer of exactly @p need elements (or a short one). */
static int64_t *mapping_for(fz_bytes *in, size_t need, size_t *len, int *bad)
{
    uint8_t sel = fz_u8(in);
    if (sel < 64) {
        *len = 0;
        return NULL;
    }
    (void)bad; /* kve_step_buffers carries no length: the buffer is exactly the call's */
    *len = need;
    return (int64_t *)fz_alloc(*len * 8, 0x5a);
}

/* The descriptor: a schedule, counts and offsets, sometimes invalid. Whether
 * it is. */
static int decode_desc(fz_bytes *in, model *m)
{
    kve_state_desc *d = &m->desc;
    d->schedule.seed = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
    d->schedule.flags = fz_u8(in) & 7;
    d->schedule.budget = fz_below(in, 13);
    d->schedule.window = fz_below(in, 7);
    d->schedule.interval = 1 + fz_below(in, 5);
    d->max_seqs = 1 + fz_below(in, MAX_ROWS);
    d->n_layers = 1 + fz_below(in, 2);
    d->n_heads = 1 + fz_below(in, 3);
    d->layer_offset = fz_u8(in) < 250 ? fz_below(in, 40) : UINT32_MAX - fz_below(in, 2);
    d->head_offset = fz_u8(in) < 250 ? fz_below(in, 40) : UINT32_MAX - fz_below(in, 2);
    uint32_t min_slots = model_capacity(m, 0);
    d->max_slots = min_slots + fz_below(in, 24) - (fz_u8(in) >= 250);
    if (d->max_slots > MAX_SLOTS)
        d->max_slots = MAX_SLOTS;
    /* a shared pool: about max_slots to max_seqs x max_slots, rarely below max_slots */
    uint8_t pool_sel = fz_u8(in);
    d->pool_slots = pool_sel < 160 ? 0
                                   : (uint64_t)d->max_slots * (1 + fz_below(in, d->max_seqs)) +
                                         fz_below(in, d->max_slots) - (pool_sel >= 250);
    m->tl = d->schedule.flags & KVE_SHARED_LAYERS ? 1 : d->n_layers;
    m->th = d->schedule.flags & KVE_SHARED_HEADS ? 1 : d->n_heads;
    m->tables = m->tl * m->th;
    return d->layer_offset > UINT32_MAX - (d->n_layers - 1) ||
           d->head_offset > UINT32_MAX - (d->n_heads - 1) || d->max_slots < min_slots ||
           (d->pool_slots && d->pool_slots < d->max_slots);
}

static kve_status op_admit(fz_bytes *in, model *m, kve_state *st, uint32_t row, int *bad)
{
    const kve_state_desc *d = &m->desc;
    uint64_t seq_id = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
    uint32_t prompt = fz_u8(in) < 245 ? fz_below(in, 14) : fz_u32(in);
    *bad = row >= d->max_seqs || m->rows[row].active || model_capacity(m, prompt) > d->max_slots ||
           (uint64_t)prompt + d->schedule.window > 0x7fffffffu - 64 ||
           model_pool_free(m, row) < model_capacity(m, prompt);
    kve_status s = kve_state_admit(st, row, seq_id, prompt);
    if (s == KVE_OK && !*bad)
        model_open(m, &m->rows[row], seq_id, prompt);
    return s;
}

static kve_status op_retire(model *m, kve_state *st, uint32_t row, int *bad)
{
    *bad = row >= m->desc.max_seqs || !m->rows[row].active;
    kve_status s = kve_state_retire(st, row);
    if (s == KVE_OK && !*bad)
        m->rows[row].active = 0;
    return s;
}

/* An append's rows and counts (rows[0] is the step's row); its total
 * tokens, trimmed to what the model can follow. */
static uint64_t decode_append(fz_bytes *in, const model *m, uint32_t row, uint32_t n_rows,
                              uint32_t *rows, uint32_t *n_new, int *bad)
{
    const kve_state_desc *d = &m->desc;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        rows[i] = i ? fz_below(in, d->max_seqs) : row;
        /* rarely a count that passes position 2^31-1 (never one that
         * is valid and huge: the model appends token by token) */
        n_new[i] = fz_u8(in) < 250 ? fz_below(in, 2 * MAX_SLOTS) : 0x80000000u - fz_below(in, 2);
        if (rows[i] < d->max_seqs && n_new[i] >= 0x7fffffffu - 4 * MAX_SLOTS &&
            (uint64_t)m->rows[rows[i]].n_tokens + n_new[i] <= 0x7fffffffu)
            n_new[i] = 0x80000000u;
        total += n_new[i];
        int seen = 0;
        for (uint32_t j = 0; j < i; j++)
            seen |= rows[j] == rows[i];
        *bad |= rows[i] >= d->max_seqs || !m->rows[rows[i]].active || seen ||
                (uint64_t)m->rows[rows[i]].n_tokens + n_new[i] > 0x7fffffffu;
    }
    if (total > 4 * MAX_SLOTS) /* too long a program step to model: trim */
        for (uint32_t i = 0; i < n_rows; i++)
            n_new[i] = n_new[i] > 0x7ffffffeu ? n_new[i] : n_new[i] % 8;
    total = 0;
    for (uint32_t i = 0; i < n_rows; i++)
        total += n_new[i];
    return total;
}

/* kve_state_rounds_due (host bookkeeping) before the call: the model's
 * count for every row of a valid call; NULL arguments refused. */
static void check_rounds_due(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
                             const uint32_t *n_new, int bad)
{
    uint32_t due[MAX_ROWS + 1];
    kve_status sd = kve_state_rounds_due(st, n_rows, rows, n_new, due);
    for (uint32_t i = 0; !bad && i < n_rows; i++) {
        FZ_CHECK(sd == KVE_OK, "rounds_due: status %d on a valid call: %s", (int)sd,
                 kve_last_error());
        uint32_t want = model_rounds_due(m, &m->rows[rows[i]], n_new[i]);
        FZ_CHECK(due[i] == want, "rounds_due: row %u, %u tokens: %u rounds, the model %u",
                 rows[i], n_new[i], due[i], want);
    }
    FZ_CHECK(kve_state_rounds_due(st, n_rows, NULL, n_new, due) == KVE_ERR_NULL &&
                 kve_state_rounds_due(st, n_rows, rows, n_new, NULL) == KVE_ERR_NULL,
             "rounds_due: NULL rows or out_due accepted");
}

/* An accepted append, in the model; slot_mapping: where each token is now,
 * -1 if evicted since. */
static void apply_append(model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
                         const uint32_t *n_new, uint64_t max_tokens, const int64_t *map)
{
    size_t base = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        model_row *r = &m->rows[rows[i]];
        uint32_t first = r->n_tokens;
        for (uint32_t k = 0; k < n_new[i]; k++)
            model_append_one(m, r);
        if (n_new[i])
            r->call_pos0 = first;
        if (n_new[i] > 1 && (uint64_t)first + n_new[i] > r->capacity)
            r->one_by_one = 0;
        for (uint32_t k = 0; map && k < n_new[i]; k++)
            for (uint32_t tb = 0; tb < m->tables; tb++) {
                uint32_t tl = tb / m->th, th = tb % m->th;
                int64_t got = map[((size_t)tl * max_tokens + base + k) * m->th + th];
                int kept = find_pos(r->table[tb], r->capacity, (int32_t)(first + k)) >= 0;
                FZ_CHECK((got >= 0) == kept, "append: mapping of row %u position %u "
                         "table %u: %lld, the model %s it", rows[i], first + k, tb,
                         (long long)got, kept ? "keeps" : "evicted");
                int32_t lt[MAX_TABLES * MAX_SLOTS];
                FZ_CHECK(got < 0 || (got < (int64_t)r->capacity &&
                                     kve_state_read_slots(st, rows[i], lt, m->tables *
                                         m->desc.max_slots) == KVE_OK &&
                                     lt[tb * m->desc.max_slots + got] == (int32_t)(first + k)),
                         "append: mapping of row %u position %u table %u: slot %lld "
                         "does not hold it", rows[i], first + k, tb, (long long)got);
            }
        base += n_new[i];
    }
}

/* The step buffers' shape beyond the mapping: move lists or not, their
 * rows and pairs (sometimes one pair short of what the call's rounds need),
 * and the mapping's tokens per layer (the call's, a few more, or one short). */
typedef struct {
    int32_t *moves;
    uint32_t *n_moves, max_rows, max_moves, max_tokens;
    uint32_t need;    /* pairs a list needs: r per round of the call's busiest row */
    int short_tokens; /* max_tokens one below the call's tokens */
    int null_out;     /* no buffers at all: out = NULL when there is no mapping either */
} step_shape;

static void decode_step_shape(fz_bytes *in, const model *m, uint32_t n_rows, const uint32_t *rows,
                              const uint32_t *n_new, uint64_t total, step_shape *sh, int *bad)
{
    uint8_t sel = fz_u8(in);
    static const int pads[4] = {0, 1, 3, -1};
    int pad = pads[sel >> 6];
    if (pad < 0 && total == 0)
        pad = 0;
    sh->max_tokens = (uint32_t)(total + (uint64_t)(int64_t)pad);
    sh->short_tokens = pad < 0; /* refused only with a mapping */
    sh->moves = NULL;
    sh->n_moves = NULL;
    sh->max_rows = sh->max_moves = sh->need = 0;
    sh->null_out = sel >> 1 & 1;
    if (!(sel & 1))
        return;
    sh->null_out = 0;
    uint32_t need = 0; /* r per round of the call's busiest row */
    for (uint32_t i = 0; !*bad && i < n_rows; i++) {
        uint32_t k = model_rounds_due(m, &m->rows[rows[i]], n_new[i]) * m->desc.schedule.interval;
        need = k > need ? k : need;
    }
    sh->need = need;
    sh->max_rows = n_rows + (sel >> 1 & 1);
    sh->max_moves = need + (sel >> 2 & 1);
    if ((sel >> 3 & 7) == 0 && need) { /* one short */
        sh->max_moves = need - 1;
        *bad = 1;
    }
    size_t lists = (size_t)m->tl * sh->max_rows * m->th;
    sh->moves = (int32_t *)fz_alloc(lists * sh->max_moves * 8, 0x3c);
    sh->n_moves = (uint32_t *)fz_alloc(lists * 4, 0x3c);
}

/* The engine's view of an accepted append: each row's tables as they were
 * (before), its move lists run from them, then its tokens written at their
 * mapping; that must be the library's tables now, slot for slot below
 * n_valid. And the lists keep their contract: at most r per round, every
 * move down to a lower slot, sources and destinations distinct and apart. */
static void check_moves(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
                        const uint32_t *n_new, const int32_t (*before)[MAX_TABLES * MAX_SLOTS],
                        const step_shape *sh, const int64_t *map)
{
    size_t n = (size_t)m->tables * m->desc.max_slots;
    uint32_t base = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        const model_row *r = &m->rows[rows[i]];
        int32_t now[MAX_TABLES * MAX_SLOTS];
        kve_state_seq_info info;
        FZ_CHECK(kve_state_read_slots(st, rows[i], now, n) == KVE_OK &&
                     kve_state_get_seq(st, rows[i], &info) == KVE_OK,
                 "moves: read row %u", rows[i]);
        uint32_t first = r->n_tokens - n_new[i];
        for (uint32_t tb = 0; tb < m->tables; tb++) {
            uint32_t tl = tb / m->th, th = tb % m->th;
            size_t list = ((size_t)tl * sh->max_rows + i) * m->th + th;
            uint32_t nm = sh->n_moves[list];
            FZ_CHECK(nm <= sh->max_moves, "moves: row %u table %u: %u pairs, max_moves %u", rows[i],
                     tb, nm, sh->max_moves);
            const int32_t *old = before[i] + (size_t)tb * m->desc.max_slots;
            int32_t cache[MAX_SLOTS];
            uint8_t used[MAX_SLOTS] = {0};
            memcpy(cache, old, sizeof cache);
            for (uint32_t k = 0; k < nm; k++) {
                const int32_t *pair = sh->moves + 2 * (list * sh->max_moves + k);
                FZ_CHECK(pair[1] >= 0 && pair[1] < pair[0] && (uint32_t)pair[0] < r->capacity,
                         "moves: row %u table %u pair %u: %d -> %d", rows[i], tb, k, pair[0], pair[1]);
                FZ_CHECK(!(used[pair[0]] & 1) && !(used[pair[1]] & 2) && !(used[pair[0]] & 2) &&
                             !(used[pair[1]] & 1),
                         "moves: row %u table %u: slot %d or %d in two pairs", rows[i], tb, pair[0],
                         pair[1]);
                used[pair[0]] |= 1;
                used[pair[1]] |= 2;
                FZ_CHECK(old[pair[0]] >= 0, "moves: row %u table %u: moved from empty slot %d",
                         rows[i], tb, pair[0]);
                cache[pair[1]] = old[pair[0]];
            }
            for (uint32_t k = 0; k < n_new[i]; k++) {
                int64_t slot = map[((size_t)tl * sh->max_tokens + base + k) * m->th + th];
                if (slot >= 0)
                    cache[slot] = (int32_t)(first + k);
            }
            const int32_t *lib = now + (size_t)tb * m->desc.max_slots;
            for (uint32_t t = 0; t < info.n_valid; t++)
                FZ_CHECK(cache[t] == lib[t], "moves: row %u table %u slot %u: the engine's cache "
                         "holds %d, the table %d", rows[i], tb, t, cache[t], lib[t]);
        }
        base += n_new[i];
    }
}

static kve_status op_append(fz_bytes *in, model *m, kve_state *st, uint32_t row, int *bad)
{
    uint32_t rows[MAX_ROWS + 1], n_new[MAX_ROWS + 1], n_rows = 1 + fz_below(in, m->desc.max_seqs);
    uint64_t total = decode_append(in, m, row, n_rows, rows, n_new, bad);
    step_shape sh;
    decode_step_shape(in, m, n_rows, rows, n_new, total, &sh, bad);
    size_t len;
    int64_t *map = mapping_for(in, *bad ? 1 : (size_t)sh.max_tokens * m->tables, &len, bad);
    *bad |= map && sh.short_tokens;
    kve_step_buffers sb = {.slot_mapping = map, .max_tokens = sh.max_tokens, .moves = sh.moves,
                           .n_moves = sh.n_moves, .max_rows = sh.max_rows, .max_moves = sh.max_moves};
    uint32_t most = 0, bound = 0; /* kve_state_max_moves of the largest n_new covers the call */
    for (uint32_t i = 0; i < n_rows; i++)
        most = n_new[i] > most ? n_new[i] : most;
    FZ_CHECK(kve_state_max_moves(st, most, &bound) == KVE_OK && (*bad || !sh.moves || bound >= sh.need),
             "max_moves(%u) = %u, below the %u pairs the call needs", most, bound, sh.need);
    static int32_t before[MAX_ROWS + 1][MAX_TABLES * MAX_SLOTS];
    for (uint32_t i = 0; !*bad && i < n_rows; i++)
        FZ_CHECK(kve_state_read_slots(st, rows[i], before[i], (size_t)m->tables * m->desc.max_slots) ==
                     KVE_OK,
                 "read row %u", rows[i]);
    check_rounds_due(m, st, n_rows, rows, n_new, *bad);
    kve_status s = kve_state_append(st, n_rows, rows, n_new, map || sh.moves || !sh.null_out ? &sb : NULL);
    if (s == KVE_OK && !*bad) {
        apply_append(m, st, n_rows, rows, n_new, sh.max_tokens, map);
        if (map && sh.moves)
            check_moves(m, st, n_rows, rows, n_new, (const int32_t(*)[MAX_TABLES * MAX_SLOTS])before,
                        &sh, map);
    }
    free(map);
    free(sh.moves);
    free(sh.n_moves);
    return s;
}

/* An accepted rebuild of @p row, in the model; its slot_mapping; a rebuild
 * from a live row's ids (@p from) is that row, slot for slot, when the row
 * took the default history (prompt, then one by one). */
static void apply_rebuild(model *m, kve_state *st, uint32_t row, uint32_t from,
                          const model_row *src, uint64_t seq_id, uint32_t prompt,
                          uint32_t n_tokens, const int64_t *map)
{
    model_open(m, &m->rows[row], seq_id, prompt);
    for (uint32_t k = 0; k < n_tokens; k++)
        model_append_one(m, &m->rows[row]);
    /* no steps given: the prompt in one append, then one token each */
    m->rows[row].call_pos0 = n_tokens > prompt ? n_tokens - 1 : 0;
    const model_row *r = &m->rows[row];
    for (uint32_t p = 0; map && p < n_tokens; p++)
        for (uint32_t tb = 0; tb < m->tables; tb++) {
            int64_t got = map[((size_t)(tb / m->th) * n_tokens + p) * m->th + tb % m->th];
            FZ_CHECK((got >= 0) == (find_pos(r->table[tb], r->capacity, (int32_t)p) >= 0),
                     "rebuild: mapping of position %u table %u: %lld", p, tb, (long long)got);
        }
    if (src->active && seq_id == src->seq_id && prompt == src->prompt &&
        n_tokens == src->n_tokens && from != row && src->one_by_one) {
        int32_t a[MAX_TABLES * MAX_SLOTS], b[MAX_TABLES * MAX_SLOTS];
        size_t n = (size_t)m->tables * m->desc.max_slots;
        FZ_CHECK(kve_state_read_slots(st, row, a, n) == KVE_OK &&
                     kve_state_read_slots(st, from, b, n) == KVE_OK && !memcmp(a, b, n * 4),
                 "rebuild of row %u's ids into row %u differs from it", from, row);
    }
}

/* Rebuild: from another row's ids, or fresh ones. */
static kve_status op_rebuild(fz_bytes *in, model *m, kve_state *st, uint32_t row, int *bad)
{
    const kve_state_desc *d = &m->desc;
    uint32_t from = fz_below(in, d->max_seqs);
    model_row src = m->rows[from];
    uint64_t seq_id = src.seq_id;
    uint32_t prompt = src.prompt, n_tokens = src.n_tokens;
    if (!src.active || (fz_u8(in) & 1)) {
        seq_id = fz_u8(in);
        prompt = fz_u8(in) < 250 ? fz_below(in, 14) : fz_u32(in);
        n_tokens = fz_u8(in) < 250 ? fz_below(in, 3 * MAX_SLOTS) : 0x80000000u;
    }
    *bad = row >= d->max_seqs || model_capacity(m, prompt) > d->max_slots ||
           (uint64_t)prompt + d->schedule.window > 0x7fffffffu - 64 || n_tokens > 0x7fffffffu ||
           model_pool_free(m, row) < model_capacity(m, prompt);
    size_t len;
    int64_t *map = mapping_for(in, *bad ? 1 : (size_t)n_tokens * m->tables, &len, bad);
    kve_status s = kve_state_rebuild(st, row, seq_id, prompt, n_tokens, NULL, 0, map, len);
    if (s == KVE_OK && !*bad)
        apply_rebuild(m, st, row, from, &src, seq_id, prompt, n_tokens, map);
    free(map);
    return s;
}

/* Calls that must fail: NULL arguments, short reads. */
static kve_status op_must_fail(fz_bytes *in, const model *m, kve_state *st, uint32_t row, int *bad)
{
    *bad = 1;
    uint32_t one = 1;
    switch (fz_u8(in) % 4) {
    case 0: return kve_state_append(st, 1, NULL, &one, NULL);
    case 1: return kve_state_append(st, 1, &row, NULL, NULL);
    case 2: {
        kve_step_buffers none = {.max_tokens = 1};
        int32_t mv[2];
        none.moves = mv; /* moves without n_moves */
        return kve_state_append(st, 1, &row, &one, &none);
    }
    default: {
        int ok_row = row < m->desc.max_seqs;
        size_t n = (size_t)m->tables * m->desc.max_slots;
        int32_t small[1];
        kve_status s = ok_row && m->rows[row].active
                           ? kve_state_read_slots(st, row, small, n - 1 + (n == 1))
                           : kve_state_retire(st, row);
        if (ok_row && m->rows[row].active && n == 1)
            *bad = 0; /* one element is enough there */
        return s;
    }
    }
}

/* One step of the program: an operation on a row (sometimes out of range),
 * its verdict, and after a failure the state unchanged. */
static void run_step(fz_bytes *in, model *m, kve_state *st)
{
    const kve_state_desc *d = &m->desc;
    uint8_t op = fz_u8(in) % 8;
    uint32_t row = fz_u8(in) < 245 ? fz_below(in, d->max_seqs) : d->max_seqs + fz_u8(in) % 3;
    int bad = 0;
    snapshot before;
    take(m, st, &before);
    kve_status s;
    if (op == 0 || op == 1)
        s = op_admit(in, m, st, row, &bad);
    else if (op == 2)
        s = op_retire(m, st, row, &bad);
    else if (op <= 5)
        s = op_append(in, m, st, row, &bad);
    else if (op == 6)
        s = op_rebuild(in, m, st, row, &bad);
    else
        s = op_must_fail(in, m, st, row, &bad);
    if (bad) {
        FZ_CHECK(s != KVE_OK, "op %u: an invalid call was accepted", op);
        FZ_CHECK_ERROR_MESSAGE(s);
    } else
        FZ_CHECK(s == KVE_OK, "op %u: a valid call failed: %s", op, kve_status_string(s));
    if (s != KVE_OK) {
        snapshot after;
        take(m, st, &after);
        FZ_CHECK(!memcmp(&before, &after, sizeof before), "op %u: a failed call (%s) changed the state",
                 op, kve_status_string(s));
    }
    check_all(m, st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    static model m;
    memset(&m, 0, sizeof m);
    kve_state_desc *d = &m.desc;
    int bad_desc = decode_desc(&in, &m);
    size_t mem_bytes = 0;
    void *mem = NULL;
    kve_state *st = NULL;
    kve_status s = kve_state_memory_size(ctx, d, &mem_bytes);
    if (s == KVE_OK && (fz_u8(&in) & 1))
        mem = fz_alloc(mem_bytes, 0x77); /* exactly the bytes asked for */
    s = kve_state_create(ctx, d, mem, mem ? mem_bytes : 0, &st);
    if (bad_desc) {
        FZ_CHECK(s != KVE_OK, "an invalid state desc was accepted");
        FZ_CHECK_ERROR_MESSAGE(s);
        free(mem);
        return 0;
    }
    FZ_CHECK(s == KVE_OK, "a valid state desc was rejected: %s", kve_status_string(s));
    kve_state_layout lay;
    FZ_CHECK(kve_state_get_layout(st, &lay) == KVE_OK && lay.table_layers == m.tl &&
                 lay.table_heads == m.th && lay.max_slots == d->max_slots &&
                 lay.max_seqs == d->max_seqs,
             "layout");
    check_all(&m, st);
    for (int step = 0; step < 48 && in.n; step++)
        run_step(&in, &m, st);
    kve_state_destroy(st);
    free(mem);
    return 0;
}

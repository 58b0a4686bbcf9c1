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
 *
 * The program's decoding and its calls are here; the model in
 * fuzz_state_model.c, the checks of every row in fuzz_state_check.c.
 */
#include "fuzz_state.h"

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
    d->max_draft = (uint32_t)(d->schedule.seed % 4); /* draft slots (0: drafts refused) */
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

/* Issue 47 item 1, the header's words: a planned call the planner refuses
 * (its data: rows, activity, repeats, n_new, positions, max_tokens) maps
 * its tokens and the shape's padding, every entry up to max_tokens of
 * max(its tokens, n_rows x @p max_new), to -1 in every table, and empties
 * the move lists of its @p n_rows call rows, on the CPU as on a device. */
static void check_refused_outputs(const model *m, const char *what, uint32_t n_rows,
                                  uint64_t total, uint32_t max_new, const int64_t *map,
                                  uint32_t max_tokens, const uint32_t *n_moves,
                                  uint32_t max_rows)
{
    uint64_t shape = (uint64_t)n_rows * max_new, end = total > shape ? total : shape;
    end = end < max_tokens ? end : max_tokens;
    for (uint32_t tb = 0; map && tb < m->tables; tb++)
        for (uint64_t t = 0; t < end; t++) {
            int64_t got = map[((size_t)(tb / m->th) * max_tokens + t) * m->th + tb % m->th];
            FZ_CHECK(got == -1, "%s refused (%s): token %llu of table %u maps to %lld, not -1",
                     what, kve_last_error(), (unsigned long long)t, tb, (long long)got);
        }
    for (uint32_t l = 0; n_moves && l < m->tl; l++)
        for (uint32_t i = 0; i < n_rows * m->th; i++)
            FZ_CHECK(n_moves[(size_t)l * max_rows * m->th + i] == 0,
                     "%s refused: move list %u of layer %u holds %u pairs, not 0", what, i, l,
                     n_moves[(size_t)l * max_rows * m->th + i]);
}

/* Whether the planner refuses a planned append (the header: rows with
 * tokens active, distinct, n_new <= max_new, positions within 2^31-1, the
 * call's tokens within max_tokens when there is a mapping; padding rows
 * not read). */
static int planner_refuses(const model *m, uint32_t n_rows, const uint32_t *rows,
                           const uint32_t *n_new, uint32_t max_new, const int64_t *map,
                           uint32_t max_tokens)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        if (!n_new[i])
            continue;
        if (rows[i] >= m->desc.max_seqs || !m->rows[rows[i]].active || n_new[i] > max_new ||
            (uint64_t)m->rows[rows[i]].n_tokens + n_new[i] > 0x7fffffffu)
            return 1;
        for (uint32_t j = 0; j < i; j++)
            if (n_new[j] && rows[j] == rows[i])
                return 1;
        total += n_new[i];
    }
    return map && total > max_tokens;
}

/* Issue 60 item 2: a valid call's move lists given max_rows and max_moves
 * (each within its bound) whose span passes SIZE_MAX bytes (by __int128):
 * KVE_ERR_OVERFLOW naming out->max_moves, nothing written (n_moves keeps
 * its fill) and nothing changed (the model is checked against the state
 * afterwards). @p max_new: the planned append's, 0: kve_state_append. */
static void huge_move_lists(fz_bytes *in, const model *m, kve_state *st, uint32_t n_rows,
                            const uint32_t *rows, const uint32_t *n_new,
                            const kve_step_buffers *sb, uint32_t max_new)
{
    kve_step_buffers h = *sb;
    h.max_rows = fz_u32(in) | 1u << (20 + fz_below(in, 12));
    h.max_rows = h.max_rows < n_rows ? n_rows : h.max_rows;
    h.max_moves = (fz_u32(in) | 1u << (20 + fz_below(in, 12))) + sb->max_moves;
    h.max_moves = h.max_moves < sb->max_moves ? UINT32_MAX : h.max_moves;
    unsigned __int128 bytes = (unsigned __int128)m->tables * h.max_rows * h.max_moves * 8;
    if (bytes <= SIZE_MAX)
        return; /* it fits: the call would write there */
    kve_status s = max_new ? kve_state_append_device(st, n_rows, rows, n_new, max_new, &h)
                           : kve_state_append(st, n_rows, rows, n_new, &h);
    FZ_CHECK(s == KVE_ERR_OVERFLOW && strstr(kve_last_error(), "out->max_moves"),
             "move lists of %llu tables x max_rows %u x max_moves %u pairs: %s %s",
             (unsigned long long)m->tables, h.max_rows, h.max_moves, kve_status_string(s),
             kve_last_error());
    size_t lists = (size_t)m->tl * sb->max_rows * m->th;
    for (size_t k = 0; k < lists; k++)
        FZ_CHECK(sb->n_moves[k] == 0x3c3c3c3cu, "a refused append wrote n_moves[%zu]", k);
}

static kve_status op_append(fz_bytes *in, model *m, kve_state *st, uint32_t row, int *bad)
{
    uint32_t rows[MAX_ROWS + 1], n_new[MAX_ROWS + 1], n_rows = 1 + fz_below(in, m->desc.max_seqs);
    uint64_t total = decode_append(in, m, row, n_rows, rows, n_new, bad);
    step_shape sh;
    decode_step_shape(in, m, n_rows, rows, n_new, total, &sh, bad);
    size_t len;
    /* the whole mapping also for a refused call of a modest shape: a
     * planned one writes its -1s there */
    int small = sh.max_tokens <= 8 * MAX_SLOTS;
    int64_t *map = mapping_for(in, *bad && !small ? 1 : (size_t)sh.max_tokens * m->tables, &len,
                               bad);
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
    /* A valid call, now and then planned on the backend (kve_state_append_device:
     * host memory is the CPU's backend memory) with max_new >= its largest count,
     * when its move lists hold kve_state_max_moves(max_new): the same append.
     * Without move lists max_new is bounded by nothing the state knows: now
     * and then 2^31-1, whose waves, were the CPU's work to follow max_new,
     * would take minutes (issue 47 item 3: libFuzzer's -timeout finds it).
     * An invalid call of a modest shape is planned too, with max_new its
     * largest count (or one less: too many tokens), when only the planner
     * refuses it: it writes the outputs a device writes (item 1). */
    uint32_t max_new = most + (fz_u8(in) & 1), shape_moves = 0;
    uint8_t how = fz_u8(in);
    if (*bad)
        max_new = most > 0x7fffffffu ? 0x7fffffffu : most - (most && (how & 0x20));
    else if ((how & 0x1c) == 0x1c && !sh.moves)
        max_new = 0x7fffffffu;
    int planned = (how & 3) == 0 &&
                  (!*bad || (small && map &&
                             planner_refuses(m, n_rows, rows, n_new, max_new, map, sh.max_tokens))) &&
                  kve_state_max_moves(st, max_new, &shape_moves) == KVE_OK &&
                  (!sh.moves || sh.max_moves >= shape_moves);
    const kve_step_buffers *out = map || sh.moves || !sh.null_out ? &sb : NULL;
    if (!*bad && sh.moves && sh.n_moves && (how & 0xc0) == 0xc0)
        huge_move_lists(in, m, st, n_rows, rows, n_new, &sb, planned ? max_new : 0);
    kve_status s = planned ? kve_state_append_device(st, n_rows, rows, n_new, max_new, out)
                           : kve_state_append(st, n_rows, rows, n_new, out);
    FZ_CHECK(!planned || *bad || s == KVE_OK, "append_device refused a valid call: %s",
             kve_last_error());
    if (planned && *bad && s != KVE_OK)
        check_refused_outputs(m, "append_device", n_rows, total, max_new, map, sh.max_tokens,
                              sh.n_moves, sh.max_rows);
    if (planned && !*bad && map) /* the shape's entries past the tokens: -1 */
        for (uint32_t tb = 0; tb < m->tables; tb++)
            for (uint64_t t = total; t < sh.max_tokens && t < (uint64_t)n_rows * max_new; t++)
                FZ_CHECK(map[((size_t)(tb / m->th) * sh.max_tokens + t) * m->th + tb % m->th] ==
                             -1,
                         "append_device: padding entry %llu of table %u is not -1",
                         (unsigned long long)t, tb);
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

/* A speculative step's drafts (kve_state_draft): tentative, so the state
 * does not change; token k of a row maps to its draft slot capacity + k in
 * every table, and the call's move lists are emptied. */
static kve_status op_draft(fz_bytes *in, const model *m, kve_state *st, uint32_t row, int *bad)
{
    const kve_state_desc *d = &m->desc;
    uint32_t rows[MAX_ROWS + 1], n_draft[MAX_ROWS + 1], n_rows = 1 + fz_below(in, d->max_seqs);
    uint32_t max_draft = fz_u8(in) < 230 ? d->max_draft : fz_below(in, 6);
    uint64_t total = 0;
    *bad = d->max_draft == 0 || max_draft > d->max_draft;
    for (uint32_t i = 0; i < n_rows; i++) {
        rows[i] = i ? fz_below(in, d->max_seqs + 1) : row;
        n_draft[i] = fz_below(in, max_draft + 2);
        total += n_draft[i];
        if (!n_draft[i])
            continue; /* padding: its row is not read */
        int seen = 0;
        for (uint32_t j = 0; j < i; j++)
            seen |= rows[j] == rows[i] && n_draft[j];
        *bad |= rows[i] >= d->max_seqs || !m->rows[rows[i]].active || seen ||
                n_draft[i] > max_draft;
    }
    uint8_t sel = fz_u8(in);
    size_t lists = (size_t)m->tl * n_rows * m->th;
    /* max_tokens: the drafts and one more, the whole shape and one more, or
     * (with a mapping: refused) one short */
    uint64_t shape = (uint64_t)n_rows * max_draft, max_tokens = total + 1;
    if ((sel & 8) && shape + 1 > max_tokens)
        max_tokens = shape + 1;
    if ((sel & 0x30) == 0x30 && total)
        max_tokens = total - 1;
    int64_t *map = sel & 1 ? (int64_t *)fz_alloc((max_tokens + 1) * m->tables * 8, 0x5a) : NULL;
    *bad |= map && max_tokens < total;
    int32_t *moves = sel & 2 ? (int32_t *)fz_alloc(lists * 2 * 8, 0x3c) : NULL;
    uint32_t *n_moves = moves ? (uint32_t *)fz_alloc(lists * 4, 0x3c) : NULL;
    kve_step_buffers sb = {.slot_mapping = map, .max_tokens = (uint32_t)max_tokens, .moves = moves,
                           .n_moves = n_moves, .max_rows = n_rows, .max_moves = 2};
    kve_status s = kve_state_draft(st, n_rows, rows, n_draft, max_draft,
                                   map || moves || (sel & 4) ? &sb : NULL);
    /* refused by the planner (the host's checks passed): a device's outputs */
    if (s != KVE_OK && d->max_draft && max_draft <= d->max_draft)
        check_refused_outputs(m, "draft", n_rows, total, max_draft, map, sb.max_tokens, n_moves,
                              n_rows);
    /* accepted: the shape's entries no draft takes map to -1 (issue 46 item 2) */
    for (uint64_t t = total; s == KVE_OK && map && t < shape && t < max_tokens; t++)
        for (uint32_t tb = 0; tb < m->tables; tb++)
            FZ_CHECK(map[((size_t)(tb / m->th) * sb.max_tokens + t) * m->th + tb % m->th] == -1,
                     "draft: padding entry %llu of table %u is not -1", (unsigned long long)t, tb);
    if (s == KVE_OK && !*bad) {
        uint64_t base = 0;
        for (uint32_t i = 0; i < n_rows; i++) {
            for (uint32_t k = 0; map && k < n_draft[i]; k++)
                for (uint32_t tb = 0; tb < m->tables; tb++) {
                    int64_t got = map[((size_t)(tb / m->th) * sb.max_tokens + base + k) * m->th +
                                      tb % m->th];
                    FZ_CHECK(got == (int64_t)m->rows[rows[i]].capacity + k,
                             "draft: row %u token %u table %u at slot %lld, not capacity %u + %u",
                             rows[i], k, tb, (long long)got, m->rows[rows[i]].capacity, k);
                }
            base += n_draft[i];
        }
        for (size_t l = 0; moves && l < lists; l++)
            FZ_CHECK(n_moves[l] == 0, "draft: move list %zu holds %u pairs", l, n_moves[l]);
    }
    free(map);
    free(moves);
    free(n_moves);
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
    uint8_t op = fz_u8(in) % 9;
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
    else if (op == 7)
        s = op_must_fail(in, m, st, row, &bad);
    else
        s = op_draft(in, m, st, row, &bad);
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
    kve_state *st = NULL;
    kve_status s = kve_state_memory_size(ctx, d, &mem_bytes);
    /* Caller memory: none, 256-byte aligned, or (high nibble 0xA, rare in
     * the older corpus) misaligned by 1..218 bytes, which the header says is
     * refused; exactly the bytes asked for. */
    uint8_t how = s == KVE_OK ? fz_u8(&in) : 0;
    size_t skew = (how >> 4) == 0xA ? 1 + (size_t)((how >> 1) & 7) * 31 : 0;
    char *block = how & 1 ? fz_alloc_aligned(mem_bytes + skew, 0x77) : NULL;
    void *mem = block ? block + skew : NULL;
    s = kve_state_create(ctx, d, mem, mem ? mem_bytes : 0, &st);
    if (bad_desc || (mem && skew)) {
        FZ_CHECK(s != KVE_OK, "an invalid state desc or misaligned memory was accepted");
        FZ_CHECK_ERROR_MESSAGE(s);
        FZ_CHECK(bad_desc || (s == KVE_ERR_INVALID && strstr(kve_last_error(), "256-byte aligned")),
                 "misaligned memory: %s (%s)", kve_status_string(s), kve_last_error());
        free(block);
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
    free(block);
    return 0;
}

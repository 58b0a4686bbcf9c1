/*
 * fuzz_state_check.c — fuzz_state's checks of the library against the
 * model after every call: each row's counts, keep-sets, prompt and window,
 * digest and placement; kve_state_rounds_due; and an append's move lists
 * replayed onto the tables as they were.
 */
#include "fuzz_state.h"

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

void check_all(const model *m, kve_state *st)
{
    for (uint32_t row = 0; row < m->desc.max_seqs; row++)
        check_row(m, st, row);
}

/* kve_state_rounds_due (host bookkeeping) before the call: the model's
 * count for every row of a valid call; NULL arguments refused. */
void check_rounds_due(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
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

/* The engine's view of an accepted append: each row's tables as they were
 * (before), its move lists run from them, then its tokens written at their
 * mapping; that must be the library's tables now, slot for slot below
 * n_valid. And the lists keep their contract: at most r per round, every
 * move down to a lower slot, sources and destinations distinct and apart. */
void check_moves(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
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

/*
 * state_pool.c — the pool of slot capacity a cache state shares among its
 * rows: a row takes its capacity as one run of free pool slots when it is
 * admitted (kve_state_open_row) and gives it back when it is retired
 * (kve_state_close_row); free runs merge, and the pool is compacted when
 * the free slots suffice but no single run does.
 */
#include <string.h>

#include "kve_error.h"
#include "kve_state_impl.h"


/* Give row @p row's pool slots back (merging with the free runs beside
 * them); nothing when it holds none. */
void kve_pool_release(kve_state *s, uint32_t row)
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

/* Free pool slots, and the longest free run in *largest. */
static uint64_t kve_pool_free_slots(const kve_state *s, uint64_t *largest)
{
    uint64_t total = 0;
    *largest = 0;
    for (uint32_t i = 0; i < s->n_runs; i++) {
        total += s->free_runs[i].len;
        *largest = s->free_runs[i].len > *largest ? s->free_runs[i].len : *largest;
    }
    return total;
}

/* The pool cannot give @p capacity slots; @p own: slots the row would give back. */
static kve_status kve_pool_full(const kve_state *s, uint32_t prompt_len, uint32_t capacity,
                                uint64_t own)
{
    uint64_t largest, free_slots = kve_pool_free_slots(s, &largest) + own;
    return kve_error_set(KVE_ERR_RANGE,
                         "prompt_len = %u: capacity %u slots, but the pool of %llu has %llu free, "
                         "at most %llu in one run (retire a row, or size desc.pool_slots larger)",
                         prompt_len, capacity, (unsigned long long)s->pool,
                         (unsigned long long)free_slots, (unsigned long long)largest);
}

kve_status kve_pool_check(const kve_state *s, uint32_t row, uint32_t prompt_len, uint32_t capacity)
{
    uint64_t largest, own = s->rows[row].held ? s->rows[row].capacity : 0;
    if (kve_pool_free_slots(s, &largest) + own >= capacity)
        return KVE_OK;
    return kve_pool_full(s, prompt_len, capacity, own);
}

/* Take @p capacity slots for row @p row: the first free run that fits,
 * after compacting the pool when the free slots suffice but no run does. */
kve_status kve_pool_take(kve_state *s, uint32_t row, uint32_t prompt_len, uint32_t capacity)
{
    uint64_t largest, total = kve_pool_free_slots(s, &largest);
    if (largest < capacity && total >= capacity)
        KVE_TRY(kve_pool_compact(s));
    for (uint32_t i = 0; i < s->n_runs; i++) {
        kve_pool_run *run = &s->free_runs[i];
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
    return kve_pool_full(s, prompt_len, capacity, 0);
}

/*
 * state_rebuild.c — kve_state_rebuild: a row's exact tables from (seed,
 * seq_id, prompt length, tokens appended, schedule) alone.
 *
 * Fresh keys change every round, so the rounds are replayed through the
 * append path (kve_evict on the backend). Persistent keys never change: the
 * candidates kept after a round are the bottom-k by (key, pos) of every
 * token scored so far (docs/SPEC.md "Key"), so each token is hashed once
 * and each round's r evictions are the r largest of a max-heap. The slots
 * still follow the history (new tokens fill the freed slots in ascending
 * order), which the same single pass records.
 */
#include <stdlib.h>
#include <string.h>

#include "kve_error.h"
#include "kve_key.h"
#include "kve_state_impl.h"

typedef struct {
    uint64_t key;
    uint32_t pos, slot;
} kve_cand;

static int kve_cand_less(kve_cand a, kve_cand b)
{
    return a.key < b.key || (a.key == b.key && a.pos < b.pos);
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

static int kve_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Host buffers of one direct rebuild. */
typedef struct {
    int32_t *tab;   /* [tables][max_slots] */
    int32_t *freed; /* [tables][freed_table_stride] */
    kve_cand *heap; /* [capacity] */
    uint32_t *ring; /* slot of each of the last W + r positions */
    int64_t *map;   /* [table_layers][n][table_heads] or NULL */
} kve_rebuild_bufs;

/* One table: the schedule's rounds from once-computed persistent keys.
 * Returns 0, or 1 when a round did not free exactly r slots (a bug). */
static int kve_rebuild_table(const kve_state *s, const kve_state_row *r, size_t t, uint32_t n,
                             const kve_rebuild_bufs *b, uint32_t *rounds, uint32_t *free_left)
{
    const kve_schedule *sc = &s->d.schedule;
    uint32_t C = r->capacity, P = r->prompt, W = sc->window, rs = sc->interval;
    uint32_t layer = s->d.layer_offset + (uint32_t)(t / s->th);
    uint32_t head = s->d.head_offset + (uint32_t)(t % s->th);
    uint64_t seq_seed = kve_seq_seed(sc->seed, r->seq_id);
    uint64_t keep_max = sc->budget > (uint64_t)P + W ? sc->budget - P - W : 0;
    size_t ring_n = (size_t)W + rs, hn = 0;
    int32_t *sp = b->tab + t * s->d.max_slots, *fr = b->freed + t * s->freed_table_stride;
    for (uint32_t i = 0; i < s->d.max_slots; i++)
        sp[i] = i < C && i < n ? (int32_t)i : -1;
    uint32_t next = P;
    *rounds = 0;
    *free_left = 0;
    for (uint64_t tm = C; tm < n; tm += rs) { /* token tm finds the heads full */
        for (; next < tm - W; next++) {
            kve_cand c = {kve_key(seq_seed, sc->flags, layer, head, next, 0), next,
                          next < C ? next : b->ring[next % ring_n]};
            kve_heap_push(b->heap, &hn, c);
        }
        size_t keep = hn < keep_max ? hn : (size_t)keep_max;
        if (hn - keep != rs)
            return 1;
        for (uint32_t i = 0; i < rs; i++)
            fr[i] = (int32_t)kve_heap_pop(b->heap, &hn).slot;
        qsort(fr, rs, sizeof *fr, kve_cmp_i32);
        uint32_t cnt = n - tm < rs ? (uint32_t)(n - tm) : rs;
        for (uint32_t i = 0; i < rs; i++)
            sp[fr[i]] = i < cnt ? (int32_t)(tm + i) : -1;
        for (uint32_t i = 0; i < cnt; i++)
            b->ring[(tm + i) % ring_n] = (uint32_t)fr[i];
        ++*rounds;
        *free_left = rs - cnt;
    }
    if (b->map)
        for (uint32_t i = 0; i < C; i++)
            if (sp[i] >= 0)
                b->map[((t / s->th) * n + (size_t)sp[i]) * s->th + t % s->th] = i;
    return 0;
}

static kve_status kve_rebuild_direct(kve_state *s, uint32_t row, uint32_t n, int64_t *mapping)
{
    kve_state_row *r = &s->rows[row];
    size_t map_n = mapping ? (size_t)n * s->tables : 0;
    kve_rebuild_bufs b;
    b.tab = (int32_t *)malloc(s->row_stride * 4);
    b.freed = (int32_t *)malloc(s->freed_row_stride * 4);
    b.heap = (kve_cand *)malloc((size_t)r->capacity * sizeof(kve_cand));
    b.ring = (uint32_t *)malloc(((size_t)s->d.schedule.window + s->d.schedule.interval) * 4);
    b.map = map_n ? (int64_t *)malloc(map_n * 8) : NULL;
    kve_status st = KVE_OK;
    if (!b.tab || !b.freed || !b.heap || !b.ring || (map_n && !b.map))
        st = kve_error_set(KVE_ERR_NOMEM,
                           "cannot allocate host buffers to rebuild row %u (%zu bytes)", row,
                           (s->row_stride + s->freed_row_stride) * 4 +
                               (size_t)r->capacity * sizeof(kve_cand) +
                               ((size_t)s->d.schedule.window + s->d.schedule.interval) * 4 +
                               map_n * 8);
    for (size_t i = 0; i < map_n && st == KVE_OK; i++)
        b.map[i] = -1;
    if (st == KVE_OK)
        memset(b.freed, 0xff, s->freed_row_stride * 4);
    uint32_t rounds = 0, free_left = 0;
    for (size_t t = 0; t < s->tables && st == KVE_OK; t++)
        if (kve_rebuild_table(s, r, t, n, &b, &rounds, &free_left))
            st = kve_error_set(KVE_ERR_INTERNAL, "rebuild of row %u: a round did not free r slots",
                               row);
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->slot_pos + row * s->row_stride, b.tab, s->row_stride * 4,
                      KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->freed + row * s->freed_row_stride, b.freed,
                      s->freed_row_stride * 4, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK && map_n)
        st = kve_copy(s->ctx, mapping, b.map, map_n * 8, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK) {
        r->n_tokens = n;
        r->round = rounds;
        r->free_left = free_left;
    }
    free(b.tab);
    free(b.freed);
    free(b.heap);
    free(b.ring);
    free(b.map);
    return st;
}

kve_status kve_state_rebuild(kve_state *s, uint32_t row, uint64_t seq_id, uint32_t prompt_len,
                             uint32_t n_tokens, int64_t *slot_mapping, size_t mapping_len)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(row >= s->d.max_seqs, KVE_ERR_RANGE, "row = %u: must be 0..%u", row,
                        s->d.max_seqs - 1);
    uint32_t capacity;
    KVE_TRY(kve_state_check_prompt(s, prompt_len, &capacity));
    KVE_RETURN_ERROR_IF(n_tokens > 0x7fffffffu, KVE_ERR_RANGE,
                        "n_tokens = %u: positions must stay below 2^31", n_tokens);
    KVE_RETURN_ERROR_IF(!slot_mapping && mapping_len, KVE_ERR_NULL,
                        "slot_mapping is NULL but mapping_len = %zu", mapping_len);
    uint64_t need = (uint64_t)n_tokens * s->tables;
    KVE_RETURN_ERROR_IF(slot_mapping && mapping_len < need, KVE_ERR_RANGE,
                        "mapping_len = %zu: %u tokens x %u table layers x %u table heads need "
                        "%llu",
                        mapping_len, n_tokens, s->tl, s->th, (unsigned long long)need);
    s->rows[row].active = 0;
    KVE_TRY(kve_state_open_row(s, row, seq_id, prompt_len, capacity));
    kve_status st;
    if (s->d.schedule.flags & KVE_PERSISTENT)
        st = kve_rebuild_direct(s, row, n_tokens, slot_mapping);
    else
        st = kve_state_append_rows(s, 1, &row, &n_tokens, slot_mapping, n_tokens);
    if (st != KVE_OK)
        s->rows[row].active = 0;
    return st;
}

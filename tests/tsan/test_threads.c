/*
 * test_threads — 8 threads, each with its own context and cache state,
 * drive eviction, compaction, cache writes and state programs 1,000 times
 * over shared read-only inputs. Every thread's results (hashed per
 * iteration) must equal those of one thread running alone first. Built by
 * the `tsan` preset with ThreadSanitizer (zero reports); in the other
 * builds it still checks the equality.
 *
 * Contexts run with threads = 1: the OpenMP runtime (libgomp, libomp) is
 * not TSan-instrumented, so its internal synchronisation would be invisible
 * to TSan; one thread per context keeps every library call on the caller's
 * thread and leaves nothing to suppress.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvevict.h"

enum { N_THREADS = 8, ITERS = 1000, SEQS = 2, LAYERS = 2, HEADS = 4, SLOTS = 96, ENTRY = 8 };
enum { HEADS_ALL = SEQS * LAYERS * HEADS };

/* Shared, read-only after main() fills them. */
static int32_t g_slots[HEADS_ALL * SLOTS];
static kve_seq g_seqs[SEQS];
static uint8_t g_cache[HEADS_ALL * SLOTS * ENTRY];
static uint8_t g_src[16 * HEADS * ENTRY];
static int64_t g_map[16 * HEADS];
static int32_t g_rows[16];

#define CHECK(expr)                                                                               \
    do {                                                                                          \
        kve_status st_ = (expr);                                                                  \
        if (st_ != KVE_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,                   \
                    kve_status_string(st_), kve_last_error());                                    \
            return 0;                                                                             \
        }                                                                                         \
    } while (0)

/* One iteration of everything; returns its results' hash (0 on failure). */
static uint64_t iteration(kve_context *ctx, kve_state *state, uint32_t it)
{
    XXH3_state_t *h = XXH3_createState();
    XXH3_64bits_reset(h);
    /* 1. eviction over the shared tables */
    kve_batch b = {.seed = 42 + it % 7, .flags = it % 4 == 3 ? KVE_PERSISTENT : 0,
                   .n_seqs = SEQS, .seqs = g_seqs, .n_layers = LAYERS, .n_heads = HEADS,
                   .n_slots = SLOTS, .budget = 40 + it % 9, .window = 8,
                   .slot_pos = g_slots, .slot_pos_stride = SLOTS};
    static _Thread_local int32_t evicted[HEADS_ALL * SLOTS], kept[HEADS_ALL * SLOTS];
    static _Thread_local uint32_t n_ev[HEADS_ALL], n_kept[HEADS_ALL];
    static _Thread_local uint8_t flags[HEADS_ALL];
    static _Thread_local uint64_t digest[HEADS_ALL];
    kve_evict_out o = {.evicted = evicted, .evicted_stride = SLOTS, .n_evicted = n_ev,
                       .n_kept = n_kept, .head_flags = flags, .kept = kept, .kept_stride = SLOTS,
                       .round_digest = digest};
    CHECK(kve_evict(ctx, &b, &o, NULL, 0));
    XXH3_64bits_update(h, n_ev, sizeof n_ev);
    XXH3_64bits_update(h, digest, sizeof digest);
    XXH3_64bits_update(h, evicted, sizeof evicted);
    /* 2. compaction of a private copy of the tables and a cache */
    static _Thread_local int32_t slots[HEADS_ALL * SLOTS];
    static _Thread_local uint8_t cache[HEADS_ALL * SLOTS * ENTRY];
    memcpy(slots, g_slots, sizeof slots);
    memcpy(cache, g_cache, sizeof cache);
    kve_compact_desc c = {.n_seqs = SEQS, .n_layers = LAYERS, .n_heads = HEADS, .n_slots = SLOTS,
                          .slot_pos = slots, .slot_pos_stride = SLOTS, .evicted = evicted,
                          .evicted_stride = SLOTS, .n_evicted = n_ev, .entry_bytes = ENTRY,
                          .n_caches = 1};
    c.src[0] = (kve_cache_view){cache, (size_t)LAYERS * HEADS * SLOTS * ENTRY,
                                (size_t)HEADS * SLOTS * ENTRY, (size_t)SLOTS * ENTRY, ENTRY};
    CHECK(kve_compact(ctx, &c));
    XXH3_64bits_update(h, slots, sizeof slots);
    XXH3_64bits_update(h, cache, sizeof cache);
    /* 3. a cache write of 16 tokens into 4 pages of 8 slots (NHD) */
    static _Thread_local uint8_t paged[4 * 8 * HEADS * ENTRY];
    memset(paged, (int)(it & 0xff), sizeof paged);
    kve_cache_write_desc w = {.n_tokens = 16, .n_heads = HEADS, .entry_bytes = ENTRY,
                              .n_caches = 1, .layout = KVE_LAYOUT_NHD, .pages.page_size = 8,
                              .pages.n_pages = 4, .slots = g_map, .slots_stride_token = HEADS,
                              .slots_stride_head = 1, .token_row = g_rows, .pages.n_rows = 4,
                              .pages.kind = KVE_PAGES_NONE};
    w.src[0] = g_src;
    w.dst[0] = paged;
    CHECK(kve_cache_write(ctx, &w));
    XXH3_64bits_update(h, paged, sizeof paged);
    /* 4. a state program: admit, appends across rounds, rebuild, retire */
    uint32_t row = it % 2, n = 5 + it % 11;
    int64_t map[64 * LAYERS * HEADS];
    int32_t table[LAYERS * HEADS * 32];
    kve_step_buffers step = {.slot_mapping = map, .max_tokens = 64};
    CHECK(kve_state_admit(state, row, 1000 + it, 3 + it % 4));
    for (uint32_t k = 0; k < 4; k++) {
        memset(map, 0, sizeof map);
        CHECK(kve_state_append(state, 1, &row, &n, &step));
        XXH3_64bits_update(h, map, sizeof map);
    }
    CHECK(kve_state_read_slots(state, row, table, sizeof table / sizeof *table));
    XXH3_64bits_update(h, table, sizeof table);
    CHECK(kve_state_rebuild(state, 1 - row, 1000 + it, 3 + it % 4, 4 * n, NULL, 0, NULL, 0));
    CHECK(kve_state_read_slots(state, 1 - row, table, sizeof table / sizeof *table));
    XXH3_64bits_update(h, table, sizeof table);
    CHECK(kve_state_retire(state, row));
    CHECK(kve_state_retire(state, 1 - row));
    uint64_t d = XXH3_64bits_digest(h) | 1;
    XXH3_freeState(h);
    return d;
}

typedef struct {
    uint64_t *hashes; /* [ITERS] */
    int failed;
} worker;

static void *run(void *arg)
{
    worker *wk = (worker *)arg;
    kve_context *ctx = NULL;
    kve_state *state = NULL;
    kve_state_desc d = {.schedule = {.seed = 7, .budget = 12, .window = 4, .interval = 4},
                        .max_seqs = 2, .n_layers = LAYERS, .n_heads = HEADS, .max_slots = 32};
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK ||
        kve_context_set_threads(ctx, 1) != KVE_OK ||
        kve_state_create(ctx, &d, NULL, 0, &state) != KVE_OK) {
        fprintf(stderr, "setup: %s\n", kve_last_error());
        wk->failed = 1;
    }
    for (uint32_t it = 0; !wk->failed && it < ITERS; it++) {
        wk->hashes[it] = iteration(ctx, state, it);
        wk->failed = wk->hashes[it] == 0;
    }
    kve_state_destroy(state);
    kve_context_destroy(ctx);
    return NULL;
}

int main(void)
{
    uint64_t s = 12345;
    for (size_t i = 0; i < HEADS_ALL; i++) /* each head: a shuffled 0..SLOTS-1 with holes */
        for (size_t t = 0; t < SLOTS; t++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t j = (size_t)(s >> 33) % (t + 1);
            g_slots[i * SLOTS + t] = g_slots[i * SLOTS + j];
            g_slots[i * SLOTS + j] = (int32_t)t;
        }
    for (size_t i = 0; i < HEADS_ALL * SLOTS; i += 7)
        g_slots[i] = -1;
    for (uint32_t q = 0; q < SEQS; q++)
        g_seqs[q] = (kve_seq){100 + q, 10 + q, q};
    for (size_t i = 0; i < sizeof g_cache; i++)
        g_cache[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < sizeof g_src; i++)
        g_src[i] = (uint8_t)(i * 13 + 1);
    for (int t = 0; t < 16; t++) {
        g_rows[t] = t % 4;
        for (int h = 0; h < HEADS; h++)
            g_map[t * HEADS + h] = t % 5 == 4 ? -1 : (t / 4 + 2 * h) % 8;
    }
    /* One thread alone first: the reference. */
    worker ref = {calloc(ITERS, 8), 0};
    run(&ref);
    if (ref.failed)
        return 1;
    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){calloc(ITERS, 8), 0};
        if (pthread_create(&th[i], NULL, run, &w[i]) != 0)
            return 1;
    }
    int bad = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        bad |= w[i].failed;
        for (int it = 0; !w[i].failed && it < ITERS; it++)
            if (w[i].hashes[it] != ref.hashes[it]) {
                fprintf(stderr, "thread %d, iteration %d: results differ from one thread's\n", i, it);
                bad = 1;
                break;
            }
        free(w[i].hashes);
    }
    free(ref.hashes);
    printf("%d threads x %d iterations: %s\n", N_THREADS, ITERS, bad ? "FAILED" : "equal to one thread");
    return bad;
}

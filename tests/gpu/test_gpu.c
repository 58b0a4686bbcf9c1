/*
 * test_gpu.c — a GPU backend (argv[1]: cuda or hip) against the CPU
 * backend on the same problems: keys, 10,000+ random evictions, compaction
 * in and out of place, errors the device must find, workspace and digest;
 * the cache state and cache write in test_gpu_engine.c. Exits 77 (ctest:
 * skipped) when the backend is not available here.
 *
 * $KVE_GPU_CASES scales the random eviction cases (default 10000).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden_vectors.h"
#include "kve_engine_cases.h"
#include "test_gpu.h"

static kve_backend kve_gpu_backend;
kve_context *kve_gpu, *kve_cpu;

/* One device arena for every case: buffers at 256-byte aligned offsets, so
 * each lies at the same alignment as its host master. */
static unsigned char *kve_arena;
static size_t kve_arena_bytes;

static void kve_setup(void)
{
    ck_assert_int_eq(kve_context_create(kve_gpu_backend, &kve_gpu), KVE_OK);
    ck_assert_int_eq(kve_context_create(KVE_BACKEND_CPU, &kve_cpu), KVE_OK);
    ck_assert_int_eq(kve_context_set_cpu_isa(kve_cpu, KVE_CPU_ISA_SCALAR), KVE_OK);
    kve_arena_bytes = (size_t)1 << 30;
    ck_assert_int_eq(kve_alloc(kve_gpu, kve_arena_bytes, (void **)&kve_arena), KVE_OK);
}

static void kve_teardown(void)
{
    kve_free(kve_gpu, kve_arena);
    kve_context_destroy(kve_gpu);
    kve_context_destroy(kve_cpu);
}

unsigned kve_env_count(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

/* Device copies of a case's master buffers, in the arena. */
static void kve_device_copy(const kve_case *c, kve_case_bufs *dev)
{
    size_t at = 0;
    for (int i = 0; i < c->n_bufs; i++) {
        dev->p[i] = kve_arena + at;
        at += (c->bytes[i] + 511) & ~(size_t)255;
        ck_assert_msg(at <= kve_arena_bytes, "%s: the arena is too small", c->label);
        ck_assert_int_eq(kve_copy(kve_gpu, dev->p[i], c->master[i], c->bytes[i],
                                  KVE_COPY_HOST_TO_BACKEND),
                         KVE_OK);
    }
}

static void kve_device_fetch(const kve_case *c, const kve_case_bufs *dev, kve_case_bufs *host)
{
    for (int i = 0; i < c->n_bufs; i++)
        ck_assert_int_eq(kve_copy(kve_gpu, host->p[i], dev->p[i], c->bytes[i],
                                  KVE_COPY_BACKEND_TO_HOST),
                         KVE_OK);
}

/* The status of a device call: its own, then what synchronize reports. */
static kve_status kve_settle(kve_status st)
{
    kve_status sync = kve_context_synchronize(kve_gpu);
    return st != KVE_OK ? st : sync;
}

/* kve_keys on the device for host coordinates. */
static void kve_device_keys(uint64_t seed, uint32_t flags, const kve_coord *c, size_t n,
                            uint64_t *keys)
{
    unsigned char *dc = kve_arena, *dk = kve_arena + ((n * sizeof *c + 255) & ~(size_t)255);
    ck_assert_int_eq(kve_copy(kve_gpu, dc, c, n * sizeof *c, KVE_COPY_HOST_TO_BACKEND), KVE_OK);
    ck_assert_int_eq(kve_settle(kve_keys(kve_gpu, seed, flags, (kve_coord *)dc, n, (uint64_t *)dk)),
                     KVE_OK);
    ck_assert_int_eq(kve_copy(kve_gpu, keys, dk, n * 8, KVE_COPY_BACKEND_TO_HOST), KVE_OK);
}

START_TEST(test_keys)
{
    for (size_t i = 0; i < KVE_GOLDEN_N_KEYS; i++) {
        const kve_golden_key *g = &kve_golden_keys[i];
        kve_coord c = {g->seq_id, g->layer, g->head, g->pos, g->round};
        uint64_t key = 0;
        kve_device_keys(g->seed, g->flags, &c, 1, &key);
        ck_assert_msg(key == g->key, "golden key %zu: 0x%016llx", i, (unsigned long long)key);
    }
    uint64_t rng = 21;
    enum { N = 100003 };
    kve_coord *c = malloc(N * sizeof *c);
    uint64_t *want = malloc(N * 8), *got = malloc(N * 8);
    ck_assert(c && want && got);
    for (int round = 0; round < 5; round++) {
        uint64_t seed = kve_splitmix64(&rng);
        uint32_t flags = kve_rand_below(&rng, 8);
        for (size_t i = 0; i < N; i++)
            c[i] = (kve_coord){kve_splitmix64(&rng) % 7, (uint32_t)kve_splitmix64(&rng),
                               (uint32_t)kve_splitmix64(&rng), (uint32_t)kve_splitmix64(&rng),
                               kve_rand_below(&rng, 4)};
        ck_assert_int_eq(kve_keys(kve_cpu, seed, flags, c, N, want), KVE_OK);
        kve_device_keys(seed, flags, c, N, got);
        ck_assert_int_eq(memcmp(want, got, N * 8), 0);
    }
    free(c);
    free(want);
    free(got);
}
END_TEST

/* One case on the CPU and the GPU: same status and outputs (for a cache
 * write's error, the entry the host checks name first). The eviction takes
 * a workspace of its own when @p use_workspace, else the library's. */
void kve_check_case(const kve_case *c, int use_workspace)
{
    kve_case_bufs want, got, dev;
    ck_assert_int_eq(kve_case_host_copy(c, &want), 0);
    ck_assert_int_eq(kve_case_host_copy(c, &got), 0);
    kve_status st_ref = kve_case_run(kve_cpu, c, &want, NULL, 0);
    char ref_msg[512], msg[512], why[1280];
    snprintf(ref_msg, sizeof ref_msg, "%s", kve_last_error());
    kve_device_copy(c, &dev);
    void *ws = NULL;
    size_t ws_bytes = 0;
    if (use_workspace && !c->is_compact && !c->is_cache_write) {
        kve_batch b;
        kve_evict_out o;
        kve_case_bind_evict(c, &dev, &b, &o);
        ck_assert_int_eq(kve_evict_workspace_size(kve_gpu, &b, &ws_bytes), KVE_OK);
        if (ws_bytes)
            ck_assert_int_eq(kve_alloc(kve_gpu, ws_bytes, &ws), KVE_OK);
    }
    kve_status st = kve_settle(kve_case_run(kve_gpu, c, &dev, ws, ws_bytes));
    snprintf(msg, sizeof msg, "%s", kve_last_error());
    kve_free(kve_gpu, ws);
    kve_device_fetch(c, &dev, &got);
    ck_assert_msg(!kve_case_verdict(c, st, msg, &got, st_ref, ref_msg, &want, why, sizeof why),
                  "%s: device vs CPU: %s", c->label, why);
    ck_assert_msg(!c->is_cache_write || st == KVE_OK ||
                      !kve_cw_check_blame(kve_cpu, c, msg, why, sizeof why),
                  "%s: %s (CPU: %s)", c->label, why, ref_msg);
    kve_case_host_free(c, &want);
    kve_case_host_free(c, &got);
}

static void kve_evict_cases(uint64_t seed, unsigned n, kve_case_limits lim, uint32_t big_every,
                            uint32_t big_slots)
{
    uint64_t rng = seed;
    uint32_t small = lim.max_slots;
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        lim.max_slots = big_every && i % big_every == big_every - 1 ? big_slots : small;
        ck_assert_int_eq(kve_case_evict(&c, &rng, &lim), 0);
        kve_check_case(&c, (int)(i & 1));
        kve_case_free(&c);
    }
}

/* Where a golden case's buffers lie in the arena: its sequence, slot
 * table, evicted row, counts (n_evicted then n_kept), head flags and kept
 * row, each well apart (a golden head has at most 64 slots). */
enum {
    KVE_GA_SEQ = 0,
    KVE_GA_SLOTS = 256,
    KVE_GA_EVICTED = 4096,
    KVE_GA_COUNTS = 8192,
    KVE_GA_FLAGS = 8200,
    KVE_GA_KEPT = 12288,
    KVE_GA_ROW = 64 /* the rows' stride, in slots */
};

START_TEST(test_evict_golden)
{
    for (size_t i = 0; i < KVE_GOLDEN_N_CASES; i++) {
        const kve_golden_case *g = &kve_golden_cases[i];
        kve_seq seq = {g->seq_id, g->prompt, g->round};
        unsigned char *d = kve_arena;
        ck_assert_uint_le(g->n_slots, KVE_GA_ROW);
        ck_assert_int_eq(
            kve_copy(kve_gpu, d + KVE_GA_SEQ, &seq, sizeof seq, KVE_COPY_HOST_TO_BACKEND), KVE_OK);
        ck_assert_int_eq(kve_copy(kve_gpu, d + KVE_GA_SLOTS, g->slot_pos, g->n_slots * 4,
                                  KVE_COPY_HOST_TO_BACKEND),
                         KVE_OK);
        kve_batch b = {g->seed, g->flags, 1, (kve_seq *)(d + KVE_GA_SEQ), 1, 1, g->layer, g->head,
                       g->n_slots, g->budget, g->window, (int32_t *)(d + KVE_GA_SLOTS),
                       g->n_slots, NULL, 0};
        kve_evict_out o = {.evicted = (int32_t *)(d + KVE_GA_EVICTED),
                           .evicted_stride = KVE_GA_ROW,
                           .n_evicted = (uint32_t *)(d + KVE_GA_COUNTS),
                           .n_kept = (uint32_t *)(d + KVE_GA_COUNTS + 4),
                           .head_flags = d + KVE_GA_FLAGS,
                           .kept = (int32_t *)(d + KVE_GA_KEPT),
                           .kept_stride = KVE_GA_ROW};
        ck_assert_int_eq(kve_settle(kve_evict(kve_gpu, &b, &o, NULL, 0)), KVE_OK);
        int32_t ev[KVE_GA_ROW], kept[KVE_GA_ROW];
        uint32_t counts[2]; /* n_evicted, n_kept */
        uint8_t flags;
        ck_assert_int_eq(kve_copy(kve_gpu, counts, d + KVE_GA_COUNTS, sizeof counts,
                                  KVE_COPY_BACKEND_TO_HOST),
                         KVE_OK);
        ck_assert_int_eq(kve_copy(kve_gpu, &flags, d + KVE_GA_FLAGS, 1, KVE_COPY_BACKEND_TO_HOST),
                         KVE_OK);
        ck_assert_int_eq(
            kve_copy(kve_gpu, ev, d + KVE_GA_EVICTED, sizeof ev, KVE_COPY_BACKEND_TO_HOST), KVE_OK);
        ck_assert_int_eq(
            kve_copy(kve_gpu, kept, d + KVE_GA_KEPT, sizeof kept, KVE_COPY_BACKEND_TO_HOST),
            KVE_OK);
        ck_assert_msg(counts[0] == g->n_evicted && counts[1] == g->n_kept, "%s", g->name);
        ck_assert_int_eq(memcmp(ev, g->evicted, g->n_evicted * 4), 0);
        ck_assert_int_eq(memcmp(kept, g->kept, g->n_kept * 4), 0);
        ck_assert_int_eq(flags, g->over_budget ? KVE_HEAD_OVER_BUDGET : 0);
    }
}
END_TEST

START_TEST(test_evict_random)
{
    kve_case_limits lim = {3000, 4, 0};
    /* every 100th case up to 40000 slots: past shared memory, into the workspace */
    kve_evict_cases(0x6e0001, kve_env_count("KVE_GPU_CASES", 10000), lim, 100, 40000);
}
END_TEST

START_TEST(test_evict_errors)
{
    kve_case_limits lim = {2000, 4, 1};
    kve_evict_cases(0x6e0002, 500, lim, 0, 0);
    /* the records were cleared: a good call is clean again */
    kve_case_limits ok = {100, 2, 0};
    kve_evict_cases(0x6e0003, 10, ok, 0, 0);
}
END_TEST

static void kve_compact_cases(uint64_t seed, unsigned n, int errors)
{
    uint64_t rng = seed;
    kve_case_limits lim = {1500, 3, 0}, clim = {1500, 3, errors};
    for (unsigned i = 0; i < n; i++) {
        kve_case ev, c;
        ck_assert_int_eq(kve_case_evict(&ev, &rng, &lim), 0);
        ck_assert_int_eq(kve_case_compact(&c, &ev, kve_cpu, &rng, &clim), 0);
        kve_check_case(&c, 0);
        kve_case_free(&c);
        kve_case_free(&ev);
    }
}

START_TEST(test_compact_random) { kve_compact_cases(0x6e0004, 2000, 0); }
END_TEST

START_TEST(test_compact_errors) { kve_compact_cases(0x6e0005, 300, 1); }
END_TEST

/* A serving batch in one call (G3-shaped, fewer sequences): same digest. */
START_TEST(test_digest_batch)
{
    enum { SEQS = 16, LAYERS = 36, HEADS = 8, SLOTS = 2112 };
    size_t heads = (size_t)SEQS * LAYERS * HEADS, rows = heads * SLOTS;
    kve_seq seqs[SEQS];
    int32_t *slots = malloc(rows * 4);
    ck_assert_ptr_nonnull(slots);
    for (int s = 0; s < SEQS; s++)
        seqs[s] = (kve_seq){1000 + (uint64_t)s, 1024, (uint32_t)s % 3};
    for (size_t i = 0; i < rows; i++)
        slots[i] = (int32_t)(i % SLOTS);
    kve_batch b = {2609, 0, SEQS, seqs, LAYERS, HEADS, 0, 0, SLOTS, 2048, 64, slots, SLOTS, NULL, 0};
    size_t ev_stride = SLOTS - 2048;
    int32_t *ev = malloc(heads * ev_stride * 4);
    uint32_t *ne = malloc(heads * 4), *nk = malloc(heads * 4);
    ck_assert(ev && ne && nk);
    kve_evict_out o = {.evicted = ev, .evicted_stride = ev_stride, .n_evicted = ne, .n_kept = nk};
    uint64_t want = 0, got = 1;
    ck_assert_int_eq(kve_evict(kve_cpu, &b, &o, NULL, 0), KVE_OK);
    ck_assert_int_eq(kve_digest(kve_cpu, &b, &o, &want), KVE_OK);

    unsigned char *d = kve_arena;
    size_t off_slots = 4096, off_ev = off_slots + rows * 4, off_ne = off_ev + heads * ev_stride * 4,
           off_nk = off_ne + heads * 4;
    ck_assert_int_eq(kve_copy(kve_gpu, d, seqs, sizeof seqs, KVE_COPY_HOST_TO_BACKEND), KVE_OK);
    ck_assert_int_eq(kve_copy(kve_gpu, d + off_slots, slots, rows * 4, KVE_COPY_HOST_TO_BACKEND),
                     KVE_OK);
    kve_batch db = b;
    db.seqs = (kve_seq *)d;
    db.slot_pos = (int32_t *)(d + off_slots);
    kve_evict_out dout = {.evicted = (int32_t *)(d + off_ev), .evicted_stride = ev_stride,
                          .n_evicted = (uint32_t *)(d + off_ne), .n_kept = (uint32_t *)(d + off_nk)};
    ck_assert_int_eq(kve_settle(kve_evict(kve_gpu, &db, &dout, NULL, 0)), KVE_OK);
    ck_assert_int_eq(kve_digest(kve_gpu, &db, &dout, &got), KVE_OK);
    ck_assert_msg(got == want, "digest 0x%016llx, CPU 0x%016llx", (unsigned long long)got,
                  (unsigned long long)want);
    free(slots);
    free(ev);
    free(ne);
    free(nk);
}
END_TEST

/* Bad calls the host catches still fail before any launch. */
START_TEST(test_host_checks)
{
    kve_batch b;
    memset(&b, 0, sizeof b);
    size_t bytes;
    ck_assert_int_eq(kve_evict_workspace_size(kve_gpu, NULL, &bytes), KVE_ERR_NULL);
    b.flags = 0x100;
    ck_assert_int_eq(kve_evict_workspace_size(kve_gpu, &b, &bytes), KVE_ERR_INVALID);
    ck_assert_int_eq(kve_context_set_device(kve_gpu, 1 << 20), KVE_ERR_RANGE);
    ck_assert_int_eq(kve_context_synchronize(kve_gpu), KVE_OK);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 2 || kve_backend_from_name(argv[1], &kve_gpu_backend) != KVE_OK ||
        (kve_gpu_backend != KVE_BACKEND_CUDA && kve_gpu_backend != KVE_BACKEND_HIP)) {
        fprintf(stderr, "usage: test_gpu cuda|hip\n");
        return 2;
    }
    int available = 0;
    kve_backend_available(kve_gpu_backend, &available);
    if (!available) {
        printf("skipped: no %s device here (or libkvevict_%s.so not found)\n", argv[1], argv[1]);
        return 77;
    }
    const kve_suite_test own[] = {
        KVE_TEST(device, test_host_checks),
        KVE_TEST(device, test_keys),
        KVE_TEST(device, test_evict_golden),
        KVE_TEST(device, test_evict_random),
        KVE_TEST(device, test_evict_errors),
        KVE_TEST(device, test_compact_random),
        KVE_TEST(device, test_compact_errors),
        KVE_TEST(device, test_digest_batch),
    };
    kve_suite_test all[64];
    memcpy(all, own, sizeof own);
    size_t n = KVE_COUNT(own) + kve_engine_tests(all + KVE_COUNT(own), KVE_COUNT(all) - KVE_COUNT(own));
    if (n > KVE_COUNT(all)) {
        fprintf(stderr, "test_gpu: %zu tests listed, room for %zu\n", n, KVE_COUNT(all));
        return EXIT_FAILURE;
    }
    /* No fork: a GPU runtime does not survive fork(). */
    const kve_suite_spec spec = {argv[1], 900, 0, kve_setup, kve_teardown};
    return kve_suite_main(&spec, all, n);
}

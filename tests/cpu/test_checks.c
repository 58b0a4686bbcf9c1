/* test_checks.c — kve_evict's content checks on every ISA this machine runs
 * (the context's ISA picks them: scalar, AVX2, AVX-512) and at 1-3 threads,
 * held against each other and a plain reference on adversarial tables:
 * runs crossing INT32_MAX, repeats at the vector blocks' edges, -2 and
 * INT32_MIN, sorted and sparse tables, empty ones. The checks run fused
 * with the eviction, head by head: every valid table's outputs are held to
 * the scalar kernel's, and an error names the lowest bad head at any
 * thread count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_cpu_test.h"
#include "kve_suite.h"

/* Slots where a vector pass changes block (8 and 16 lanes, and the "next"
 * lane their loads look at), and where the tail code takes over. */
static uint32_t edge_slot(uint64_t *rng, uint32_t n)
{
    static const uint32_t edges[] = {0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 47, 48, 63, 64, 65};
    uint32_t t = edges[kt_below(rng, KVE_COUNT(edges))];
    if (kt_below(rng, 3) == 0)
        t = n - 1 - kt_below(rng, n < 3 ? n : 3); /* the last slots */
    return t < n ? t : n - 1;
}

/* One head's table of @p n slots (n >= 1), shaped by @p kind. */
static void adversarial_row(uint64_t *rng, int32_t *row, uint32_t n, unsigned kind)
{
    uint32_t run = kt_below(rng, n + 1); /* slots of the leading in-order run */
    int32_t first;
    switch (kind % 7) {
    case 0: /* a run that crosses INT32_MAX: what 32-bit adds wrap to */
        first = INT32_MAX - (int32_t)kt_below(rng, n + 2);
        for (uint32_t t = 0; t < n; t++)
            row[t] = (int32_t)((uint32_t)first + t);
        break;
    case 1: /* a run ending at or below INT32_MAX, then the rest */
        first = INT32_MAX - (int32_t)(run + kt_below(rng, 3));
        for (uint32_t t = 0; t < n; t++)
            row[t] = t < run ? first + (int32_t)t : -1;
        for (uint32_t t = run; t < n; t++)
            if (kt_below(rng, 2))
                row[t] = (int32_t)kt_below(rng, 1000);
        break;
    case 2: /* ascending positions, then empty slots: the sorted fast path */
        first = (int32_t)kt_below(rng, 1000);
        for (uint32_t t = 0, p = (uint32_t)first; t < n; t++, p += 1 + kt_below(rng, 3))
            row[t] = t < run ? (int32_t)p : -1;
        break;
    case 3: /* a prompt run, then a window of decode positions */
        for (uint32_t t = 0; t < n; t++)
            row[t] = t < run ? (int32_t)t : (int32_t)(run + 2 * (t - run));
        break;
    case 4: /* sparse: positions far apart (the hashed set, the exact check's sort) */
        for (uint32_t t = 0; t < n; t++)
            row[t] = kt_below(rng, 4) ? (int32_t)(kt_next(rng) & 0x7fffffff) : -1;
        break;
    case 5: /* sparse, and every position in one bucket of the hashed set
             * (kernels_cpu/check_rows.c): its probe bound, then the sort */
        for (uint32_t t = 0, j = 0; t < n; j++) {
            uint32_t key = ((7u << 20) + j) * 0x0e8b2f51u; /* 1 / 0x9e3779b1 mod 2^32 */
            if (key - 1 <= INT32_MAX)
                row[t++] = (int32_t)(key - 1);
        }
        break;
    default: /* all empty */
        for (uint32_t t = 0; t < n; t++)
            row[t] = -1;
    }
    /* Then the damage: repeats and bad values at block edges, or none. */
    for (uint32_t k = kt_below(rng, 3); k > 0; k--) {
        uint32_t a = edge_slot(rng, n), c = kt_below(rng, n);
        switch (kt_below(rng, 6)) {
        case 0: row[a] = row[c]; break;
        case 1: row[a] = row[edge_slot(rng, n)]; break;
        case 2: row[a] = -2; break;
        case 3: row[a] = INT32_MIN; break;
        case 4: row[a] = INT32_MAX; break;
        default: row[a] = -1;
        }
    }
}

START_TEST(checks_every_isa_adversarial)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 0x15a;
    kve_seq seqs[2] = {{1, 0, 0}, {2, 3, 1}};
    for (int iter = 0; iter < 4000; iter++) {
        /* 0-3 slots a tenth of the time; at most 200 slots (blocks and tails). */
        uint32_t n = kt_below(&rng, 10) ? 1 + kt_below(&rng, 200) : kt_below(&rng, 4);
        /* up to 10 heads: several per thread, so threads race to a problem */
        uint32_t n_seqs = 1 + kt_below(&rng, 2), n_heads = 1 + kt_below(&rng, 5);
        size_t heads = (size_t)n_seqs * n_heads, stride = n + kt_below(&rng, 3);
        int32_t *slots = (int32_t *)malloc((heads * stride + 1) * sizeof *slots);
        for (size_t i = 0; i < heads * stride + 1; i++)
            slots[i] = INT32_MIN; /* padding: never read */
        unsigned kind = (unsigned)kt_below(&rng, 7);
        for (size_t i = 0; n && i < heads; i++) /* mostly one kind per batch */
            adversarial_row(&rng, slots + i * stride, n, kt_below(&rng, 4) ? kind : (unsigned)i);
        uint32_t flags = kt_below(&rng, 5) == 0 ? KVE_TRUSTED_SLOTS : 0;
        kve_batch b = {kt_next(&rng), flags, n_seqs, seqs, 1, n_heads, 0, 0, n,
                       kt_below(&rng, n + 2), kt_below(&rng, 8), n ? slots : NULL, stride, NULL, 0};
        char label[48];
        snprintf(label, sizeof label, "table %d (kind %u, %u slots)", iter, kind, n);
        kve_check_contexts(s.ctx, s.name, s.n, &b, label);
        free(slots);
    }
    isa_set_close(&s);
}
END_TEST

/* Tables shaped like a decode's (a prompt of whole 64-slot groups or not,
 * in order or not; generated positions shuffled, dense or spread past the
 * 2^16 window of the fused check's map, from just past the prompt or from
 * far beyond it: across a multiple of 2^16, or near INT32_MAX), full so
 * that the kernel hashes: the checks that run inside the AVX-512 and AVX2
 * hashing passes (the prompt's run in 64- and 32-slot groups, the marks
 * past it, the range) against the reference, with a repeat of a run
 * position late in the table, a repeat among the rest, -2, and sometimes
 * an empty slot. */
static void decode_row(uint64_t *rng, int32_t *row, uint32_t n, uint32_t prompt, unsigned kind)
{
    static const uint32_t bases[] = {65536 - 200, 3u * 65536 - 900, 0x7fffffffu - 100000};
    uint32_t spread = kind & 1 ? 1 + kt_below(rng, 120) : 1; /* 120: past the window */
    uint32_t base = kind & 4 ? bases[kt_below(rng, KVE_COUNT(bases))] : 0;
    for (uint32_t t = 0; t < n; t++)
        row[t] = t < prompt ? (int32_t)t : (int32_t)(prompt + base + (t - prompt) * spread);
    if (kind & 2) /* a prompt out of order: no run */
        for (uint32_t t = prompt; t > 1; t--) {
            uint32_t j = kt_below(rng, t), x = (uint32_t)row[t - 1];
            row[t - 1] = row[j];
            row[j] = (int32_t)x;
        }
    for (uint32_t t = n; t > prompt + 1; t--) {
        uint32_t j = prompt + kt_below(rng, t - prompt), x = (uint32_t)row[t - 1];
        row[t - 1] = row[j];
        row[j] = (int32_t)x;
    }
    if (kt_below(rng, 4) == 0) /* room: some heads not full */
        row[kt_below(rng, n)] = -1;
    switch (kt_below(rng, 8)) {
    case 0: row[prompt + kt_below(rng, n - prompt)] = (int32_t)kt_below(rng, prompt); break;
    case 1: row[prompt + kt_below(rng, n - prompt)] = row[prompt + kt_below(rng, n - prompt)]; break;
    case 2: row[kt_below(rng, n)] = -2; break;
    case 3: row[kt_below(rng, prompt)] = row[kt_below(rng, prompt)]; break;
    default: break; /* valid */
    }
}

START_TEST(checks_fused_decode_tables)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 0xf05ed;
    static const uint32_t prompts[] = {64, 128, 100, 1024, 0, 65, 32, 96, 160};
    for (int iter = 0; iter < 400; iter++) {
        uint32_t prompt = prompts[kt_below(&rng, KVE_COUNT(prompts))];
        uint32_t n = prompt + 70 + kt_below(&rng, 700), heads = 1 + kt_below(&rng, 4);
        kve_seq seq = {7 + (uint64_t)iter, prompt, (uint32_t)iter};
        int32_t *slots = (int32_t *)malloc((size_t)heads * n * sizeof *slots);
        unsigned kind = (unsigned)kt_below(&rng, 8);
        for (uint32_t i = 0; i < heads; i++)
            decode_row(&rng, slots + (size_t)i * n, n, prompt, kind);
        uint32_t flags = kt_below(&rng, 4) == 0 ? KVE_TRUSTED_SLOTS : 0;
        uint32_t budget = n - 1 - kt_below(&rng, 64);
        kve_batch b = {kt_next(&rng), flags, 1, &seq, 1, heads, 0, 0, n, budget, 64, slots, n, NULL, 0};
        char label[64];
        snprintf(label, sizeof label, "decode table %d (kind %u, P %u, %u slots)", iter, kind, prompt, n);
        kve_check_contexts(s.ctx, s.name, s.n, &b, label);
        free(slots);
    }
    isa_set_close(&s);
}
END_TEST

/* KVE_CPU_ISA picks the checks as it picks the kernels: a context created
 * under KVE_CPU_ISA=scalar (and each other ISA) reports it, and refuses the
 * wrapped run the vector checks once missed. */
START_TEST(checks_follow_env_isa)
{
    int32_t row[32]; /* two AVX-512 blocks, four AVX2 blocks: no tail */
    for (uint32_t t = 0; t < 32; t++)
        row[t] = (int32_t)((uint32_t)INT32_MAX - 20 + t);
    kve_seq seq = {5, 0, 0};
    kve_batch b = {1, 0, 1, &seq, 1, 1, 0, 0, 32, 4, 2, row, 32, NULL, 0};
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        if (!avail)
            continue;
        setenv("KVE_CPU_ISA", kve_cpu_isa_name((kve_cpu_isa)isa), 1);
        kve_context *ctx = NULL;
        KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
        unsetenv("KVE_CPU_ISA");
        kve_cpu_isa got;
        KT_OK(kve_context_get_cpu_isa(ctx, &got));
        ck_assert_int_eq(got, isa);
        kt_out o;
        EXPECT_ERR(kt_evict(ctx, &b, &o), KVE_ERR_RANGE,
                   "batch.slot_pos[head 0][slot 21] = -2147483648");
        kt_out_free(&o);
        kve_context_destroy(ctx);
    }
}
END_TEST

/* Problems in several heads, one of them a NaN score: the lowest head is
 * named on every context (heads spread over 1-3 threads: 11000 slots a
 * head, so that three heads fill a thread's share), and in a head the
 * slot_pos problem comes before its NaN. */
START_TEST(checks_lowest_head_named)
{
    isa_set s;
    isa_set_open(&s);
    enum { H = 9, N = 11000 };
    static int32_t slots[H * N];
    static float sc[H * N];
    kve_seq seq = {3, 8, 1};
    static const struct {
        int nan_head, nan_slot, bad_head, bad_slot, bad_value;
        const char *want;
    } cases[] = {
        {6, 20, 2, 17, -2, "batch.slot_pos[head 2][slot 17] = -2: positions must be"},
        {1, 20, 7, 9, INT32_MIN, "batch.scores[head 1][slot 20] is NaN"},
        {4, 20, 4, 33, 12, "batch.slot_pos[head 4][slot 33] = 12: position already held"},
        {8, 10, -1, 0, 0, "batch.scores[head 8][slot 10] is NaN"},
        {-1, 0, 0, 39, 0, "batch.slot_pos[head 0][slot 39] = 0: position already held"},
    };
    for (size_t c = 0; c < KVE_COUNT(cases); c++) {
        for (int i = 0; i < H * N; i++) {
            slots[i] = i % N; /* prompt 0..7, candidates 8..N-11, window N-10..N-1 */
            sc[i] = (float)(i % 13);
        }
        if (cases[c].nan_head >= 0)
            sc[cases[c].nan_head * N + cases[c].nan_slot] = __builtin_nanf("");
        if (cases[c].bad_head >= 0)
            slots[cases[c].bad_head * N + cases[c].bad_slot] = cases[c].bad_value;
        kve_batch b = {9, KVE_SCORED, 1, &seq, 3, 3, 0, 0, N, 20, 10, slots, N, sc, N};
        for (int k = 0; k < s.n; k++) {
            kt_out o;
            kve_status st = kt_evict(s.ctx[k], &b, &o);
            kt_out_free(&o);
            ck_assert_msg(st != KVE_OK && strstr(kve_last_error(), cases[c].want),
                          "case %zu, %s: %s \"%s\", expected \"%s\"", c, s.name[k],
                          kve_status_string(st), kve_last_error(), cases[c].want);
        }
    }
    isa_set_close(&s);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(checks, checks_every_isa_adversarial),
        KVE_TEST(checks, checks_fused_decode_tables),
        KVE_TEST(checks, checks_follow_env_isa),
        KVE_TEST(checks, checks_lowest_head_named),
    };
    const kve_suite_spec spec = {"checks", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

/*
 * test_emu_score.c — kve_score's device body (common/score_body.h)
 * on the emulator against the CPU backend, over random problems: every
 * layout, page table and key type, shared and per-head tables, z-scores
 * and raw scores, accumulation, TriAttention and K-norm; blocks of 64
 * threads in warps of 32 and of 128 threads in warps of 64, grids of 1 and
 * of 7 blocks.
 *
 * Agreement (docs/SCORERS.md "Agreement and tolerances", per slot by
 * tests/lib/kve_score_tol.h): non-candidate slots exactly as the CPU leaves
 * them; raw scores bit for bit against the scalar ISA (the same float
 * operations in the same order) and z-scores within 1e-5 x (1 + |z|); the
 * CPU's best ISA (vector sums) within the bound for raw scores within 2e-5
 * x S, which grows as the candidates' std shrinks against their raw
 * scores. Candidates a few ulps apart get their exact z on every ISA and
 * the emulated device; keys that are permutations of one another (equal
 * norms) stay within the bound. Then a page
 * outside the cache seen only by the device surfaces at
 * kve_context_synchronize() as KVE_ERR_RANGE naming the row and slot, and
 * a call of 100 rows is one upload of its rows and one scorer launch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "kve_expect.h"
#include "kve_score_case.h"
#include "kve_score_tol.h"

static float *kve_run_cpu(kve_score_case *c, kve_cpu_isa isa, kve_status *st)
{
    kve_context *ctx = NULL;
    float *saved = (float *)malloc(c->n_scores * 4), *out = (float *)malloc(c->n_scores * 4);
    memcpy(saved, c->scores, c->n_scores * 4);
    *st = kve_context_create(KVE_BACKEND_CPU, &ctx);
    if (*st == KVE_OK)
        *st = kve_context_set_cpu_isa(ctx, isa);
    if (*st == KVE_OK)
        *st = kve_score(ctx, &c->d);
    memcpy(out, c->scores, c->n_scores * 4);
    memcpy(c->scores, saved, c->n_scores * 4);
    free(saved);
    kve_context_destroy(ctx);
    return out;
}

static int kve_close(float a, float b, float rel) { return fabsf(a - b) <= rel * (1 + fabsf(b)); }

/* The largest |got - want| / bound of any call (KVE_EMU_SCORE_WORST=1 prints it). */
static double kve_worst_ratio[2];

/* @p got against the scalar ISA's @p want: raw scores that agree within
 * rel x S give kve_score_tol.h's bounds (raw scores with rel 0: bit for bit). */
static void kve_compare(const char *what, uint64_t seed, const kve_score_case *c, const float *got,
                        const float *want, double rel)
{
    int exact = !(c->d.flags & KVE_SCORE_ZNORM) && rel == 0;
    double *tol = (double *)malloc(c->n_scores * sizeof *tol);
    kve_score_case_tol(c, want, rel, tol);
    for (size_t i = 0; i < c->n_scores; i++) {
        double e = fabs((double)got[i] - want[i]);
        int ok = exact || tol[i] == 0 ? memcmp(&got[i], &want[i], 4) == 0 : e <= tol[i];
        if (tol[i] > 0 && e / tol[i] > kve_worst_ratio[rel > 0])
            kve_worst_ratio[rel > 0] = e / tol[i];
        if (!ok) {
            KVE_EXPECT(0, "%s, case %llu (scorer %d, flags %u, dtype %d, dim %u, table %d): "
                          "score[%zu] = %.9g, CPU %.9g, bound %.3g", what,
                       (unsigned long long)seed, c->d.scorer, c->d.flags, c->d.keys.dtype,
                       c->d.keys.head_dim, c->d.keys.pages.kind, i, got[i], want[i], tol[i]);
            break;
        }
    }
    free(tol);
}

static void kve_one_case(uint64_t seed, kve_emu_pool *pool, uint32_t grid, int best_isa)
{
    kve_score_case c;
    kve_score_case_make(&c, seed, (int)(seed % 3 != 0));
    kve_status st;
    float *cpu = kve_run_cpu(&c, KVE_CPU_ISA_SCALAR, &st);
    KVE_EXPECT(st == KVE_OK, "case %llu: CPU: %s", (unsigned long long)seed, kve_last_error());
    if (best_isa != KVE_CPU_ISA_SCALAR) {
        float *vec = kve_run_cpu(&c, (kve_cpu_isa)best_isa, &st);
        kve_compare("vector CPU vs scalar CPU", seed, &c, vec, cpu, KVE_SCORE_VEC_REL);
        free(vec);
    }
    kve_context *emu = kve_emu_context_create();
    kve_emu_context_use(pool, grid, NULL);
    kve_emu_track(c.scores, c.n_scores * 4); /* the device's output, for the order check */
    st = kve_score(emu, &c.d);
    kve_emu_untrack(c.scores);
    KVE_EXPECT(st == KVE_OK, "case %llu: emulated: %s", (unsigned long long)seed,
               kve_last_error());
    st = kve_context_synchronize(emu);
    KVE_EXPECT(st == KVE_OK, "case %llu: emulated synchronize: %s", (unsigned long long)seed,
               kve_emu_context_message());
    kve_compare("emulated vs scalar CPU", seed, &c, c.scores, cpu, 0.0);
    kve_context_destroy(emu);
    free(cpu);
    kve_score_case_free(&c);
}

/* A block table entry the host never checks (device memory) points past
 * the cache: the device skips the key and raises a record. */
static void kve_device_page_error(kve_emu_pool *pool)
{
    for (uint64_t seed = 1;; seed++) {
        kve_score_case c;
        kve_score_case_make(&c, seed, 1);
        if (c.d.keys.pages.kind != KVE_PAGES_BLOCK_TABLE || c.rows[0].n_slots < 40 ||
            c.rows[0].window > 4) {
            kve_score_case_free(&c);
            continue;
        }
        for (uint32_t b = 0; b < c.d.keys.pages.blocks_per_row; b++)
            c.pages[b] = (int32_t)c.d.keys.pages.n_pages + 5;
        kve_context *emu = kve_emu_context_create();
        kve_emu_context_use(pool, 3, NULL);
        kve_status st = kve_score(emu, &c.d);
        KVE_EXPECT(st == KVE_OK, "bad page: the call itself: %s", kve_last_error());
        st = kve_context_synchronize(emu);
        KVE_EXPECT(st == KVE_ERR_RANGE && strstr(kve_emu_context_message(), "row 0, slot"),
                   "bad page: synchronize gave %s: %s", kve_status_string(st),
                   kve_emu_context_message());
        KVE_EXPECT(kve_context_synchronize(emu) == KVE_OK, "bad page: records not cleared");
        kve_context_destroy(emu);
        kve_score_case_free(&c);
        return;
    }
}

/* 100 rows in one call (K-norm, z-scores, bf16 keys in block tables):
 * one upload of the rows and exactly one scorer launch, one block per (row,
 * KV head, slot tile), with the CPU's scores. */
static void kve_many_rows_one_launch(kve_emu_pool *pool)
{
    enum { ROWS = 100, HEADS = 2, SLOTS = 40, DIM = 16, PAGE = 16, BLOCKS = 3 };
    static uint16_t keys[ROWS * BLOCKS * PAGE * HEADS * DIM];
    static int32_t pages[ROWS * BLOCKS], tabs[ROWS * HEADS * SLOTS];
    static float dev[ROWS * HEADS * SLOTS], cpu[ROWS * HEADS * SLOTS];
    static kve_score_row rows[ROWS];
    uint64_t x = 7;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        keys[i] = (uint16_t)(0x3c00u + kve_sc_below(&x, 0x400) - 0x200); /* bf16 near 0.01 */
    for (int i = 0; i < ROWS * BLOCKS; i++)
        pages[i] = (ROWS * BLOCKS - 1 - i);
    for (int i = 0; i < ROWS * HEADS * SLOTS; i++)
        tabs[i] = (int32_t)((i * 7) % SLOTS); /* every position once a table */
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = KVE_SCORER_KNORM;
    d.flags = KVE_SCORE_ZNORM;
    d.keys.base = keys;
    d.keys.dtype = KVE_DTYPE_BF16;
    d.keys.head_dim = DIM;
    d.keys.n_heads = HEADS;
    d.keys.layout = KVE_LAYOUT_NHD;
    d.keys.pages.page_size = PAGE;
    d.keys.pages.n_pages = ROWS * BLOCKS;
    d.keys.pages.kind = KVE_PAGES_BLOCK_TABLE;
    d.keys.pages.block_table = pages;
    d.keys.pages.blocks_per_row = BLOCKS;
    d.keys.pages.n_rows = ROWS;
    for (uint32_t r = 0; r < ROWS; r++) {
        kve_score_row *row = &rows[r];
        memset(row, 0, sizeof *row);
        row->table_offset = row->scores_offset = (uint64_t)r * HEADS * SLOTS;
        row->n_slots = SLOTS;
        row->prompt_len = 8;
        row->window = 4;
        row->cache_row = (int32_t)r;
    }
    d.n_rows = ROWS;
    d.rows = rows;
    d.slot_pos = tabs;
    d.slot_pos_stride_table = SLOTS;
    d.scores = dev;
    d.scores_stride_table = SLOTS;
    kve_context *c = NULL;
    KVE_EXPECT(kve_context_create(KVE_BACKEND_CPU, &c) == KVE_OK &&
                   kve_context_set_cpu_isa(c, KVE_CPU_ISA_SCALAR) == KVE_OK,
               "many rows: CPU context: %s", kve_last_error());
    d.scores = cpu;
    KVE_EXPECT(kve_score(c, &d) == KVE_OK, "many rows: CPU: %s", kve_last_error());
    kve_context_destroy(c);
    d.scores = dev;
    kve_context *emu = kve_emu_context_create();
    kve_emu_context_use(pool, 1000, NULL);
    kve_emu_launch_rec log[8];
    kve_emu_log_start(log, 8);
    kve_status st = kve_score(emu, &d);
    uint32_t n = kve_emu_log_stop();
    KVE_EXPECT(st == KVE_OK && kve_context_synchronize(emu) == KVE_OK, "many rows: %s %s",
               kve_last_error(), kve_emu_context_message());
    KVE_EXPECT(n == 2, "many rows: %u records, want the rows' upload and one launch", n);
    if (n == 2) {
        KVE_EXPECT(strcmp(log[0].what, "upload") == 0 &&
                       log[0].bytes == ROWS * sizeof(kve_score_row),
                   "many rows: first record %s of %llu bytes, want the upload of %zu", log[0].what,
                   (unsigned long long)log[0].bytes, ROWS * sizeof(kve_score_row));
        KVE_EXPECT(strcmp(log[1].what, "kve_score_kernel") == 0 && log[1].grid == ROWS * HEADS,
                   "many rows: second record %s on %llu blocks, want kve_score_kernel on %d",
                   log[1].what, (unsigned long long)log[1].grid, ROWS * HEADS);
    }
    for (int i = 0; i < ROWS * HEADS * SLOTS; i++)
        if (!kve_close(dev[i], cpu[i], 1e-5f)) {
            KVE_EXPECT(0, "many rows: score[%d] = %.9g, CPU %.9g", i, dev[i], cpu[i]);
            break;
        }
    kve_context_destroy(emu);
}

/* A K-norm z-score problem in @p c: one row of @p n slots holding
 * positions 0 .. n - 1 (all candidates), their f32 keys of @p dim elements
 * at @p keys in one page, into @p out. */
static void kve_one_row_knorm(kve_score_case *c, const float *keys, uint32_t dim, uint32_t n,
                              const int32_t *page, int32_t *tab, float *out)
{
    memset(c, 0, sizeof *c);
    c->rows[0].n_slots = n;
    kve_score_desc *d = &c->d;
    d->scorer = KVE_SCORER_KNORM;
    d->flags = KVE_SCORE_ZNORM;
    kve_key_cache *k = &d->keys;
    k->base = keys;
    k->dtype = KVE_DTYPE_F32;
    k->head_dim = dim;
    k->n_heads = 1;
    k->layout = KVE_LAYOUT_NHD;
    k->pages.page_size = n;
    k->pages.n_pages = 1;
    k->stride_head = k->stride_slot = dim * 4;
    k->stride_page = (size_t)n * dim * 4;
    k->pages.kind = KVE_PAGES_BLOCK_TABLE;
    k->pages.block_table = page;
    k->pages.blocks_per_row = 1;
    k->pages.n_rows = 1;
    for (uint32_t i = 0; i < n; i++)
        tab[i] = (int32_t)i;
    d->n_rows = 1;
    d->rows = c->rows;
    d->slot_pos = tab;
    d->slot_pos_stride_table = n;
    d->scores = out;
    d->scores_stride_table = n;
    c->n_scores = n;
}

/* z-scores of candidates whose raw scores lie a few ulps apart at 1000
 * (std / |mean| about 1e-7): K-norm of keys (1000 + k u, 0), u the float
 * ulp there, whose raw scores are exactly -(1000 + k u), so the exact z is
 * known. Every CPU ISA here and the emulated device give it to float
 * rounding: the mean kept in double (rounded to float, the mean of two
 * keys one ulp apart moves z by 1) and the std from the deviations (s2/n -
 * mean^2 cancels 13 of double's 16 digits here). */
static void kve_tiny_spread(kve_emu_pool *pool)
{
    static const int spreads[][6] = {{2, 0, 1}, {3, 0, 1, 2}, {5, 0, 1, 2, 3, 4}, {4, 0, 1, 1, 5},
                                     {5, 0, 3, 3, 3, 7}};
    const double u = ldexp(1.0, -14);
    for (size_t t = 0; t < sizeof spreads / sizeof spreads[0]; t++) {
        int n = spreads[t][0];
        float keys[16 * 2] = {0}, got[16];
        int32_t page = 0, tab[16];
        double mean = 0, ss = 0, want[16];
        for (int k = 0; k < n; k++) {
            keys[2 * k] = (float)(1000.0 + spreads[t][1 + k] * u);
            mean -= keys[2 * k] / (double)n;
        }
        for (int k = 0; k < n; k++)
            ss += (-(double)keys[2 * k] - mean) * (-(double)keys[2 * k] - mean);
        for (int k = 0; k < n; k++)
            want[k] = (-(double)keys[2 * k] - mean) / sqrt(ss / n);
        kve_score_case c;
        kve_one_row_knorm(&c, keys, 2, (uint32_t)n, &page, tab, got);
        for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512 + 1; isa++) {
            int ok = 1;
            kve_context *ctx = NULL;
            if (isa <= KVE_CPU_ISA_AVX512) {
                kve_cpu_isa_available((kve_cpu_isa)isa, &ok);
                if (ok && (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK ||
                           kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa) != KVE_OK))
                    ctx = NULL;
            } else if ((ctx = kve_emu_context_create()) != NULL) {
                kve_emu_context_use(pool, 1, NULL);
            }
            if (!ok)
                continue;
            kve_status st = ctx ? kve_score(ctx, &c.d) : KVE_ERR_INTERNAL;
            if (st == KVE_OK)
                st = kve_context_synchronize(ctx);
            KVE_EXPECT(st == KVE_OK, "tiny spread %zu, isa %d: %s", t, isa, kve_last_error());
            for (int k = 0; st == KVE_OK && k < n; k++)
                if (!(fabs(got[k] - want[k]) <= 1e-6 * (1 + fabs(want[k])))) {
                    KVE_EXPECT(0, "tiny spread %zu (%d keys, std/|mean| %.2g), %s %d: z[%d] = "
                                  "%.9g, exact %.9g", t, n, sqrt(ss / n) / -mean,
                               isa <= KVE_CPU_ISA_AVX512 ? "CPU ISA" : "emulated device", isa,
                               k, got[k], want[k]);
                    break;
                }
            kve_context_destroy(ctx);
        }
    }
}

/* Keys that are permutations of one another (K-norm, head_dim 128, f32):
 * equal norms, raw scores that differ only by each order's float rounding,
 * so the candidates' std is a few ulps and a vector ISA's z-scores differ
 * from the scalar ISA's by up to sqrt(n - 1): kve_score_tol.h's bound
 * (no promise beyond |z| <= sqrt(n - 1) where the std is within the raw
 * scores' rounding) holds; the emulated device, whose raw scores are the
 * scalar ISA's, agrees within 1e-5 x (1 + |z|). */
static void kve_permuted_keys(kve_emu_pool *pool, int best_isa)
{
    enum { DIM = 128, N = 7 };
    static float keys[N * DIM], out[3][N];
    static int32_t page = 0, tab[N];
    uint64_t x = 5;
    for (int e = 0; e < DIM; e++)
        keys[e] = 8.0f + kve_sc_unit(&x) * 4.0f; /* norms near 90: ulps of 8e-6 */
    for (int k = 1; k < N; k++) { /* a random shuffle of key 0 */
        memcpy(keys + k * DIM, keys, sizeof(float) * DIM);
        for (int e = DIM - 1; e > 0; e--) {
            uint32_t o = kve_sc_below(&x, (uint32_t)e + 1);
            float t = keys[k * DIM + e];
            keys[k * DIM + e] = keys[k * DIM + o];
            keys[k * DIM + o] = t;
        }
    }
    kve_score_case c;
    kve_one_row_knorm(&c, keys, DIM, N, &page, tab, out[0]);
    kve_score_desc *d = &c.d;
    kve_context *ctx = NULL;
    for (int v = 0; v < 2; v++) { /* the scalar ISA, then the best */
        d->scores = out[v];
        KVE_EXPECT(kve_context_create(KVE_BACKEND_CPU, &ctx) == KVE_OK &&
                       kve_context_set_cpu_isa(ctx, v ? (kve_cpu_isa)best_isa
                                                      : KVE_CPU_ISA_SCALAR) == KVE_OK &&
                       kve_score(ctx, d) == KVE_OK,
                   "permuted keys: CPU: %s", kve_last_error());
        kve_context_destroy(ctx);
    }
    d->scores = out[2];
    kve_context *emu = kve_emu_context_create();
    kve_emu_context_use(pool, 1, NULL);
    KVE_EXPECT(kve_score(emu, d) == KVE_OK && kve_context_synchronize(emu) == KVE_OK,
               "permuted keys: emulated: %s %s", kve_last_error(), kve_emu_context_message());
    kve_context_destroy(emu);
    kve_compare("permuted keys, vector CPU vs scalar CPU", 0, &c, out[1], out[0],
                KVE_SCORE_VEC_REL);
    kve_compare("permuted keys, emulated vs scalar CPU", 0, &c, out[2], out[0], 0.0);
    if (getenv("KVE_EMU_SCORE_WORST"))
        for (int i = 0; i < N; i++)
            printf("permuted keys: z[%d] scalar %.9g, vector %.9g, emulated %.9g\n", i, out[0][i],
                   out[1][i], out[2][i]);
}

int main(void)
{
    const char *env = getenv("KVE_EMU_CASES");
    uint64_t cases = env ? strtoull(env, NULL, 10) / 8 : 250;
    int best = KVE_CPU_ISA_SCALAR;
    for (int isa = KVE_CPU_ISA_AVX2; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int ok = 0;
        kve_cpu_isa_available((kve_cpu_isa)isa, &ok);
        best = ok ? isa : best;
    }
    kve_emu_pool *p64 = kve_emu_pool_create(64, 32), *p128 = kve_emu_pool_create(128, 64);
    if (!p64 || !p128) {
        fprintf(stderr, "FAIL: cannot create the emulator pools\n");
        return 1;
    }
    for (uint64_t s = 1; s <= cases; s++)
        kve_one_case(s, s % 2 ? p64 : p128, s % 4 < 2 ? 1 : 7, best);
    kve_device_page_error(p64);
    kve_many_rows_one_launch(p64);
    kve_tiny_spread(p64);
    kve_tiny_spread(p128);
    kve_permuted_keys(p64, best);
    kve_emu_pool_destroy(p64);
    kve_emu_pool_destroy(p128);
    if (getenv("KVE_EMU_SCORE_WORST"))
        printf("worst error / bound: emulated %.3g, vector %.3g\n", kve_worst_ratio[0],
               kve_worst_ratio[1]);
    printf("test_emu_score: %llu cases, %d failures\n", (unsigned long long)cases, kve_failures);
    return kve_failures != 0;
}

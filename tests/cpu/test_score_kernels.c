/* test_score_kernels.c — the CPU scorers' fast paths (issue 39) on every
 * score table this machine runs, held to what they replace: a table's
 * candidates (kve_score_kernels.cands) against score_body.h's per-slot rule
 * with kve_score_bound_seq's bound, on steady-state, holed, duplicated,
 * huge and tiny tables; the streaming kernels (knorm_keys, group_keys)
 * against the same table's per-key kernels (load, then knorm / group), bit
 * for bit, for every key type, head_dim 2..512, GQA groups 1..8, odd and
 * even key counts, keys scattered at an offset; TriAttention rows sharing
 * a round start in one call against a call per row. Reaches the kernel
 * tables, so it links the static library. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kve_cpu_kernels.h"
#include "kve_score_case.h"
#include "kve_suite.h"
#include "kve_test_util.h"
#include "score_body.h"

/* The score tables this machine runs (scalar first). */
static int tables_here(const kve_score_kernels **out)
{
    int n = 0;
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        if (avail)
            out[n++] = kve_score_kernels_get((kve_cpu_isa)isa);
    }
    return n;
}

/* A table of n slots shaped by kind. */
static void fill_table(uint64_t *rng, int32_t *tab, uint32_t n, int kind)
{
    uint32_t base = kind == 3 ? 0x7fffff00u - n : kind == 4 ? 0x00fffff0u : 0;
    for (uint32_t s = 0; s < n; s++)
        tab[s] = (int32_t)(base + s);
    for (uint32_t s = n; s > 1; s--) { /* shuffled, the prompt's slots too */
        uint32_t j = kt_below(rng, s);
        int32_t x = tab[s - 1];
        tab[s - 1] = tab[j];
        tab[j] = x;
    }
    for (uint32_t s = 0; s < n; s++) {
        uint32_t r = kt_below(rng, 8);
        if (kind == 1 && r == 0)
            tab[s] = -1; /* empty */
        else if (kind == 2 && r < 3 && s)
            tab[s] = tab[kt_below(rng, s)]; /* repeated positions */
        else if (kind == 5)
            tab[s] = (int32_t)(kt_next(rng) & 0x7fffffff); /* spread over every byte */
    }
}

static void check_cands(const kve_score_kernels *kk, const int32_t *tab, const kve_score_row *r,
                        uint32_t *gen, uint32_t *cand, uint32_t *tmp)
{
    uint32_t x = kve_score_bound_seq(tab, r), want = 0;
    uint32_t n = kk->cands(tab, r, gen, cand, tmp);
    for (uint32_t s = 0; s < r->n_slots; s++) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x))
            continue;
        ck_assert_msg(want < n && cand[want] == s,
                      "isa %d, %u slots, P %u, W %u: candidate %u is slot %u, got %s %u", kk->isa,
                      r->n_slots, r->prompt_len, r->window, want, s, want < n ? "slot" : "only",
                      want < n ? cand[want] : n);
        want++;
    }
    ck_assert_msg(n == want, "isa %d, %u slots, P %u, W %u: %u candidates, got %u", kk->isa,
                  r->n_slots, r->prompt_len, r->window, want, n);
}

START_TEST(cands_match_bound)
{
    const kve_score_kernels *kt[3];
    int nt = tables_here(kt);
    enum { MAX = 2200 };
    int32_t *tab = (int32_t *)malloc(MAX * 4);
    uint32_t *gen = (uint32_t *)malloc((MAX + 16) * 4), *cand = (uint32_t *)malloc((MAX + 16) * 4);
    uint32_t *tmp = (uint32_t *)malloc((MAX + 16) * 4);
    uint64_t rng = 39;
    for (int iter = 0; iter < 6000; iter++) {
        uint32_t n = iter % 50 == 0 ? 2112 : kt_below(&rng, iter % 3 ? 70 : 300);
        int kind = iter % 6;
        fill_table(&rng, tab, n, kind);
        uint32_t lo = kind == 3 ? 0x7fffff00u - n : kind == 4 ? 0x00fffff0u : 0;
        kve_score_row r = {0, 0, n, 0, 0, 0, 0, 0};
        r.prompt_len = iter % 7 == 0 ? 0 : lo + kt_below(&rng, n + 2);
        r.window = iter % 5 == 0 ? 0 : iter % 13 == 0 ? n + kt_below(&rng, 3) : kt_below(&rng, n / 2 + 2);
        if (iter % 50 == 0)
            r.prompt_len = lo + 1024, r.window = 64;
        for (int t = 0; t < nt; t++)
            check_cands(kt[t], tab, &r, gen, cand, tmp);
    }
    free(tab);
    free(gen);
    free(cand);
    free(tmp);
}
END_TEST

/* A key element of type t with a random finite value in [-2, 2). */
static void put_elem(unsigned char *p, uint32_t t, uint64_t *rng)
{
    float v = (float)((int32_t)(kt_next(rng) >> 40) - (1 << 23)) / (float)(1 << 22);
    uint32_t b;
    memcpy(&b, &v, 4);
    if (t == KVE_DTYPE_F32) {
        memcpy(p, &v, 4);
    } else if (t == KVE_DTYPE_BF16) {
        uint16_t h = (uint16_t)(b >> 16);
        memcpy(p, &h, 2);
    } else { /* f16: sign, 5-bit exponent, 10 bits; subnormals and zeros too */
        uint16_t h = (uint16_t)(kt_next(rng) & 0xfbff);
        memcpy(p, &h, 2);
    }
}

START_TEST(stream_matches_per_key)
{
    const kve_score_kernels *kt[3];
    int nt = tables_here(kt);
    static const uint32_t dims[] = {2, 8, 16, 30, 32, 64, 96, 128, 256, 512};
    static const uint32_t counts[] = {0, 1, 2, 3, 5, 8, 17, 64};
    enum { SLOTS = 80, HEADS = 3 };
    uint64_t rng = 3939;
    for (uint32_t t = 0; t < 3; t++)
        for (size_t di = 0; di < KVE_COUNT(dims); di++) {
            uint32_t dim = dims[di], nf = dim / 2, es = t == KVE_DTYPE_F32 ? 4 : 2;
            size_t entry = (size_t)dim * es, bytes = (size_t)SLOTS * HEADS * entry;
            unsigned char *cache = (unsigned char *)malloc(bytes);
            for (size_t i = 0; i < bytes / es; i++)
                put_elem(cache + i * es, t, &rng);
            float *coef = (float *)malloc((size_t)8 * 3 * nf * 4);
            for (size_t i = 0; i < (size_t)8 * 3 * nf; i++)
                coef[i] = (float)((int32_t)(kt_next(&rng) >> 44) - (1 << 19)) / (float)(1 << 18);
            float *key = (float *)malloc((4 * nf + 32) * 4), *mag = (float *)malloc((2 * nf + 32) * 4);
            float got[64 * 8], want[64 * 8];
            const unsigned char *kp[64];
            for (size_t ci = 0; ci < KVE_COUNT(counts); ci++) {
                uint32_t n = counts[ci], group = 1 + (uint32_t)(ci + di) % 8;
                size_t off = (size_t)kt_below(&rng, HEADS) * entry; /* a head's offset */
                for (uint32_t c = 0; c < n; c++) /* scattered slots, NHD: a slot holds HEADS entries */
                    kp[c] = cache + (size_t)kt_below(&rng, SLOTS) * HEADS * entry;
                for (int i = 0; i < nt; i++) {
                    const kve_score_kernels *kk = kt[i];
                    if (!kk->knorm_keys && !kk->group_keys)
                        continue;
                    ck_assert_msg(kk->knorm_keys && kk->group_keys, "isa %d: one stream kernel",
                                  kk->isa);
                    memset(got, 0x55, sizeof got);
                    memset(want, 0x55, sizeof want);
                    kk->knorm_keys(kp, off, n, t, dim, got, 3);
                    for (uint32_t c = 0; c < n; c++) {
                        kk->load(kp[c] + off, t, dim, key);
                        want[c * 3] = kk->knorm(key, dim);
                    }
                    ck_assert_msg(!memcmp(got, want, sizeof got),
                                  "isa %d dtype %u dim %u n %u: knorm_keys differs", kk->isa, t,
                                  dim, n);
                    memset(got, 0x55, sizeof got);
                    memset(want, 0x55, sizeof want);
                    kk->group_keys(coef, kp, off, n, t, nf, group, key, mag, got, 8);
                    for (uint32_t c = 0; c < n; c++) {
                        kk->load(kp[c] + off, t, dim, key);
                        kk->group(coef, key, mag, nf, group, want + c * 8);
                    }
                    for (uint32_t c = 0; c < n * 8; c++)
                        ck_assert_msg(!memcmp(&got[c], &want[c], 4),
                                      "isa %d dtype %u dim %u n %u group %u: group_keys[%u] = "
                                      "%.9g, per key %.9g",
                                      kk->isa, t, dim, n, group, c, (double)got[c],
                                      (double)want[c]);
                }
            }
            free(cache);
            free(coef);
            free(key);
            free(mag);
        }
}
END_TEST

/* TriAttention rows of one call that start their rounds at the same
 * position share the phase factors: the call gives what a call per row gives. */
START_TEST(rows_sharing_round_start)
{
    int tried = 0;
    for (uint64_t seed = 1; seed < 400 && tried < 20; seed++) {
        kve_score_case c;
        kve_score_case_make(&c, seed, 1);
        if (c.d.n_rows < 3 || (c.d.flags & KVE_SCORE_ACCUMULATE)) {
            kve_score_case_free(&c);
            continue;
        }
        tried++;
        for (uint32_t r = 0; r < c.d.n_rows; r++) /* rows 0, 2, 4 share; 1, 3 another */
            c.rows[r].round_start = r % 2 ? 777u : 4242u;
        kve_context *ctx = NULL;
        KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
        KT_OK(kve_score(ctx, &c.d));
        float *one = (float *)malloc(c.n_scores * 4);
        memcpy(one, c.scores, c.n_scores * 4);
        kve_score_desc d = c.d;
        d.n_rows = 1;
        for (uint32_t r = 0; r < c.d.n_rows; r++) {
            d.rows = &c.rows[r];
            KT_OK(kve_score(ctx, &d));
        }
        ck_assert_msg(!memcmp(one, c.scores, c.n_scores * 4),
                      "case %llu: one call of %u rows differs from a call per row",
                      (unsigned long long)seed, c.d.n_rows);
        free(one);
        kve_context_destroy(ctx);
        kve_score_case_free(&c);
    }
    ck_assert_int_eq(tried, 20);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(score_kernels, cands_match_bound),
        KVE_TEST(score_kernels, stream_matches_per_key),
        KVE_TEST(score_kernels, rows_sharing_round_start),
    };
    const kve_suite_spec spec = {"cpu_score_kernels", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

/*
 * test_gpu_score.c — kve_score on a GPU backend (argv[1]: cuda or hip)
 * against the CPU's scalar ISA over the random problems of
 * tests/lib/kve_score_case.h: non-candidates exactly as the CPU leaves them,
 * scores within kve_score_tol.h's bound (docs/SCORERS.md "Agreement and
 * tolerances") for raw scores within 2e-5 x S of the scalar ISA's (the
 * device contracts multiply-adds; the moments are its own order's sums).
 * Exit 77 when the backend or a device is missing.
 *
 * Built a second time against the emulator (tests/emu, KVE_TEST_EMU), it
 * takes argv[1] = emu32 or emu64: the same cases on the emulated device with
 * the GPU's own launch plan, warps of 32 or 64, exactly sized device
 * allocations (under ASan a read past one faults, as memcheck reports it on
 * a GPU) and the order check (kve_emu_order_check) on every launch; its raw
 * scores are the scalar ISA's bit for bit, so the bound is that of equal
 * raw scores (rel 0).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_expect.h"
#include "kve_score_case.h"
#include "kve_score_tol.h"
#ifdef KVE_TEST_EMU
#include "emu_backend.h"
#endif

static void *to_dev(kve_context *g, const void *host, size_t bytes, void **list, int *n)
{
    if (!host)
        return NULL;
    void *p = NULL;
    if (kve_alloc(g, bytes ? bytes : 1, &p) != KVE_OK ||
        kve_copy(g, p, host, bytes, KVE_COPY_HOST_TO_BACKEND) != KVE_OK)
        return NULL;
    list[(*n)++] = p;
    return p;
}

#ifdef KVE_TEST_EMU
static const char *kve_device_error(void) { return kve_emu_context_message(); }
#define KVE_DEVICE_REL 0.0
#else
static const char *kve_device_error(void) { return kve_last_error(); }
#define KVE_DEVICE_REL KVE_SCORE_VEC_REL
#endif

static void run_case(kve_context *cpu, kve_context *g, uint64_t seed)
{
    kve_score_case c;
    kve_score_case_make(&c, seed, (int)(seed % 3 != 0));
    float *orig = (float *)malloc(c.n_scores * 4), *dev_out = (float *)malloc(c.n_scores * 4);
    memcpy(orig, c.scores, c.n_scores * 4);
    kve_score_desc d = c.d;
    void *bufs[16];
    int n = 0;
    kve_key_cache *k = &d.keys;
    size_t es = k->dtype == KVE_DTYPE_F32 ? 4 : 2;
    size_t nf = k->head_dim / 2, nq = (size_t)k->n_heads * d.tri.group;
    size_t blocks = k->pages.blocks_per_row ? k->pages.blocks_per_row : 1;
    k->base = to_dev(g, c.keys, (size_t)k->pages.n_pages * k->pages.page_size * k->n_heads * k->head_dim * es,
                     bufs, &n);
    k->pages.block_table = (const int32_t *)to_dev(g, k->pages.block_table, (size_t)k->pages.n_rows * blocks * 4,
                                             bufs, &n);
    /* indptr's last entry counts the indices (blocks_per_row is 0 there) */
    size_t n_indices = k->pages.indptr ? (size_t)k->pages.indptr[k->pages.n_rows] : 0;
    k->pages.indices = (const int32_t *)to_dev(g, k->pages.indices, n_indices * 4, bufs, &n);
    k->pages.indptr = (const int32_t *)to_dev(g, k->pages.indptr, (k->pages.n_rows + 1) * 4, bufs, &n);
    k->pages.last_page_len = (const int32_t *)to_dev(g, k->pages.last_page_len, k->pages.n_rows * 4, bufs, &n);
    d.tri.q_mean = (const float *)to_dev(g, c.q_mean, nq * nf * 8, bufs, &n);
    d.tri.q_abs_mean = (const float *)to_dev(g, c.q_abs, nq * nf * 4, bufs, &n);
    d.tri.omega = (const float *)to_dev(g, c.omega, nf * 4, bufs, &n);
    d.tri.freq_scale_sq = (const float *)to_dev(g, c.s2, nf * 4, bufs, &n);
    d.tri.offsets = (const float *)to_dev(g, c.offsets, d.tri.n_offsets * 4, bufs, &n);
    /* the case's tables and scores are the same size */
    d.slot_pos = (const int32_t *)to_dev(g, c.tabs, c.n_scores * 4, bufs, &n);
    d.scores = (float *)to_dev(g, c.scores, c.n_scores * 4, bufs, &n);
    kve_status st = kve_score(g, &d);
    if (st == KVE_OK)
        st = kve_context_synchronize(g);
    KVE_EXPECT(st == KVE_OK, "case %llu: device: %s", (unsigned long long)seed, kve_device_error());
    kve_copy(g, dev_out, d.scores, c.n_scores * 4, KVE_COPY_BACKEND_TO_HOST);
    st = kve_score(cpu, &c.d);
    KVE_EXPECT(st == KVE_OK, "case %llu: CPU: %s", (unsigned long long)seed, kve_last_error());
    double *tol = (double *)malloc(c.n_scores * sizeof *tol);
    kve_score_case_tol(&c, c.scores, KVE_DEVICE_REL, tol);
    for (size_t i = 0; i < c.n_scores; i++)
        if (!(fabs((double)dev_out[i] - c.scores[i]) <= tol[i])) {
            KVE_EXPECT(0, "case %llu: score[%zu] device %.9g, CPU %.9g (was %g), bound %.3g",
                       (unsigned long long)seed, i, dev_out[i], c.scores[i], orig[i], tol[i]);
            break;
        }
    free(tol);
    for (int i = 0; i < n; i++)
        kve_free(g, bufs[i]);
    free(orig);
    free(dev_out);
    kve_score_case_free(&c);
}

/* The context under test, NULL with a usage error (2) or a skip (77) in
 * *rc. */
static kve_context *kve_device_context(const char *name, int *rc)
{
    kve_context *g = NULL;
#ifdef KVE_TEST_EMU
    uint32_t warp = strcmp(name, "emu32") == 0 ? 32 : strcmp(name, "emu64") == 0 ? 64 : 0;
    *rc = 2;
    if (!warp || !(g = kve_emu_context_create()))
        return NULL;
    kve_emu_context_device_plan(warp);
    kve_emu_order_check(1);
    return g;
#else
    kve_backend b;
    int avail = 0;
    *rc = 2;
    if (kve_backend_from_name(name, &b) != KVE_OK)
        return NULL;
    *rc = 77;
    if (kve_backend_available(b, &avail) != KVE_OK || !avail || kve_context_create(b, &g) != KVE_OK)
        printf("test_gpu_score: %s not available here: skipped\n", name);
    return g;
#endif
}

int main(int argc, char **argv)
{
    int rc = 2;
    kve_context *g = argc == 2 ? kve_device_context(argv[1], &rc) : NULL, *cpu = NULL;
    if (!g) {
        if (rc == 2)
            fprintf(stderr, "usage: test_gpu_score cuda|hip (emulator build: emu32|emu64)\n");
        return rc;
    }
    if (kve_context_create(KVE_BACKEND_CPU, &cpu) != KVE_OK ||
        kve_context_set_cpu_isa(cpu, KVE_CPU_ISA_SCALAR) != KVE_OK)
        return 1;
    const char *env = getenv("KVE_GPU_SCORE_CASES");
    uint64_t cases = env && *env ? strtoull(env, NULL, 10) : 400;
    for (uint64_t s = 1; s <= cases; s++)
        run_case(cpu, g, s);
    kve_context_destroy(g);
    kve_context_destroy(cpu);
    printf("test_gpu_score %s: %llu cases, %d failures\n", argv[1], (unsigned long long)cases,
           kve_failures);
    return kve_failures != 0;
}

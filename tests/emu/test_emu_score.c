/*
 * test_emu_score.c — kve_score's device body (kernels_cuda/score_body.h)
 * on the emulator against the CPU backend, over random problems: every
 * layout, page table and key type, shared and per-head tables, z-scores
 * and raw scores, accumulation, TriAttention and K-norm; blocks of 64
 * threads in warps of 32 and of 128 threads in warps of 64, grids of 1 and
 * of 7 blocks.
 *
 * Agreement: non-candidate slots exactly as the CPU leaves them; raw
 * scores bit for bit against the scalar ISA (the same float operations in
 * the same order); z-scores within 1e-5 x (1 + |score|) (the per-head mean
 * and deviation are sums in double whose order differs), and within 1e-4 x
 * (1 + |score|) against the CPU's best ISA (vector sums). Then a page
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

static void kve_compare(const char *what, uint64_t seed, const kve_score_case *c, const float *got,
                        const float *want, float rel)
{
    int exact = !(c->d.flags & KVE_SCORE_ZNORM) && rel == 0;
    for (size_t i = 0; i < c->n_scores; i++) {
        int ok = exact ? memcmp(&got[i], &want[i], 4) == 0 : kve_close(got[i], want[i], rel);
        if (!ok) {
            KVE_EXPECT(0, "%s, case %llu (scorer %d, flags %u, dtype %d, table %d): score[%zu] "
                          "= %.9g, CPU %.9g", what, (unsigned long long)seed, c->d.scorer,
                       c->d.flags, c->d.keys.dtype, c->d.keys.page_table, i, got[i], want[i]);
            return;
        }
    }
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
        kve_compare("vector CPU vs scalar CPU", seed, &c, vec, cpu, 1e-4f);
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
    kve_compare("emulated vs scalar CPU", seed, &c, c.scores, cpu,
                (c.d.flags & KVE_SCORE_ZNORM) ? 1e-5f : 0.0f);
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
        if (c.d.keys.page_table != KVE_PAGES_BLOCK_TABLE || c.rows[0].n_slots < 40 ||
            c.rows[0].window > 4) {
            kve_score_case_free(&c);
            continue;
        }
        for (uint32_t b = 0; b < c.d.keys.blocks_per_row; b++)
            c.pages[b] = (int32_t)c.d.keys.n_pages + 5;
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
    d.keys.page_size = PAGE;
    d.keys.n_pages = ROWS * BLOCKS;
    d.keys.page_table = KVE_PAGES_BLOCK_TABLE;
    d.keys.block_table = pages;
    d.keys.blocks_per_row = BLOCKS;
    d.keys.n_rows = ROWS;
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
    kve_emu_pool_destroy(p64);
    kve_emu_pool_destroy(p128);
    printf("test_emu_score: %llu cases, %d failures\n", (unsigned long long)cases, kve_failures);
    return kve_failures != 0;
}

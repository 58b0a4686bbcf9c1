/*
 * test_score.c — kve_score and kve_state_score in C: a K-norm problem whose
 * answers are exact (norms 5, 10, 1, 2 among SPEC §3's candidates), the
 * z-scores, weight and accumulation; every argument check, each with its
 * status and a message naming the field; the calibration loader's checks
 * on files written here.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kve_expect.h"
#include "kvevict.h"

/* One row, one head, head_dim 2, slots 0..7 holding positions 0..5 (slots
 * 6, 7 empty); P = 1, W = 1: positions 1..4 are the candidates. */
static float g_keys[8][2] = {{9, 9}, {3, 4}, {6, 8}, {0, 1}, {2, 0}, {7, 7}, {0, 0}, {0, 0}};
static int32_t g_tab[8] = {0, 1, 2, 3, 4, 5, -1, -1};
static float g_out[8];
static kve_score_row g_row;

static kve_score_desc base_desc(void)
{
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = KVE_SCORER_KNORM;
    d.keys.base = g_keys;
    d.keys.dtype = KVE_DTYPE_F32;
    d.keys.head_dim = 2;
    d.keys.n_heads = 1;
    d.keys.layout = KVE_LAYOUT_HND;
    d.keys.page_size = 8;
    d.keys.n_pages = 1;
    d.keys.page_table = KVE_PAGES_NONE;
    d.keys.n_rows = 1;
    g_row = (kve_score_row){0, 0, 8, 1, 1, 6, 0, 0};
    d.n_rows = 1;
    d.rows = &g_row;
    d.slot_pos = g_tab;
    d.scores = g_out;
    return d;
}

static void test_known(kve_context *ctx)
{
    kve_score_desc d = base_desc();
    for (int i = 0; i < 8; i++)
        g_out[i] = 99;
    KVE_EXPECT(kve_score(ctx, &d) == KVE_OK, "raw: %s", kve_last_error());
    const float raw[8] = {0, -5, -10, -1, -2, 0, 0, 0};
    KVE_EXPECT(memcmp(g_out, raw, sizeof raw) == 0, "raw K-norm: got %g %g %g %g", g_out[1],
               g_out[2], g_out[3], g_out[4]);
    /* mean -4.5, biased std 3.5 */
    d.flags = KVE_SCORE_ZNORM;
    d.weight = 2;
    KVE_EXPECT(kve_score(ctx, &d) == KVE_OK, "z: %s", kve_last_error());
    const double z[4] = {-0.5 / 3.5, -5.5 / 3.5, 3.5 / 3.5, 2.5 / 3.5};
    for (int i = 0; i < 4; i++)
        KVE_EXPECT(fabs(g_out[1 + i] - 2 * z[i]) < 1e-6, "z[%d] = %g, expected %g", i,
                   g_out[1 + i], 2 * z[i]);
    KVE_EXPECT(g_out[0] == 0 && g_out[5] == 0 && g_out[6] == 0, "non-candidates not 0");
    float before = g_out[1];
    d.flags |= KVE_SCORE_ACCUMULATE;
    g_out[0] = 7;
    KVE_EXPECT(kve_score(ctx, &d) == KVE_OK, "acc: %s", kve_last_error());
    KVE_EXPECT(fabsf(g_out[1] - 2 * before) < 1e-6f && g_out[0] == 7,
               "accumulate: %g (was %g), slot 0 %g", g_out[1], before, g_out[0]);
    /* the window takes the newest generated positions: W = 4 leaves only position 1 */
    g_row.window = 4;
    d = base_desc();
    g_row.window = 4;
    KVE_EXPECT(kve_score(ctx, &d) == KVE_OK && g_out[1] == -5 && g_out[2] == 0,
               "window 4: %g %g", g_out[1], g_out[2]);
}

typedef struct {
    const char *what;
    kve_status status;
    const char *word;
} expect_err;

static void check_err(kve_context *ctx, kve_score_desc *d, expect_err e)
{
    kve_status st = kve_score(ctx, d);
    KVE_EXPECT(st == e.status && strstr(kve_last_error(), e.word),
               "%s: got %s \"%s\", expected %s naming %s", e.what, kve_status_string(st),
               kve_last_error(), kve_status_string(e.status), e.word);
}

static void test_errors(kve_context *ctx)
{
    kve_score_desc d = base_desc();
    KVE_EXPECT(kve_score(NULL, &d) == KVE_ERR_NULL, "ctx NULL");
    KVE_EXPECT(kve_score(ctx, NULL) == KVE_ERR_NULL, "desc NULL");
#define CASE(field_set, st, word)                                                                \
    do {                                                                                         \
        d = base_desc();                                                                         \
        field_set;                                                                               \
        check_err(ctx, &d, (expect_err){#field_set, st, word});                                  \
    } while (0)
    CASE(d.scorer = 0, KVE_ERR_INVALID, "desc.scorer");
    CASE(d.flags = 8, KVE_ERR_INVALID, "desc.flags");
    CASE(d.weight = NAN, KVE_ERR_INVALID, "desc.weight");
    CASE(d.keys.base = NULL, KVE_ERR_NULL, "desc.keys.base");
    CASE(d.keys.dtype = KVE_DTYPE_FP8_E4M3, KVE_ERR_INVALID, "desc.keys.dtype");
    CASE(d.keys.head_dim = 3, KVE_ERR_RANGE, "desc.keys.head_dim");
    CASE(d.keys.head_dim = 1024, KVE_ERR_RANGE, "desc.keys.head_dim");
    CASE(d.keys.n_heads = 0, KVE_ERR_RANGE, "desc.keys.n_heads");
    CASE(d.keys.layout = 2, KVE_ERR_INVALID, "desc.keys.layout");
    CASE(d.keys.page_table = 4, KVE_ERR_INVALID, "desc.keys.page_table");
    CASE(d.keys.page_size = 0, KVE_ERR_RANGE, "desc.keys.page_size");
    CASE(d.keys.n_pages = 0, KVE_ERR_RANGE, "desc.keys.n_pages");
    CASE(d.keys.n_rows = 0, KVE_ERR_RANGE, "desc.keys.n_rows");
    CASE(d.keys.n_rows = 2, KVE_ERR_RANGE, "desc.keys.n_rows");
    CASE(d.keys.page_table = KVE_PAGES_BLOCK_TABLE, KVE_ERR_NULL, "desc.keys.block_table");
    CASE(d.keys.page_table = KVE_PAGES_INDPTR, KVE_ERR_NULL, "desc.keys.indptr");
    CASE(d.keys.base = (const char *)g_keys + 2, KVE_ERR_INVALID, "desc.keys.base");
    CASE(d.keys.stride_page = (SIZE_MAX / 2) & ~(size_t)3; d.keys.n_pages = 4; d.keys.n_rows = 1,
         KVE_ERR_OVERFLOW, "desc.keys");
    CASE(d.heads_per_table = 3, KVE_ERR_RANGE, "desc.heads_per_table");
    CASE(d.rows = NULL, KVE_ERR_NULL, "desc.rows");
    CASE(d.slot_pos = NULL, KVE_ERR_NULL, "desc.slot_pos");
    CASE(d.scores = NULL, KVE_ERR_NULL, "desc.scores");
    CASE(g_row.cache_row = 1, KVE_ERR_RANGE, "desc.rows[0].cache_row");
    CASE(g_row.n_slots = 0x80000000u, KVE_ERR_RANGE, "desc.rows[0].n_slots");
    CASE(d.keys.page_size = 4; d.keys.n_pages = 2, KVE_ERR_RANGE, "slot 4: not a slot of its row");
    CASE(g_tab[3] = -2, KVE_ERR_RANGE, "desc.slot_pos[row 0][table 0][slot 3]");
    g_tab[3] = 3;
    /* two rows writing one output row */
    kve_score_row two[2];
    CASE(two[0] = two[1] = g_row; d.rows = two; d.n_rows = 2; d.keys.n_rows = 1;
         two[1].cache_row = 0, KVE_ERR_ALIAS, "output rows overlap");
    /* TriAttention's own fields */
    float qm[4] = {1, 0, 1, 0}, qa[2] = {1, 1}, off = NAN;
    CASE(d.scorer = KVE_SCORER_TRIATTENTION, KVE_ERR_RANGE, "desc.tri.group");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1, KVE_ERR_NULL, "desc.tri.q_mean");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm,
         KVE_ERR_NULL, "desc.tri.q_abs_mean");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa, KVE_ERR_RANGE, "desc.tri.rope_theta");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa; d.tri.rope_theta = 1e4; d.tri.n_offsets = 1, KVE_ERR_INVALID,
         "desc.tri.offsets");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa; d.tri.rope_theta = 1e4; d.tri.n_offsets = 1;
         d.tri.offsets = &off, KVE_ERR_INVALID, "desc.tri.offsets[0]");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa; d.tri.rope_theta = 1e4; d.tri.n_offsets = 65;
         d.tri.offsets = &off, KVE_ERR_RANGE, "desc.tri.n_offsets");
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 300; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa; d.tri.rope_theta = 1e4, KVE_ERR_RANGE, "desc.heads_per_table");
    qm[1] = INFINITY;
    CASE(d.scorer = KVE_SCORER_TRIATTENTION; d.tri.group = 1; d.tri.q_mean = qm;
         d.tri.q_abs_mean = qa; d.tri.rope_theta = 1e4, KVE_ERR_INVALID, "desc.tri.q_mean[1]");
#undef CASE
}

static void test_state_errors(kve_context *ctx)
{
    kve_state_desc sd = {{1, 0, 16, 4, 4}, 2, 2, 1, 0, 0, 64, 0};
    kve_state *s = NULL;
    KVE_EXPECT(kve_state_create(ctx, &sd, NULL, 0, &s) == KVE_OK, "state: %s", kve_last_error());
    KVE_EXPECT(kve_state_admit(s, 0, 9, 4) == KVE_OK, "admit");
    uint32_t rows[2] = {0, 0}, n_new[2] = {4, 1}, cap = 0;
    KVE_EXPECT(kve_state_append(s, 1, rows, n_new, NULL) == KVE_OK, "append");
    kve_schedule_capacity(&sd.schedule, 4, &cap);
    float out[2 * 64];
    kve_score_desc d = base_desc();
    d.keys.n_rows = 2;
    d.keys.n_pages = 2;
    struct {
        uint32_t n, layer;
        const uint32_t *rows;
        size_t sr, st;
        kve_status status;
        const char *word;
    } cases[] = {
        {1, 2, rows, 128, 64, KVE_ERR_RANGE, "table_layer"},
        {2, 0, rows, 128, 64, KVE_ERR_INVALID, "listed twice"},
        {1, 0, rows + 1, 128, 64, KVE_ERR_INVALID, "not an active row"},
        {1, 0, rows, 64, 64, KVE_ERR_RANGE, "scores_stride_row"},
    };
    rows[1] = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t nn[2] = {1, 1};
        if (i == 2) {
            static const uint32_t one = 1;
            cases[i].rows = &one;
        }
        kve_status st = kve_state_score(s, cases[i].n, cases[i].rows, nn, cases[i].layer, &d, out,
                                        cases[i].sr, cases[i].st);
        KVE_EXPECT(st == cases[i].status && strstr(kve_last_error(), cases[i].word),
                   "state case %zu: %s \"%s\"", i, kve_status_string(st), kve_last_error());
    }
    /* more than W tokens before the round */
    uint32_t big = cap, r0 = 0;
    kve_status st = kve_state_score(s, 1, &r0, &big, 0, &d, out, 128, 64);
    KVE_EXPECT(st == KVE_ERR_INVALID && strstr(kve_last_error(), "window"),
               "too many tokens before the round: %s", kve_last_error());
    kve_state_destroy(s);
}

static void test_stats_file(void)
{
    const char *path = "test_score_stats.bin";
    unsigned char h[32 + 12] = "KVETRIST";
    uint32_t v[4] = {1, 1, 1, 2};
    memcpy(h + 8, v, 16);
    double theta = 1e4;
    memcpy(h + 24, &theta, 8);
    float body[3] = {0.5f, -0.25f, 1.0f};
    memcpy(h + 32, body, 12);
    FILE *f = fopen(path, "wb");
    fwrite(h, 1, sizeof h, f);
    fclose(f);
    kve_triattention_stats s;
    KVE_EXPECT(kve_triattention_stats_load(path, &s) == KVE_OK && s.n_layers == 1 &&
                   s.head_dim == 2 && s.q_mean[1] == -0.25f && s.q_abs_mean[0] == 1.0f &&
                   s.rope_theta == 1e4,
               "stats load: %s", kve_last_error());
    kve_triattention_stats_free(&s);
    KVE_EXPECT(s.q_mean == NULL, "stats free");
    h[32 + 8 + 3] = 0xff; /* q_abs_mean = NaN */
    f = fopen(path, "wb");
    fwrite(h, 1, sizeof h, f);
    fclose(f);
    KVE_EXPECT(kve_triattention_stats_load(path, &s) == KVE_ERR_INVALID &&
                   strstr(kve_last_error(), "q_abs_mean[0]") && s.q_mean == NULL,
               "NaN stats: %s", kve_last_error());
    /* A header promising 65536 x 65536 x 256 pairs (12 TiB) over a 12-byte
     * body: refused from the file's length, nothing allocated (fuzz_score
     * found a 10 GiB malloc here). */
    uint32_t huge[4] = {1, 65536, 65536, 512};
    memcpy(h + 8, huge, 16);
    f = fopen(path, "wb");
    fwrite(h, 1, sizeof h, f);
    fclose(f);
    KVE_EXPECT(kve_triattention_stats_load(path, &s) == KVE_ERR_INVALID &&
                   strstr(kve_last_error(), "44 bytes") && strstr(kve_last_error(), "promises") &&
                   s.q_mean == NULL,
               "huge header over a short file: %s", kve_last_error());
    KVE_EXPECT(kve_triattention_stats_load("/nonexistent/x", &s) == KVE_ERR_INVALID &&
                   strstr(kve_last_error(), "/nonexistent/x"),
               "missing file: %s", kve_last_error());
    KVE_EXPECT(kve_triattention_stats_load(NULL, &s) == KVE_ERR_NULL, "path NULL");
    remove(path);
}

int main(void)
{
    kve_context *ctx = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK) {
        fprintf(stderr, "FAIL: no CPU context: %s\n", kve_last_error());
        return 1;
    }
    test_known(ctx);
    test_errors(ctx);
    test_state_errors(ctx);
    test_stats_file();
    kve_context_destroy(ctx);
    printf("test_score: %d failures\n", kve_failures);
    return kve_failures != 0;
}

/* test_cache_write_types.c — kve_cache_write's element types, per-cache
 * parts, one tensor holding K and V, MLA's two parts, vLLM's padding and
 * flat slots, byte for byte against kve_convert_ref.h and a plain writer of
 * each layout spelled out here; and the errors of types and parts. */
#include "kve_convert_ref.h"
#include "kve_state_test.h"

/* ---- conversions, one entry of many elements -------------------------- */

/* Convert @p n elements of @p src (type st) to @p out (type dt) with one
 * kve_cache_write of one token, one head, one slot. */
static kve_status convert_n(kve_context *ctx, const void *src, kve_dtype st, void *out,
                            kve_dtype dt, uint32_t n, const float *scale)
{
    int64_t slot = 0;
    int32_t row = 0;
    kve_cache_write_desc d = {.n_tokens = 1, .n_heads = 1, .n_caches = 1, .src = {src},
                              .dst = {out}, .layout = KVE_LAYOUT_NHD, .pages.page_size = 1,
                              .pages.n_pages = 1, .slots = &slot, .slots_stride_token = 1,
                              .token_row = &row, .pages.n_rows = 1, .pages.kind = KVE_PAGES_NONE};
    d.part[0] = (kve_cache_part){.src_dtype = st, .dst_dtype = dt, .convert = 1, .dim = n,
                                 .scale = scale};
    return kve_cache_write(ctx, &d);
}

/* Every code of every type through every conversion, with and without a
 * scale, against the reference. */
START_TEST(every_code_every_pair)
{
    kve_context *ctx = ks_context();
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16,
                                      KVE_DTYPE_FP8_E4M3, KVE_DTYPE_FP8_E5M2};
    enum { N = 65536 + 4096 };
    /* mantissas at and around each format's rounding points */
    static const uint32_t mants[16] = {0,       1,        0x7fffff, 0x400000, 0x100000, 0x080000,
                                       0x180000, 0x200000, 0x300000, 0x001000, 0x003000, 0x008000,
                                       0x018000, 0x0fffff, 0x100001, 0x7fe000};
    unsigned char *src = malloc(4 * N), *out = malloc(4 * N);
    uint64_t rng = 77;
    const float scales[] = {0.0f, 0.37f, 3.0f, 1.0f / 1024};
    for (int s = 0; s < 5; s++) {
        kve_dtype st = types[s];
        uint32_t ss = kr_size(st), n = st == KVE_DTYPE_F32 ? N : 1u << (8 * ss);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t v = i;
            uint32_t j = i - 65536;
            if (st == KVE_DTYPE_F32) /* random bits, then every exponent's edges */
                v = i < 65536 ? (uint32_t)kt_next(&rng)
                              : ((j * 2654435761u) & 0x80000000u) | ((j & 0xff) << 23) |
                                    mants[j >> 8];
            kr_store(src + (size_t)i * ss, ss, v);
        }
        for (int dti = 0; dti < 5; dti++)
            for (int k = 0; k < 4; k++) {
                kve_dtype dt = types[dti];
                int fp8 = dt == KVE_DTYPE_FP8_E4M3 || dt == KVE_DTYPE_FP8_E5M2;
                if (k && !fp8)
                    continue; /* scales are for fp8 caches */
                uint32_t ds = kr_size(dt);
                KT_OK(convert_n(ctx, src, st, out, dt, n, k ? &scales[k] : NULL));
                for (uint32_t i = 0; i < n; i++) {
                    uint32_t v = kr_load(src + (size_t)i * ss, ss);
                    uint32_t want = kr_convert(v, st, dt, k != 0, scales[k]);
                    uint32_t got = kr_load(out + (size_t)i * ds, ds);
                    ck_assert_msg(got == want, "type %d -> %d, scale %g: 0x%x -> 0x%x, want 0x%x",
                                  st, dt, k ? scales[k] : 1.0, v, got, want);
                }
            }
    }
    free(src);
    free(out);
    kve_context_destroy(ctx);
}
END_TEST

/* Values the formats' definitions and vLLM's saturation fix, written out. */
START_TEST(documented_values)
{
    kve_context *ctx = ks_context();
    struct {
        float x;
        kve_dtype dt;
        uint32_t want;
    } cases[] = {
        {448.0f, KVE_DTYPE_FP8_E4M3, 0x7e},     {464.0f, KVE_DTYPE_FP8_E4M3, 0x7e},
        {1e30f, KVE_DTYPE_FP8_E4M3, 0x7e},      {INFINITY, KVE_DTYPE_FP8_E4M3, 0x7e},
        {-INFINITY, KVE_DTYPE_FP8_E4M3, 0xfe},  {NAN, KVE_DTYPE_FP8_E4M3, 0x7f},
        {-NAN, KVE_DTYPE_FP8_E4M3, 0x7f},       {1.0f, KVE_DTYPE_FP8_E4M3, 0x38},
        {0x1p-9f, KVE_DTYPE_FP8_E4M3, 0x01},    {0x1p-10f, KVE_DTYPE_FP8_E4M3, 0x00},
        {0x1.8p-10f, KVE_DTYPE_FP8_E4M3, 0x01}, {0x1.8p-9f, KVE_DTYPE_FP8_E4M3, 0x02},
        {-0.0f, KVE_DTYPE_FP8_E4M3, 0x80},      {-0x1p-12f, KVE_DTYPE_FP8_E4M3, 0x80},
        {1.0625f, KVE_DTYPE_FP8_E4M3, 0x38},    {1.1875f, KVE_DTYPE_FP8_E4M3, 0x3a},
        {57344.0f, KVE_DTYPE_FP8_E5M2, 0x7b},   {61440.0f, KVE_DTYPE_FP8_E5M2, 0x7b},
        {INFINITY, KVE_DTYPE_FP8_E5M2, 0x7b},   {NAN, KVE_DTYPE_FP8_E5M2, 0x7f},
        {1.0f, KVE_DTYPE_FP8_E5M2, 0x3c},       {0x1p-16f, KVE_DTYPE_FP8_E5M2, 0x01},
        {0x1p-17f, KVE_DTYPE_FP8_E5M2, 0x00},   {-3.5f, KVE_DTYPE_FP8_E5M2, 0xc3},
        {65504.0f, KVE_DTYPE_F16, 0x7bff},      {65519.0f, KVE_DTYPE_F16, 0x7bff},
        {65520.0f, KVE_DTYPE_F16, 0x7c00},      {-1e9f, KVE_DTYPE_F16, 0xfc00},
        {0x1p-24f, KVE_DTYPE_F16, 0x0001},      {0x1p-25f, KVE_DTYPE_F16, 0x0000},
        {0x1.8p-24f, KVE_DTYPE_F16, 0x0002},    {NAN, KVE_DTYPE_F16, 0x7fff},
        {1.0f, KVE_DTYPE_BF16, 0x3f80},         {0x1.01p0f, KVE_DTYPE_BF16, 0x3f80},
        {0x1.03p0f, KVE_DTYPE_BF16, 0x3f82},    {3.4028235e38f, KVE_DTYPE_BF16, 0x7f80},
        {0x1p-133f, KVE_DTYPE_BF16, 0x0001},    {NAN, KVE_DTYPE_BF16, 0x7fff},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t got = 0;
        KT_OK(convert_n(ctx, &cases[i].x, KVE_DTYPE_F32, &got, cases[i].dt, 1, NULL));
        ck_assert_msg(got == cases[i].want, "%a -> type %d: 0x%x, want 0x%x", cases[i].x,
                      cases[i].dt, got, cases[i].want);
        ck_assert_uint_eq(kr_narrow(cases[i].x, cases[i].dt), cases[i].want);
    }
    /* the compiler's IEEE conversion agrees on f16 (NaN aside) */
    uint64_t rng = 5;
    for (int i = 0; i < 200000; i++) {
        float x = kr_f32((uint32_t)kt_next(&rng) & (i & 1 ? 0xbfffffffu : 0xffffffffu));
        uint16_t got = 0, want;
        _Float16 h = (_Float16)x;
        memcpy(&want, &h, 2);
        if (isnan(x))
            want = 0x7fff;
        KT_OK(convert_n(ctx, &x, KVE_DTYPE_F32, &got, KVE_DTYPE_F16, 1, NULL));
        ck_assert_msg(got == want, "%a -> f16 0x%x, the compiler's 0x%x", x, got, want);
    }
    kve_context_destroy(ctx);
}
END_TEST

/* ---- layouts x types x page tables ----------------------------------- */

typedef struct {
    kve_dtype st, dt;
    int convert, scale; /* scale: 0 none, 1 per tensor, 2 per head */
} type_combo;

static const type_combo combos[] = {
    {KVE_DTYPE_RAW, KVE_DTYPE_RAW, 0, 0},          {KVE_DTYPE_F16, KVE_DTYPE_F16, 0, 0},
    {KVE_DTYPE_F32, KVE_DTYPE_F16, 1, 0},          {KVE_DTYPE_F16, KVE_DTYPE_BF16, 1, 0},
    {KVE_DTYPE_BF16, KVE_DTYPE_FP8_E4M3, 1, 1},    {KVE_DTYPE_F16, KVE_DTYPE_FP8_E5M2, 1, 2},
    {KVE_DTYPE_F32, KVE_DTYPE_FP8_E4M3, 1, 2},     {KVE_DTYPE_FP8_E4M3, KVE_DTYPE_F32, 1, 0},
    {KVE_DTYPE_BF16, KVE_DTYPE_F32, 1, 0},         {KVE_DTYPE_F16, KVE_DTYPE_FP8_E4M3, 1, 0},
};
enum { NC = sizeof combos / sizeof *combos, T = 11, H = 3, PS = 4, ROWS = 3, BPR = 3 };
enum { PAGES = ROWS * BPR + 2 };

/* Where (row, slot, head) of cache c lands, spelled per layout and table. */
static size_t lt_offset(const kve_cache_write_desc *d, const int32_t *pages, const int32_t *ip,
                        uint32_t c, int32_t row, int64_t slot, uint32_t h)
{
    size_t page = (size_t)row, in = (size_t)slot % PS;
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE)
        page = (size_t)pages[row * BPR + slot / PS];
    else if (d->pages.kind == KVE_PAGES_INDPTR)
        page = (size_t)pages[ip[row] + slot / PS];
    else if (d->pages.kind == KVE_PAGES_FLAT)
        page = (size_t)slot / PS;
    size_t e = (size_t)d->part[c].dim * kr_size(d->part[c].dst_dtype);
    size_t sp = d->part[c].dst_stride_page ? d->part[c].dst_stride_page : PS * H * e;
    return d->layout == KVE_LAYOUT_NHD ? page * sp + in * H * e + h * e
                                       : page * sp + h * PS * e + in * e;
}

/* The pages scattered over the pool; T tokens spread over the rows, some
 * padding (token_row < 0); per (row, head) distinct slots below the row's
 * length under @p pt (global slot ids with KVE_PAGES_FLAT), some -1. */
static void lt_tables(uint64_t *rng, kve_page_kind pt, int32_t *pages, int32_t *token_row,
                      int64_t *slots)
{
    uint32_t perm[PAGES];
    for (uint32_t i = 0; i < PAGES; i++)
        perm[i] = i;
    for (uint32_t i = PAGES - 1; i > 0; i--) { /* pages scattered */
        uint32_t j = kt_below(rng, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t i = 0; i < PAGES; i++)
        pages[i] = (int32_t)perm[i];
    uint32_t len[ROWS] = {BPR * PS, BPR * PS, BPR * PS};
    if (pt == KVE_PAGES_NONE)
        len[0] = len[1] = len[2] = PS;
    if (pt == KVE_PAGES_INDPTR)
        len[0] = 2 * PS + PS, len[1] = PS + 2, len[2] = 2 * PS + 1;
    uint32_t used[ROWS][H] = {{0}};
    for (uint32_t t = 0; t < T; t++) { /* distinct slots per (row, head); padding */
        int32_t r = (int32_t)kt_below(rng, ROWS);
        int pad = kt_below(rng, 5) == 0;
        token_row[t] = pad ? -1000 - (int32_t)t : r;
        for (uint32_t h = 0; h < H; h++) {
            uint32_t i = used[r][h]++;
            int skip = pad || i >= len[r] || kt_below(rng, 8) == 0;
            int64_t s = skip ? -1 : (int64_t)((i * 5 + h) % len[r]);
            if (pt == KVE_PAGES_FLAT && s >= 0) /* global: page * PS + offset */
                s = (int64_t)pages[r * BPR + s / PS] * PS + s % PS;
            slots[t * H + h] = s;
        }
    }
}

/* Two caches (dims 5 and 3) of each combo pair, random bits as sources. */
static void layouts_run(kve_context *ctx, kve_cache_layout layout, kve_page_kind pt,
                        const type_combo *ck, const type_combo *cv, uint64_t *rng)
{
    const type_combo *cc[2] = {ck, cv};
    const uint32_t dims[2] = {5, 3};
    int32_t pages[PAGES], ip[ROWS + 1] = {0, 3, 5, 8}, last[ROWS] = {PS, 2, 1}, token_row[T];
    int64_t slots[T * H];
    float scale[2][H];
    unsigned char *src[2], *dst[2], *ref[2];
    lt_tables(rng, pt, pages, token_row, slots);
    kve_cache_write_desc d = {.n_tokens = T, .n_heads = H, .n_caches = 2, .layout = layout,
                              .pages.page_size = PS, .pages.n_pages = PAGES, .slots = slots,
                              .slots_stride_token = H, .slots_stride_head = 1,
                              .token_row = pt == KVE_PAGES_FLAT ? NULL : token_row,
                              .pages.n_rows = ROWS, .pages.kind = pt, .pages.block_table = pages,
                              .pages.blocks_per_row = BPR, .pages.indptr = ip, .pages.indices = pages,
                              .pages.last_page_len = last};
    size_t dst_bytes[2];
    for (int c = 0; c < 2; c++) {
        kve_cache_part *p = &d.part[c];
        *p = (kve_cache_part){.src_dtype = cc[c]->st, .dst_dtype = cc[c]->dt,
                              .convert = (uint32_t)cc[c]->convert, .dim = dims[c]};
        for (uint32_t h = 0; h < H; h++)
            scale[c][h] = 0.25f + (float)kt_below(rng, 16) / 4.0f;
        if (cc[c]->scale) {
            p->scale = scale[c];
            p->scale_per_head = cc[c]->scale == 2;
        }
        size_t se = dims[c] * kr_size(cc[c]->st), e = dims[c] * kr_size(cc[c]->dt);
        p->dst_stride_page = PS * H * e + 8 * kr_size(cc[c]->dt); /* padded pages */
        dst_bytes[c] = PAGES * p->dst_stride_page;
        src[c] = malloc(T * H * se);
        dst[c] = malloc(dst_bytes[c]);
        ref[c] = malloc(dst_bytes[c]);
        for (size_t i = 0; i < T * H * se; i++)
            src[c][i] = (unsigned char)kt_next(rng);
        for (size_t i = 0; i < dst_bytes[c]; i++)
            dst[c][i] = ref[c][i] = (unsigned char)kt_next(rng);
        d.src[c] = src[c];
        d.dst[c] = dst[c];
    }
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < H; h++) {
            int64_t s = slots[t * H + h];
            for (int c = 0; c < 2 && s >= 0; c++) {
                uint32_t ss = kr_size(cc[c]->st), ds = kr_size(cc[c]->dt);
                unsigned char *o = ref[c] + lt_offset(&d, pages, ip, c, token_row[t], s, h);
                const unsigned char *in = src[c] + (t * H + h) * dims[c] * ss;
                float sc = scale[c][cc[c]->scale == 2 ? h : 0];
                for (uint32_t i = 0; i < dims[c]; i++)
                    kr_store(o + i * ds, ds,
                             cc[c]->convert ? kr_convert(kr_load(in + i * ss, ss), cc[c]->st,
                                                         cc[c]->dt, cc[c]->scale != 0, sc)
                                            : kr_load(in + i * ss, ss));
            }
        }
    KT_OK(kve_cache_write(ctx, &d));
    for (int c = 0; c < 2; c++) {
        ck_assert_msg(memcmp(dst[c], ref[c], dst_bytes[c]) == 0,
                      "layout %d, table %d, cache %d (types %d -> %d, scale %d) differs", layout,
                      pt, c, cc[c]->st, cc[c]->dt, cc[c]->scale);
        free(src[c]);
        free(dst[c]);
        free(ref[c]);
    }
}

START_TEST(layouts_types_tables)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 101 + (uint64_t)_i;
    for (int layout = 0; layout < 2; layout++)
        for (int pt = 0; pt < 4; pt++)
            for (int k = 0; k < NC; k++)
                layouts_run(ctx, (kve_cache_layout)layout, (kve_page_kind)pt, &combos[k],
                            &combos[(k + 1 + (uint32_t)_i) % NC], &rng);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(cache_write_types, every_code_every_pair),
        KVE_TEST(cache_write_types, documented_values),
        KVE_LOOP_TEST(cache_write_types, layouts_types_tables, 0, 3),
    };
    const kve_suite_spec spec = {"cache_write_types", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

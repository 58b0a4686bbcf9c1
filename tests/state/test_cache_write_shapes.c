/* test_cache_write_shapes.c — the engines' tensor shapes through
 * kve_cache_write, each checked against plain multi-dimensional indexing:
 * FlashInfer's one K/V tensor [pages][2][...], MLA's latent + rope parts of
 * one entry, head_dim_v != head_dim_k, vLLM's flat slot_mapping with -1
 * padding; and which overlaps are refused (bad types and parts:
 * tests/core/test_errors_state.c). */
#include "kve_convert_ref.h"
#include "kve_state_test.h"

enum { P = 6, PS = 4, H = 2, D = 8 };

static void fill(uint64_t *rng, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)p)[i] = (unsigned char)kt_next(rng);
}

/* FlashInfer's paged_kv_cache [pages][2][page_size][heads][D] (NHD) or
 * [pages][2][heads][page_size][D] (HND), f16: K and V in one tensor. */
START_TEST(kv_one_tensor)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 31;
    int hnd = _i;
    enum { T = 5 };
    uint16_t cache[P][2][PS * H * D], want[P][2][PS * H * D], k[T][H][D], v[T][H][D];
    fill(&rng, cache, sizeof cache);
    fill(&rng, k, sizeof k);
    fill(&rng, v, sizeof v);
    memcpy(want, cache, sizeof cache);
    int32_t indptr[3] = {0, 2, 3}, indices[3] = {4, 1, 5}, last[2] = {3, 2};
    int32_t row[T] = {0, 1, 0, 1, 0};
    int64_t slots[T] = {0, 0, 6, 1, 2}; /* one slot for every head (FlashInfer) */
    for (int t = 0; t < T; t++) {
        int32_t page = indices[indptr[row[t]] + slots[t] / PS];
        int in = (int)(slots[t] % PS);
        for (int h = 0; h < H; h++) {
            size_t at = hnd ? ((size_t)h * PS + in) * D : ((size_t)in * H + h) * D;
            memcpy(&want[page][0][at], k[t][h], 2 * D);
            memcpy(&want[page][1][at], v[t][h], 2 * D);
        }
    }
    kve_cache_write_desc d = {.n_tokens = T, .n_heads = H, .entry_bytes = 2 * D, .n_caches = 2,
                              .src = {k, v}, .dst = {cache[0][0], cache[0][1]},
                              .layout = hnd ? KVE_LAYOUT_HND : KVE_LAYOUT_NHD,
                              .dst_stride_page = sizeof cache[0], .pages.page_size = PS, .pages.n_pages = P,
                              .slots = slots, .slots_stride_token = 1, .token_row = row,
                              .pages.n_rows = 2, .pages.kind = KVE_PAGES_INDPTR, .pages.indptr = indptr,
                              .pages.indices = indices, .pages.last_page_len = last};
    for (int c = 0; c < 2; c++)
        d.part[c].src_dtype = d.part[c].dst_dtype = KVE_DTYPE_F16;
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert(memcmp(cache, want, sizeof cache) == 0);
    /* V's entries shifted by one element into K's: refused, entry by entry */
    d.dst[1] = &cache[0][0][1];
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst[1]");
    /* V one page on: its entries are K's of the next page */
    d.dst[1] = cache[1][0];
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "share entry bytes");
    /* different strides and overlapping spans: refused as a whole */
    d.dst[1] = cache[0][1];
    d.part[1].dst_stride_page = sizeof cache[0] + 2 * D;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst[1]");
    kve_context_destroy(ctx);
}
END_TEST

/* MLA: kv_c_and_k_pe_cache [pages][page_size][latent + rope] (one head),
 * the latent from a bf16 source into an fp8 part with a scale, the rope
 * part copied: two caches with their own dim in one tensor; and K / V with
 * head_dim 8 and 4 in their own tensors. */
static void check_mla_parts(kve_context *ctx, uint64_t *rng, const int32_t *bt, const int32_t *row)
{
    enum { T = 6, LAT = 16, ROPE = 4, W = LAT + 2 * ROPE }; /* fp8 latent, f16 rope: bytes */
    unsigned char cache[P][PS][W], want[P][PS][W];
    uint16_t lat[T + 1][LAT], rope[T][ROPE]; /* a spare row: the dim LAT + 1 case reads it */
    fill(rng, cache, sizeof cache);
    fill(rng, rope, sizeof rope);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < LAT; i++) /* bf16 of modest values, some beyond 448 * scale */
            lat[t][i] = (uint16_t)(kr_bits((float)((int)kt_below(rng, 4000) - 2000) / 3) >> 16);
    memcpy(want, cache, sizeof cache);
    int64_t slots[T] = {1, 0, 11, 7, -1, 5};
    float scale = 0.5f;
    for (int t = 0; t < T; t++) {
        if (slots[t] < 0)
            continue;
        unsigned char *e = want[bt[row[t] * 3 + slots[t] / PS]][slots[t] % PS];
        for (int i = 0; i < LAT; i++)
            e[i] = (unsigned char)kr_convert(lat[t][i], KVE_DTYPE_BF16, KVE_DTYPE_FP8_E4M3, 1,
                                             scale);
        memcpy(e + LAT, rope[t], 2 * ROPE);
    }
    kve_cache_write_desc d = {.n_tokens = T, .n_heads = 1, .n_caches = 2, .src = {lat, rope},
                              .dst = {cache, &cache[0][0][LAT]}, .layout = KVE_LAYOUT_NHD,
                              .dst_stride_page = PS * W, .dst_stride_slot = W, .pages.page_size = PS,
                              .pages.n_pages = P, .slots = slots, .slots_stride_token = 1,
                              .token_row = row, .pages.n_rows = 2, .pages.kind = KVE_PAGES_BLOCK_TABLE,
                              .pages.block_table = bt, .pages.blocks_per_row = 3};
    d.part[0] = (kve_cache_part){.src_dtype = KVE_DTYPE_BF16, .dst_dtype = KVE_DTYPE_FP8_E4M3,
                                 .convert = 1, .dim = LAT, .scale = &scale};
    d.part[1] = (kve_cache_part){.src_dtype = KVE_DTYPE_F16, .dst_dtype = KVE_DTYPE_F16,
                                 .dim = ROPE};
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert(memcmp(cache, want, sizeof cache) == 0);
    d.part[0].dim = LAT + 1; /* the latent would run into the rope */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "share entry bytes");

}

/* K head_dim 8 (f32 -> f16), V head_dim 4 (f32 -> e5m2, a scale per head). */
static void check_head_dims(kve_context *ctx, uint64_t *rng, const int32_t *bt, const int32_t *row)
{
    enum { T = 6 };
    float k[T][H][8], v[T][H][4], vs[H] = {2.0f, 0.125f};
    uint16_t kc[P][PS][H][8], kw[P][PS][H][8];
    uint8_t vc[P][PS][H][4], vw[P][PS][H][4];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < 8; i++) {
                k[t][h][i] = kr_f32((uint32_t)kt_next(rng));
                v[t][h][i % 4] = (float)((int)kt_below(rng, 1 << 20)) / 8;
            }
    fill(rng, kc, sizeof kc);
    fill(rng, vc, sizeof vc);
    memcpy(kw, kc, sizeof kc);
    memcpy(vw, vc, sizeof vc);
    int64_t hs[T][H] = {{0, 1}, {2, 3}, {4, -1}, {5, 6}, {7, 0}, {-1, 9}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int64_t s = hs[t][h];
            if (s < 0)
                continue;
            int page = bt[row[t] * 3 + s / PS], in = (int)(s % PS);
            for (int i = 0; i < 8; i++)
                kw[page][in][h][i] =
                    (uint16_t)kr_convert(kr_bits(k[t][h][i]), KVE_DTYPE_F32, KVE_DTYPE_F16, 0, 1);
            for (int i = 0; i < 4; i++)
                vw[page][in][h][i] = (uint8_t)kr_convert(kr_bits(v[t][h][i]), KVE_DTYPE_F32,
                                                         KVE_DTYPE_FP8_E5M2, 1, vs[h]);
        }
    kve_cache_write_desc kv = {.n_tokens = T, .n_heads = H, .n_caches = 2, .src = {k, v},
                               .dst = {kc, vc}, .layout = KVE_LAYOUT_NHD, .pages.page_size = PS,
                               .pages.n_pages = P, .slots = &hs[0][0], .slots_stride_token = H,
                               .slots_stride_head = 1, .token_row = row, .pages.n_rows = 2,
                               .pages.kind = KVE_PAGES_BLOCK_TABLE, .pages.block_table = bt,
                               .pages.blocks_per_row = 3};
    kv.part[0] = (kve_cache_part){.src_dtype = KVE_DTYPE_F32, .dst_dtype = KVE_DTYPE_F16,
                                  .convert = 1, .dim = 8};
    kv.part[1] = (kve_cache_part){.src_dtype = KVE_DTYPE_F32, .dst_dtype = KVE_DTYPE_FP8_E5M2,
                                  .convert = 1, .dim = 4, .scale = vs, .scale_per_head = 1};
    KT_OK(kve_cache_write(ctx, &kv));
    ck_assert(memcmp(kc, kw, sizeof kc) == 0);
    ck_assert(memcmp(vc, vw, sizeof vc) == 0);
}

/* Both shapes above, on one block table. */
START_TEST(mla_and_head_dims)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 32;
    int32_t bt[2 * 3] = {5, 0, 3, 2, 4, 1}, row[6] = {0, 1, 1, 0, 0, 1};
    check_mla_parts(ctx, &rng, bt, row);
    check_head_dims(ctx, &rng, bt, row);
    kve_context_destroy(ctx);
}
END_TEST

/* vLLM's reshape_and_cache_flash: key [T][H][D], slot_mapping [T] of
 * global slots (block * block_size + offset), -1 for padding, caches
 * [blocks][block_size][H][D]; and padding in the block-table mode, whose
 * token_row is then never read. */
START_TEST(flat_slots_and_padding)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 33;
    enum { T = 7 };
    uint16_t key[T][H][D], cache[P][PS][H][D], want[P][PS][H][D];
    fill(&rng, key, sizeof key);
    fill(&rng, cache, sizeof cache);
    memcpy(want, cache, sizeof cache);
    int64_t map[T] = {13, -1, 0, 23, -1, 6, 7};
    for (int t = 0; t < T; t++)
        if (map[t] >= 0)
            memcpy(want[map[t] / PS][map[t] % PS], key[t], sizeof key[t]);
    kve_cache_write_desc d = {.n_tokens = T, .n_heads = H, .entry_bytes = 2 * D, .n_caches = 1,
                              .src = {key}, .dst = {cache}, .layout = KVE_LAYOUT_NHD,
                              .pages.page_size = PS, .pages.n_pages = P, .slots = map,
                              .slots_stride_token = 1, .pages.kind = KVE_PAGES_FLAT};
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert(memcmp(cache, want, sizeof cache) == 0);
    map[3] = P * PS;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE,
               "desc.slots[token 3][head 0] = 24: must be -1 or 0..23 (n_pages * page_size");
    map[3] = 23;

    /* block table: padded tokens carry any row */
    int32_t bt[2] = {3, 1}, row[T] = {0, -5, 1, 1, 99, 0, 0};
    int64_t ls[T] = {1, -1, 4, 5, -1, 2, 3};
    d.pages.kind = KVE_PAGES_BLOCK_TABLE;
    d.pages.block_table = bt;
    d.pages.blocks_per_row = 2;
    d.pages.n_rows = 1;
    d.token_row = row;
    d.slots = ls;
    row[2] = row[3] = 0;
    KT_OK(kve_cache_write(ctx, &d));
    for (int t = 0; t < T; t++)
        if (ls[t] >= 0)
            memcpy(want[bt[ls[t] / PS]][ls[t] % PS], key[t], sizeof key[t]);
    ck_assert(memcmp(cache, want, sizeof cache) == 0);
    ls[4] = 0; /* a slot: now its row must be one */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.token_row[4] = 99");
    kve_context_destroy(ctx);
}
END_TEST

/* vLLM's CPU cache: per layer [blocks][heads][block_size * 2 * D], each
 * (block, head) holding K transposed ([D][block_size]) and then V
 * ([block_size][D]): K a part with dst_stride_elem = block_size elements.
 * Writes through a block table, then a round's moves (each a slot of the
 * row to another), checked against plain indexing; raw copies (_i = 0) and
 * f32 sources converted to bf16 (_i = 1). V one element into K's block, or
 * K's elements stepping on each other: refused. */
START_TEST(vllm_cpu_layout)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 35;
    int conv = _i;
    enum { T = 5, BLK = 2 * PS * D };
    kve_dtype dt = conv ? KVE_DTYPE_BF16 : KVE_DTYPE_F16;
    uint16_t cache[P][H][BLK], want[P][H][BLK];
    unsigned char k[T][H][D][4], v[T][H][D][4]; /* f16 uses the first half of each */
    fill(&rng, cache, sizeof cache);
    fill(&rng, k, sizeof k);
    fill(&rng, v, sizeof v);
    if (conv) /* finite sources: exponents below the top */
        for (size_t i = 3; i < sizeof k; i += 4)
            ((unsigned char *)k)[i] &= 0x3f, ((unsigned char *)v)[i] &= 0x3f;
    uint32_t ss = conv ? 4 : 2;
    memcpy(want, cache, sizeof cache);
    int32_t bt[2][2] = {{4, 1}, {0, 5}}, row[T] = {0, 1, 0, 1, 1};
    int64_t slots[T][H] = {{0, 1}, {6, 7}, {5, 4}, {2, 2}, {3, 0}};
    /* where (row, slot, head, element i) lies, for K and for V */
#define KAT(r, s, h, i) (&want[bt[r][(s) / PS]][h][(size_t)(i) * PS + (s) % PS])
#define VAT(r, s, h, i) (&want[bt[r][(s) / PS]][h][PS * D + (size_t)((s) % PS) * D + (i)])
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D; i++) {
                uint32_t kb = kr_load(k[t][h][i], ss), vb = kr_load(v[t][h][i], ss);
                kve_dtype st = conv ? KVE_DTYPE_F32 : KVE_DTYPE_F16;
                *KAT(row[t], slots[t][h], h, i) = (uint16_t)(conv ? kr_convert(kb, st, dt, 0, 1) : kb);
                *VAT(row[t], slots[t][h], h, i) = (uint16_t)(conv ? kr_convert(vb, st, dt, 0, 1) : vb);
            }
    kve_cache_write_desc d = {.n_tokens = T, .n_heads = H, .n_caches = 2, .src = {k, v},
                              .src_stride_token = H * D * 4, .src_stride_head = D * 4,
                              .dst = {cache[0][0], cache[0][0] + PS * D},
                              .layout = KVE_LAYOUT_HND, .pages.page_size = PS, .pages.n_pages = P,
                              .slots = &slots[0][0], .slots_stride_token = H,
                              .slots_stride_head = 1, .token_row = row, .pages.n_rows = 2,
                              .pages.kind = KVE_PAGES_BLOCK_TABLE, .pages.block_table = &bt[0][0],
                              .pages.blocks_per_row = 2};
    for (int c = 0; c < 2; c++)
        d.part[c] = (kve_cache_part){.src_dtype = conv ? KVE_DTYPE_F32 : KVE_DTYPE_F16,
                                     .dst_dtype = dt, .convert = (uint32_t)conv, .dim = D,
                                     .dst_stride_page = sizeof cache[0],
                                     .dst_stride_head = sizeof cache[0][0],
                                     .dst_stride_slot = c ? 2 * D : 2};
    d.part[0].dst_stride_elem = 2 * PS;
    if (!conv) { /* f16 sources: entries of D elements, 4 bytes apart */
        d.part[0].src_stride_head = d.part[1].src_stride_head = D * 4;
        d.part[0].src_stride_token = d.part[1].src_stride_token = H * D * 4;
    }
    /* f16 sources are dense entries: repack them */
    static unsigned char k16[T][H][D][2], v16[T][H][D][2];
    if (!conv) {
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < D; i++) {
                    memcpy(k16[t][h][i], k[t][h][i], 2);
                    memcpy(v16[t][h][i], v[t][h][i], 2);
                }
        d.src[0] = k16, d.src[1] = v16;
        for (int c = 0; c < 2; c++)
            d.part[c].src_stride_head = 2 * D, d.part[c].src_stride_token = 2 * H * D;
    }
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert(memcmp(cache, want, sizeof cache) == 0);

    /* a round's moves alone: row 0 head 1 slot 4 -> 2, row 1 head 0 slot 6 -> 1 */
    int32_t moves[2][H][1][2] = {{{{0, 0}}, {{4, 2}}}, {{{6, 1}}, {{0, 0}}}};
    uint32_t n_moves[2][H] = {{0, 1}, {1, 0}};
    int mv[2][4] = {{0, 1, 4, 2}, {1, 0, 6, 1}}; /* row, head, from, to */
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < D; i++) {
            *KAT(mv[m][0], mv[m][3], mv[m][1], i) = *KAT(mv[m][0], mv[m][2], mv[m][1], i);
            *VAT(mv[m][0], mv[m][3], mv[m][1], i) = *VAT(mv[m][0], mv[m][2], mv[m][1], i);
        }
#undef KAT
#undef VAT
    d.n_tokens = 0;
    d.moves = &moves[0][0][0][0];
    d.n_moves = &n_moves[0][0];
    d.n_move_rows = 2;
    d.max_moves = 1;
    d.moves_stride_row = H;
    d.moves_stride_head = 1;
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert(memcmp(cache, want, sizeof cache) == 0);

    /* V one element into K's half of the block: refused */
    d.dst[1] = cache[0][0] + PS * D - 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "share entry bytes");
    d.dst[1] = cache[0][0] + PS * D;
    /* K's elements closer than a block's slots: entries interleave */
    d.part[0].dst_stride_elem = 2 * (PS - 1);
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.part[0].dst_stride_elem");
    kve_context_destroy(ctx);
}
END_TEST

/* Two caches on one lattice (equal strides), at random offsets and entry
 * sizes: refused exactly when some entry of one shares a byte with some
 * entry of the other, by brute force over every pair of entries. */
START_TEST(overlap_entry_by_entry)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 34;
    static unsigned char buf[1 << 16], src[64];
    unsigned refused = 0, accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        uint32_t ext[3] = {1 + kt_below(&rng, 3), 1 + kt_below(&rng, 3), 1 + kt_below(&rng, 3)};
        size_t e[2] = {1 + kt_below(&rng, 6), 1 + kt_below(&rng, 6)}, st[3];
        int order[3] = {0, 1, 2}; /* nest the dims in a random order */
        for (int i = 2; i > 0; i--) {
            int j = (int)kt_below(&rng, (uint32_t)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        size_t span = e[0] > e[1] ? e[0] : e[1];
        for (int i = 0; i < 3; i++) {
            st[order[i]] = span + kt_below(&rng, 4);
            span = st[order[i]] * ext[order[i]];
        }
        size_t delta = kt_below(&rng, (uint32_t)span + 2);
        int meet = 0; /* brute force: offsets of every entry of each */
        for (uint32_t a = 0; a < ext[0] * ext[1] * ext[2] && !meet; a++)
            for (uint32_t b = 0; b < ext[0] * ext[1] * ext[2] && !meet; b++) {
                size_t oa = (a % ext[0]) * st[0] + (a / ext[0] % ext[1]) * st[1] +
                            (a / ext[0] / ext[1]) * st[2];
                size_t ob = delta + (b % ext[0]) * st[0] + (b / ext[0] % ext[1]) * st[1] +
                            (b / ext[0] / ext[1]) * st[2];
                meet = oa < ob + e[1] && ob < oa + e[0];
            }
        int64_t slot = -1; /* nothing written: the checks alone */
        int32_t row = 0;
        kve_cache_write_desc d = {.n_tokens = 1, .n_heads = ext[2], .n_caches = 2,
                                  .src = {src, src}, .dst = {buf, buf + delta},
                                  .layout = KVE_LAYOUT_NHD, .pages.page_size = ext[1],
                                  .pages.n_pages = ext[0], .slots = &slot, .slots_stride_token = 1,
                                  .token_row = &row, .pages.n_rows = 1,
                                  .pages.kind = KVE_PAGES_NONE};
        for (int c = 0; c < 2; c++)
            d.part[c] = (kve_cache_part){.dim = (uint32_t)e[c], .dst_stride_page = st[0],
                                         .dst_stride_slot = st[1], .dst_stride_head = st[2]};
        kve_status got = kve_cache_write(ctx, &d);
        ck_assert_msg(got == (meet ? KVE_ERR_ALIAS : KVE_OK),
                      "extents %u/%u/%u strides %zu/%zu/%zu entries %zu/%zu delta %zu: %s (%s)",
                      ext[0], ext[1], ext[2], st[0], st[1], st[2], e[0], e[1], delta,
                      kve_status_string(got), kve_last_error());
        refused += meet;
        accepted += !meet;
    }
    ck_assert(refused > 300 && accepted > 300);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(cache_write_shapes, kv_one_tensor, 0, 2),
        KVE_TEST(cache_write_shapes, mla_and_head_dims),
        KVE_TEST(cache_write_shapes, flat_slots_and_padding),
        KVE_LOOP_TEST(cache_write_shapes, vllm_cpu_layout, 0, 2),
        KVE_TEST(cache_write_shapes, overlap_entry_by_entry),
    };
    const kve_suite_spec spec = {"cache_write_shapes", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

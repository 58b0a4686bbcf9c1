/* test_compact_digest.c — kve_compact against a direct reference in several
 * cache layouts, in and out of place; kve_digest against the golden value,
 * its byte layout, and its invariance under compaction. */
#include <xxhash.h>

#include "golden_vectors.h"
#include "kve_suite.h"
#include "kve_test_util.h"

enum { LAYOUT_HF, LAYOUT_TOKEN_ROWS, LAYOUT_HND_PADDED, N_LAYOUTS };

/* Views of (seq, layer, head, slot) entries for S x L x H x T caches. */
static kve_cache_view layout_view(int layout, char *base, uint32_t S, uint32_t L, uint32_t H,
                                  uint32_t T, size_t e)
{
    (void)S;
    switch (layout) {
    case LAYOUT_HF: /* [S][L][H][T][e] */
        return (kve_cache_view){base, L * H * T * e, H * T * e, T * e, e};
    case LAYOUT_TOKEN_ROWS: /* [S][T][L][H][e] */
        return (kve_cache_view){base, T * L * H * e, H * e, e, L * H * e};
    default: /* [S][L][H][T][e + 8 bytes of padding] */
        return (kve_cache_view){base, L * H * T * (e + 8), H * T * (e + 8), T * (e + 8), e + 8};
    }
}

static size_t layout_bytes(int layout, uint32_t S, uint32_t L, uint32_t H, uint32_t T, size_t e)
{
    return (size_t)S * L * H * T * (layout == LAYOUT_HND_PADDED ? e + 8 : e);
}

static char *entry_at(const kve_cache_view *v, uint32_t s, uint32_t l, uint32_t h, uint32_t t)
{
    return (char *)v->base + s * v->stride_seq + l * v->stride_layer + h * v->stride_head +
           t * v->stride_slot;
}

/* One random problem's shape: S x L x H heads of T slots, e-byte entries. */
typedef struct {
    uint32_t S, L, H, T;
    size_t e;
    int layout, out_of_place;
} cd_shape;

/* Two caches of random bytes (their copies in orig, the out-of-place
 * destinations filled with 0x5a) as the desc's views. */
static void fill_caches(const cd_shape *g, uint64_t *rng, kve_compact_desc *d, char *caches[2],
                        char *orig[2], char *dst[2])
{
    size_t bytes = layout_bytes(g->layout, g->S, g->L, g->H, g->T, g->e);
    for (int c = 0; c < 2; c++) {
        caches[c] = malloc(bytes);
        orig[c] = malloc(bytes);
        dst[c] = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            caches[c][i] = (char)kt_next(rng);
        memcpy(orig[c], caches[c], bytes);
        memset(dst[c], 0x5a, bytes);
        d->src[c] = layout_view(g->layout, caches[c], g->S, g->L, g->H, g->T, g->e);
        if (g->out_of_place)
            d->dst[c] = layout_view(g->layout, dst[c], g->S, g->L, g->H, g->T, g->e);
    }
}

/* Reference: each head's kept = valid slots not evicted, in slot order, in
 * its table and both caches; the rest of the table empty. */
static void check_compacted(const cd_shape *g, const kt_out *o, const int32_t *before,
                            const int32_t *slots, const kve_compact_desc *d, char *const orig[2])
{
    uint32_t L = g->L, H = g->H, T = g->T;
    size_t heads = (size_t)g->S * L * H;
    for (size_t i = 0; i < heads; i++) {
        uint32_t s = (uint32_t)(i / ((size_t)L * H)), l = (uint32_t)(i / H % L), h = (uint32_t)(i % H);
        const int32_t *ev = kt_ev(o, i);
        uint32_t j = 0, x = 0;
        for (uint32_t t = 0; t < T; t++) {
            if (x < o->n_evicted[i] && ev[x] == (int32_t)t) {
                x++;
                continue;
            }
            if (before[i * T + t] < 0)
                continue;
            ck_assert_int_eq(slots[i * T + j], before[i * T + t]);
            for (int c = 0; c < 2; c++) {
                kve_cache_view src = layout_view(g->layout, orig[c], g->S, L, H, T, g->e);
                const kve_cache_view *got = g->out_of_place ? &d->dst[c] : &d->src[c];
                ck_assert(!memcmp(entry_at(got, s, l, h, j), entry_at(&src, s, l, h, t), g->e));
            }
            j++;
        }
        ck_assert_uint_eq(j, o->n_kept[i]);
        for (; j < T; j++)
            ck_assert_int_eq(slots[i * T + j], -1);
    }
}

START_TEST(compact_matches_reference)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    uint64_t rng = 11;
    for (int iter = 0; iter < 300; iter++) {
        cd_shape g;
        g.S = 1 + kt_below(&rng, 2), g.L = 1 + kt_below(&rng, 2), g.H = 1 + kt_below(&rng, 3);
        g.T = 1 + kt_below(&rng, 40);
        g.e = 1 + kt_below(&rng, 40);
        g.layout = iter % N_LAYOUTS, g.out_of_place = (iter / N_LAYOUTS) % 2;
        uint32_t S = g.S, L = g.L, H = g.H, T = g.T;
        kve_seq seqs[2] = {{kt_next(&rng), kt_below(&rng, 8), 0}, {kt_next(&rng), 2, 1}};
        size_t heads = (size_t)S * L * H;
        int32_t *slots = malloc(heads * T * 4), *before = malloc(heads * T * 4);
        for (size_t i = 0; i < heads; i++)
            kt_random_table(&rng, slots + i * T, T, kt_below(&rng, T + 1), 2 * T);
        memcpy(before, slots, heads * T * 4);
        kve_batch b = {kt_next(&rng), 0, S, seqs, L, H, 0, 0, T, kt_below(&rng, T), kt_below(&rng, 5), slots, T, NULL, 0};
        kt_out o;
        KT_OK(kt_evict(ctx, &b, &o));
        uint64_t digest_before = 0, digest_after = 0;
        kve_evict_out ov = kt_out_view(&o);
        KT_OK(kve_digest(ctx, &b, &ov, &digest_before));

        char *caches[2], *orig[2], *dst[2];
        kve_compact_desc d;
        memset(&d, 0, sizeof d);
        d.n_seqs = S, d.n_layers = L, d.n_heads = H, d.n_slots = T;
        d.slot_pos = slots, d.slot_pos_stride = T;
        d.evicted = o.evicted, d.evicted_stride = o.ev_stride, d.n_evicted = o.n_evicted;
        d.entry_bytes = g.e, d.n_caches = 2;
        fill_caches(&g, &rng, &d, caches, orig, dst);
        KT_OK(kve_compact(ctx, &d));
        check_compacted(&g, &o, before, slots, &d, orig);
        if (g.out_of_place) /* the source is untouched */
            for (int c = 0; c < 2; c++)
                ck_assert(!memcmp(caches[c], orig[c], layout_bytes(g.layout, S, L, H, T, g.e)));
        KT_OK(kve_digest(ctx, &b, NULL, &digest_after));
        ck_assert_uint_eq(digest_before, digest_after);
        for (int c = 0; c < 2; c++) {
            free(caches[c]);
            free(orig[c]);
            free(dst[c]);
        }
        kt_out_free(&o);
        free(slots);
        free(before);
    }
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(golden_digest)
{
    const kve_golden_digest_case *g = &kve_golden_digest;
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    size_t heads = (size_t)g->n_layers * g->n_heads;
    int32_t *slots = malloc(heads * g->n_slots * 4);
    for (size_t i = 0; i < heads; i++)
        memcpy(slots + i * g->n_slots, g->slot_pos, g->n_slots * 4);
    kve_seq seq = {g->seq_id, g->prompt, g->round};
    kve_batch b = {g->seed, g->flags, 1, &seq, g->n_layers, g->n_heads, g->layer_offset,
                   g->head_offset, g->n_slots, g->budget, g->window, slots, g->n_slots, NULL, 0};
    kt_out o;
    KT_OK(kt_evict(ctx, &b, &o));
    kve_evict_out ov = kt_out_view(&o);
    uint64_t d = 0;
    KT_OK(kve_digest(ctx, &b, &ov, &d));
    ck_assert_msg(d == g->digest, "digest 0x%016llx, golden 0x%016llx", (unsigned long long)d,
                  (unsigned long long)g->digest);

    /* The same bytes streamed by hand: seq_id, layer, head, count, positions. */
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (size_t i = 0; i < heads; i++) {
        uint32_t hdr[5] = {(uint32_t)g->seq_id, (uint32_t)(g->seq_id >> 32),
                           g->layer_offset + (uint32_t)(i / g->n_heads),
                           g->head_offset + (uint32_t)(i % g->n_heads), o.n_kept[i]};
        XXH3_64bits_update(st, hdr, sizeof hdr); /* little-endian host */
        for (uint32_t j = 0; j < o.n_kept[i]; j++) { /* slots hold position = slot */
            uint32_t p = (uint32_t)g->slot_pos[kt_kept(&o, i)[j]];
            XXH3_64bits_update(st, &p, 4);
        }
    }
    ck_assert_uint_eq(XXH3_64bits_digest(st), d);
    XXH3_freeState(st);
    kt_out_free(&o);
    free(slots);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(compact_digest, compact_matches_reference),
        KVE_TEST(compact_digest, golden_digest),
    };
    const kve_suite_spec spec = {"compact_digest", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

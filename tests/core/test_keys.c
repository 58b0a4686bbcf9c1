/* test_keys.c — keys: the portable XXH3 port and kve_keys against
 * libxxhash itself, and the golden keys of docs/SPEC.md. */
#include <xxhash.h>

#include "golden_vectors.h"
#include "kve_key.h"
#include "kve_suite.h"
#include "kve_test_util.h"

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The spec's key, built from its byte layout, libxxhash and the finisher of
 * keep-set v2 (m = h * 0x9E3779B1 mod 2^64, m ^ (m >> 32)). */
static uint64_t spec_key(uint64_t seed, uint32_t flags, const kve_coord *c)
{
    unsigned char id[8], b[16];
    le32(id, (uint32_t)c->seq_id);
    le32(id + 4, (uint32_t)(c->seq_id >> 32));
    uint64_t seq_seed = XXH3_64bits_withSeed(id, 8, seed);
    le32(b, (flags & KVE_SHARED_LAYERS) ? 0xFFFFFFFFu : c->layer);
    le32(b + 4, (flags & KVE_SHARED_HEADS) ? 0xFFFFFFFFu : c->head);
    le32(b + 8, c->pos);
    le32(b + 12, (flags & KVE_PERSISTENT) ? 0xFFFFFFFFu : c->round);
    uint64_t m = XXH3_64bits_withSeed(b, 16, seq_seed) * 0x9E3779B1u;
    return m ^ (m >> 32);
}

START_TEST(port_matches_libxxhash)
{
    uint64_t rng = 1;
    for (int i = 0; i < 500000; i++) {
        uint64_t seed = kt_next(&rng), lo = kt_next(&rng), hi = kt_next(&rng);
        if (i % 7 == 0)
            seed = i % 3 ? 0 : UINT64_MAX;
        unsigned char b[16];
        for (int k = 0; k < 8; k++) {
            b[k] = (unsigned char)(lo >> (8 * k));
            b[8 + k] = (unsigned char)(hi >> (8 * k));
        }
        ck_assert_uint_eq(kve_xxh3_len8(lo, seed), XXH3_64bits_withSeed(b, 8, seed));
        ck_assert_uint_eq(kve_xxh3_len16(lo, hi, seed), XXH3_64bits_withSeed(b, 16, seed));
    }
}
END_TEST

START_TEST(api_keys_match_spec)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    enum { N = 20000 };
    kve_coord *c = malloc(N * sizeof *c);
    uint64_t *keys = malloc(N * sizeof *keys);
    uint64_t rng = 2;
    for (uint32_t flags = 0; flags < 8; flags++) {
        uint64_t seed = kt_next(&rng);
        for (int i = 0; i < N; i++) /* runs of one seq_id, as engines batch them */
            c[i] = (kve_coord){i % 50 == 0 ? kt_next(&rng) : (i ? c[i - 1].seq_id : 3),
                               (uint32_t)kt_next(&rng), (uint32_t)kt_next(&rng),
                               (uint32_t)kt_next(&rng), (uint32_t)kt_next(&rng)};
        KT_OK(kve_keys(ctx, seed, flags, c, N, keys));
        for (int i = 0; i < N; i++)
            ck_assert_uint_eq(keys[i], spec_key(seed, flags, &c[i]));
        for (int i = 0; i < N; i += 997) /* the device-capable port agrees */
            ck_assert_uint_eq(keys[i], kve_key(kve_seq_seed(seed, c[i].seq_id), flags, c[i].layer,
                                               c[i].head, c[i].pos, c[i].round));
    }
    free(c);
    free(keys);
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(golden_keys)
{
    ck_assert_int_eq(KVE_GOLDEN_SPEC_VERSION, KVE_SPEC_VERSION);
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    for (size_t i = 0; i < KVE_GOLDEN_N_KEYS; i++) {
        const kve_golden_key *g = &kve_golden_keys[i];
        kve_coord c = {g->seq_id, g->layer, g->head, g->pos, g->round};
        uint64_t key = 0;
        KT_OK(kve_keys(ctx, g->seed, g->flags, &c, 1, &key));
        ck_assert_msg(key == g->key, "golden key %zu: 0x%016llx != 0x%016llx", i,
                      (unsigned long long)key, (unsigned long long)g->key);
        ck_assert_uint_eq(spec_key(g->seed, g->flags, &c), g->key);
    }
    kve_context_destroy(ctx);
}
END_TEST

/* Keep-set v2's finisher: m = x * 0x9E3779B1 mod 2^64, m ^ (m >> 32), and the
 * port's key is the finished 16-byte hash. */
START_TEST(finisher_is_spec)
{
    ck_assert_uint_eq(kve_key_finish(0), 0);
    ck_assert_uint_eq(kve_key_finish(1), 0x9E3779B1u);
    ck_assert_uint_eq(kve_key_finish(1ull << 32), 0x9E3779B19E3779B1ull);
    ck_assert_uint_eq(kve_key_finish(UINT64_MAX), 0xFFFFFFFF61C8864Full ^ 0xFFFFFFFFull);
    uint64_t rng = 3;
    for (int i = 0; i < 100000; i++) {
        uint64_t ss = kt_next(&rng), lo = kt_next(&rng), hi = kt_next(&rng);
        ck_assert_uint_eq(kve_key(ss, 0, (uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi,
                                  (uint32_t)(hi >> 32)),
                          kve_key_finish(kve_xxh3_len16(lo, hi, ss)));
    }
}
END_TEST

START_TEST(switches_replace_fields)
{
    /* Each switch makes the key ignore exactly its field. */
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    kve_coord a = {9, 1, 2, 3, 4}, c[4] = {a, a, a, a};
    c[1].round = 77;
    c[2].head = 77;
    c[3].layer = 77;
    uint64_t k[4];
    static const uint32_t flag_of[4] = {0, KVE_PERSISTENT, KVE_SHARED_HEADS, KVE_SHARED_LAYERS};
    for (int f = 1; f < 4; f++) {
        KT_OK(kve_keys(ctx, 1, flag_of[f], c, 4, k));
        for (int j = 1; j < 4; j++)
            ck_assert_int_eq(k[0] == k[j], j == f);
    }
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(keys, port_matches_libxxhash),
        KVE_TEST(keys, api_keys_match_spec),
        KVE_TEST(keys, golden_keys),
        KVE_TEST(keys, finisher_is_spec),
        KVE_TEST(keys, switches_replace_fields),
    };
    const kve_suite_spec spec = {"keys", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

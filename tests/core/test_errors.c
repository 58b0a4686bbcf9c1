/* test_errors.c — bad input of the core entry points (eviction, compaction,
 * KVE_SCORED's arguments, digest, names, the scorer, the calibration loader;
 * the state's and cache writes': test_errors_state.c): each case returns its
 * status, leaves a message naming the argument, writes no output (an
 * argument error), and never crashes (also under the sanitize preset). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kve_score_fixture.h"
#include "kve_suite.h"
#include "kve_test_util.h"

enum { N = 16, HEADS = 2 };

typedef struct {
    kve_context *ctx;
    kve_seq seq;
    int32_t slots[HEADS * N];
    kve_batch b;
    int32_t evicted[HEADS * N];
    uint32_t n_evicted[HEADS], n_kept[HEADS];
    uint8_t flags[HEADS];
    kve_evict_out o;
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &f->ctx));
    f->seq = (kve_seq){1, 4, 0};
    for (int i = 0; i < HEADS * N; i++)
        f->slots[i] = i % N;
    f->b = (kve_batch){7, 0, 1, &f->seq, 1, HEADS, 0, 0, N, 8, 2, f->slots, N, NULL, 0};
    for (int i = 0; i < HEADS; i++)
        f->n_evicted[i] = 0xDEAD;
    f->o = (kve_evict_out){.evicted = f->evicted, .evicted_stride = N, .n_evicted = f->n_evicted,
                           .n_kept = f->n_kept, .head_flags = f->flags};
}

/* No output was written by a failed call. */
static void untouched(const fixture *f)
{
    for (int i = 0; i < HEADS; i++)
        ck_assert_uint_eq(f->n_evicted[i], 0xDEAD);
}

START_TEST(evict_bad_arguments)
{
    fixture f;
    fixture_init(&f);
    kve_batch b;
    kve_evict_out o;

    EXPECT_ERR(kve_evict(NULL, &f.b, &f.o, NULL, 0), KVE_ERR_NULL, "ctx");
    EXPECT_ERR(kve_evict(f.ctx, NULL, &f.o, NULL, 0), KVE_ERR_NULL, "batch");
    EXPECT_ERR(kve_evict(f.ctx, &f.b, NULL, NULL, 0), KVE_ERR_NULL, "out");
    b = f.b, b.slot_pos = NULL;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_NULL, "batch.slot_pos");
    b = f.b, b.seqs = NULL;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_NULL, "batch.seqs");
    o = f.o, o.evicted = NULL;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_NULL, "out.evicted");
    o = f.o, o.n_kept = NULL;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_NULL, "out.n_kept");
    o = f.o, o.n_evicted = NULL;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_NULL, "out.n_evicted");

    b = f.b, b.flags = 0x100;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_INVALID, "batch.flags = 0x100");
    b = f.b, b.n_slots = 0x80000000u, b.slot_pos_stride = 0x80000000u;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_RANGE, "batch.n_slots = 2147483648");
    b = f.b, b.budget = 0xFFFFFFFFu;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_RANGE, "batch.budget = 4294967295");
    b = f.b, b.window = 0x90000000u;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_RANGE, "batch.window");
    b = f.b, b.n_seqs = b.n_layers = b.n_heads = 0xFFFFFFFFu;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_OVERFLOW, "overflows");
    b = f.b, b.head_offset = 0xFFFFFFFFu;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_OVERFLOW, "batch.head_offset");
    b = f.b, b.layer_offset = 0xFFFFFFFFu, b.n_layers = 2;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_OVERFLOW, "batch.layer_offset");
    b = f.b, b.slot_pos_stride = N - 1;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_ALIAS, "batch.slot_pos_stride = 15");
    b = f.b, b.slot_pos_stride = SIZE_MAX / 2;
    EXPECT_ERR(kve_evict(f.ctx, &b, &f.o, NULL, 0), KVE_ERR_OVERFLOW, "batch.slot_pos_stride");
    o = f.o, o.evicted_stride = 7; /* needs n_slots - budget = 8 */
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_RANGE, "out.evicted_stride = 7");
    o = f.o, o.kept = f.evicted, o.kept_stride = 4;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_RANGE, "out.kept_stride = 4");
    o = f.o, o.evicted = f.slots; /* outputs over the input */
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_ALIAS, "overlaps");
    o = f.o, o.n_kept = f.n_evicted;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_ALIAS, "out.n_evicted");
    o = f.o, o.round_digest = (uint64_t *)(void *)f.n_kept; /* over n_kept */
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &o, NULL, 0), KVE_ERR_ALIAS, "out.round_digest");
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &f.o, NULL, 64), KVE_ERR_NULL, "workspace");
    char small[8];
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &f.o, small, sizeof small), KVE_ERR_WORKSPACE,
               "workspace_bytes = 8");
    untouched(&f);
    kve_context_destroy(f.ctx);
}
END_TEST

START_TEST(evict_bad_slot_contents)
{
    fixture f;
    fixture_init(&f);
    f.slots[N + 5] = -7;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &f.o, NULL, 0), KVE_ERR_RANGE,
               "batch.slot_pos[head 1][slot 5] = -7");
    f.slots[N + 5] = 5;
    f.slots[9] = 3; /* position 3 twice in head 0 */
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &f.o, NULL, 0), KVE_ERR_DUPLICATE,
               "batch.slot_pos[head 0][slot 9] = 3");
    /* Sparse positions take the sorting path of the duplicate check. */
    f.slots[9] = 2000000000;
    f.slots[12] = 2000000000;
    EXPECT_ERR(kve_evict(f.ctx, &f.b, &f.o, NULL, 0), KVE_ERR_DUPLICATE, "= 2000000000");
    /* (outputs after a content error are unspecified: heads are checked as
     * they are evicted) */
    /* A caller who vouches for unique positions skips the check: any
     * result, but memory-safe, and counts still add up. */
    f.b.flags = KVE_TRUSTED_SLOTS;
    KT_OK(kve_evict(f.ctx, &f.b, &f.o, NULL, 0));
    ck_assert_uint_eq(f.n_evicted[0] + f.n_kept[0], N);
    kve_context_destroy(f.ctx);
}
END_TEST

/* KVE_SCORED's argument checks in kve_evict and kve_evict_workspace_size,
 * and kve_keys' refusal of the flag (NaN candidates: tests/cpu/test_scored.c). */
START_TEST(evict_scored_bad_arguments)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    int32_t slots[3 * N];
    float sc[3 * N];
    kve_seq seq;
    kve_batch b = kt_scored_batch(&seq, slots, sc, 3, N);
    kt_out o;
    kt_out_init(&o, &b);
    kve_evict_out v = kt_out_view(&o);
    kve_batch x = b;
    x.scores = NULL;
    EXPECT_ERR(kve_evict(ctx, &x, &v, NULL, 0), KVE_ERR_NULL, "batch.scores is NULL");
    x = b;
    x.scores_stride = N - 1;
    EXPECT_ERR(kve_evict(ctx, &x, &v, NULL, 0), KVE_ERR_RANGE, "batch.scores_stride = 15");
    x = b;
    x.flags |= KVE_PERSISTENT;
    EXPECT_ERR(kve_evict(ctx, &x, &v, NULL, 0), KVE_ERR_INVALID, "KVE_SCORED and KVE_PERSISTENT");
    x = b;
    x.scores = (const float *)(const void *)o.evicted; /* an output overlapping the scores */
    EXPECT_ERR(kve_evict(ctx, &x, &v, NULL, 0), KVE_ERR_ALIAS, "batch.scores");
    x = b;
    x.flags = 0;
    x.scores = NULL; /* random eviction ignores the score fields */
    x.scores_stride = 0;
    KT_OK(kve_evict(ctx, &x, &v, NULL, 0));
    kve_coord c = {1, 0, 0, 0, 0};
    uint64_t key;
    EXPECT_ERR(kve_keys(ctx, 1, KVE_SCORED, &c, 1, &key), KVE_ERR_INVALID, "KVE_SCORED");
    size_t ws;
    x = b;
    x.scores = NULL;
    EXPECT_ERR(kve_evict_workspace_size(ctx, &x, &ws), KVE_ERR_NULL, "batch.scores");
    kt_out_free(&o);
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(context_and_names)
{
    kve_context *ctx = NULL;
    EXPECT_ERR(kve_context_create((kve_backend)9, &ctx), KVE_ERR_INVALID, "backend = 9");
    ck_assert_ptr_null(ctx);
    EXPECT_ERR(kve_context_create(KVE_BACKEND_CPU, NULL), KVE_ERR_NULL, "out");
    kve_backend b;
    EXPECT_ERR(kve_backend_from_name("gpu", &b), KVE_ERR_INVALID,
               "backend name \"gpu\": expected auto, cpu, cuda or hip");
    kve_cpu_isa isa;
    EXPECT_ERR(kve_cpu_isa_from_name("sse9", &isa), KVE_ERR_INVALID,
               "ISA name \"sse9\": expected auto, scalar, avx2 or avx512");
    KT_OK(kve_cpu_isa_from_name("AVX512", &isa)); /* any case */
    ck_assert_int_eq(isa, KVE_CPU_ISA_AVX512);
    ck_assert_str_eq(kve_cpu_isa_name((kve_cpu_isa)4), "?");
    ck_assert_str_eq(kve_backend_name(KVE_BACKEND_HIP), "hip");
    int avail = -1;
    EXPECT_ERR(kve_backend_available((kve_backend)-3, &avail), KVE_ERR_INVALID, "backend = -3");
    KT_OK(kve_backend_available(KVE_BACKEND_CPU, &avail));
    ck_assert_int_eq(avail, 1);

    setenv("KVE_BACKEND", "tpu", 1);
    EXPECT_ERR(kve_context_create(KVE_BACKEND_AUTO, &ctx), KVE_ERR_ENV,
               "KVE_BACKEND=\"tpu\": expected auto, cpu, cuda or hip");
    setenv("KVE_BACKEND", "cpu", 1);
    KT_OK(kve_context_create(KVE_BACKEND_AUTO, &ctx));
    KT_OK(kve_context_get_backend(ctx, &b));
    ck_assert_int_eq(b, KVE_BACKEND_CPU);
    unsetenv("KVE_BACKEND");
    setenv("KVE_CPU_ISA", "mmx", 1);
    kve_context *bad = NULL;
    EXPECT_ERR(kve_context_create(KVE_BACKEND_CPU, &bad), KVE_ERR_ENV,
               "KVE_CPU_ISA=\"mmx\": expected auto, scalar, avx2 or avx512");
    unsetenv("KVE_CPU_ISA");

    EXPECT_ERR(kve_context_set_threads(ctx, -1), KVE_ERR_RANGE, "threads = -1");
    EXPECT_ERR(kve_context_set_threads(ctx, 5000), KVE_ERR_RANGE, "threads = 5000");
    EXPECT_ERR(kve_context_set_device(ctx, 1), KVE_ERR_RANGE, "device = 1");
    EXPECT_ERR(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)17), KVE_ERR_INVALID, "isa = 17");
    EXPECT_ERR(kve_context_get_threads(NULL, &avail), KVE_ERR_NULL, "ctx");
    EXPECT_ERR(kve_alloc(ctx, 0, (void **)&bad), KVE_ERR_RANGE, "bytes = 0");
    char buf[64];
    EXPECT_ERR(kve_copy(ctx, buf + 8, buf, 32, KVE_COPY_BACKEND_TO_BACKEND), KVE_ERR_ALIAS,
               "overlap");
    EXPECT_ERR(kve_copy(ctx, buf, NULL, 32, KVE_COPY_HOST_TO_BACKEND), KVE_ERR_NULL, "src");
    EXPECT_ERR(kve_copy(ctx, buf, buf, 1, (kve_copy_kind)7), KVE_ERR_INVALID, "kind = 7");
    kve_coord c = {0, 0, 0, 0, 0};
    uint64_t key;
    EXPECT_ERR(kve_keys(ctx, 0, KVE_TRUSTED_SLOTS, &c, 1, &key), KVE_ERR_INVALID, "flags = 0x8");
    EXPECT_ERR(kve_keys(ctx, 0, 0, NULL, 1, &key), KVE_ERR_NULL, "coords");
    EXPECT_ERR(kve_keys(ctx, 0, 0, &c, 1, NULL), KVE_ERR_NULL, "keys");
    EXPECT_ERR(kve_keys(ctx, 0, 0, &c, SIZE_MAX / 8, &key), KVE_ERR_OVERFLOW, "overflow");
    EXPECT_ERR(kve_version(NULL), KVE_ERR_NULL, "out_version");
    ck_assert_int_eq(kve_context_destroy(NULL), KVE_OK);
    ck_assert_str_eq(kve_status_string(KVE_ERR_DUPLICATE), "KVE_ERR_DUPLICATE");
    ck_assert_str_eq(kve_status_string((kve_status)99), "KVE_ERR_UNKNOWN_STATUS");
    ck_assert_str_eq(kve_backend_name((kve_backend)99), "?");
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(compact_bad_arguments)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    int32_t slots[2 * 8], evicted[2 * 8] = {1, 3, 0, 0, 0, 0, 0, 0, 2};
    uint32_t n_evicted[2] = {2, 1};
    char k[2 * 8 * 16], v[2 * 8 * 16], out[2 * 8 * 16];
    for (int i = 0; i < 16; i++)
        slots[i] = i % 8;
    kve_compact_desc d, good;
    memset(&good, 0, sizeof good);
    good.n_seqs = good.n_layers = 1;
    good.n_heads = 2;
    good.n_slots = 8;
    good.slot_pos = slots;
    good.slot_pos_stride = 8;
    good.evicted = evicted;
    good.evicted_stride = 8;
    good.n_evicted = n_evicted;
    good.entry_bytes = 16;
    good.n_caches = 2;
    good.src[0] = (kve_cache_view){k, 0, 0, 8 * 16, 16};
    good.src[1] = (kve_cache_view){v, 0, 0, 8 * 16, 16};

    EXPECT_ERR(kve_compact(NULL, &good), KVE_ERR_NULL, "ctx");
    EXPECT_ERR(kve_compact(ctx, NULL), KVE_ERR_NULL, "desc");
    d = good, d.entry_bytes = 0;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_RANGE, "desc.entry_bytes = 0");
    d = good, d.n_caches = 0;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_RANGE, "desc.n_caches = 0");
    d = good, d.n_caches = 9;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_RANGE, "desc.n_caches = 9");
    d = good, d.src[1].base = NULL;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_NULL, "desc.src[1].base");
    d = good, d.src[0].stride_slot = 8; /* entries of 16 bytes 8 apart */
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_ALIAS, "src[0].stride_slot = 8");
    d = good, d.src[0].stride_head = 64; /* head rows overlap */
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_ALIAS, "src[0].stride_head = 64");
    d = good, d.dst[0] = (kve_cache_view){k + 16, 0, 0, 8 * 16, 16};
    d.dst[1] = (kve_cache_view){out, 0, 0, 8 * 16, 16};
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_ALIAS, "desc.dst[0]");
    d = good, d.dst[1] = (kve_cache_view){out, 0, 0, 8 * 16, 16};
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_INVALID, "desc.dst[1].base is set");
    d = good, d.slot_pos = NULL;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_NULL, "desc.slot_pos");
    d = good, d.slot_pos_stride = 4;
    EXPECT_ERR(kve_compact(ctx, &d), KVE_ERR_ALIAS, "desc.slot_pos_stride = 4");
    evicted[1] = 1;
    EXPECT_ERR(kve_compact(ctx, &good), KVE_ERR_INVALID, "desc.evicted[head 0][1] = 1");
    evicted[1] = 9;
    EXPECT_ERR(kve_compact(ctx, &good), KVE_ERR_RANGE, "desc.evicted[head 0][1] = 9");
    evicted[1] = 3;
    slots[3] = -1;
    EXPECT_ERR(kve_compact(ctx, &good), KVE_ERR_INVALID, "slot 3, which is empty");
    slots[3] = 3;
    n_evicted[1] = 12;
    EXPECT_ERR(kve_compact(ctx, &good), KVE_ERR_RANGE, "desc.n_evicted[1] = 12");
    n_evicted[1] = 1;
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(slots[i], i % 8); /* nothing moved by failed calls */
    KT_OK(kve_compact(ctx, &good));
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(digest_bad_arguments)
{
    fixture f;
    fixture_init(&f);
    uint64_t d;
    EXPECT_ERR(kve_digest(f.ctx, &f.b, NULL, NULL), KVE_ERR_NULL, "out_digest");
    EXPECT_ERR(kve_digest(NULL, &f.b, NULL, &d), KVE_ERR_NULL, "ctx");
    kve_evict_out o = f.o;
    o.evicted = NULL;
    EXPECT_ERR(kve_digest(f.ctx, &f.b, &o, &d), KVE_ERR_NULL, "evicted.evicted");
    kve_context_destroy(f.ctx);
}
END_TEST

/* The scorer (kve_score) and the calibration loader. */
typedef struct {
    const char *what;
    kve_status status;
    const char *word;
} expect_err;

static void check_err(kve_context *ctx, kve_score_desc *d, expect_err e)
{
    kve_status st = kve_score(ctx, d);
    ck_assert_msg(st == e.status && strstr(kve_last_error(), e.word),
               "%s: got %s \"%s\", expected %s naming %s", e.what, kve_status_string(st),
               kve_last_error(), kve_status_string(e.status), e.word);
}

START_TEST(score_bad_arguments)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    kve_score_desc d = base_desc();
    ck_assert_msg(kve_score(NULL, &d) == KVE_ERR_NULL, "ctx NULL");
    ck_assert_msg(kve_score(ctx, NULL) == KVE_ERR_NULL, "desc NULL");
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
    CASE(d.keys.pages.kind = 4, KVE_ERR_INVALID, "desc.keys.pages.kind");
    CASE(d.keys.pages.page_size = 0, KVE_ERR_RANGE, "desc.keys.pages.page_size");
    CASE(d.keys.pages.n_pages = 0, KVE_ERR_RANGE, "desc.keys.pages.n_pages");
    CASE(d.keys.pages.n_rows = 0, KVE_ERR_RANGE, "desc.keys.pages.n_rows");
    CASE(d.keys.pages.n_rows = 2, KVE_ERR_RANGE, "desc.keys.pages.n_rows");
    CASE(d.keys.pages.kind = KVE_PAGES_BLOCK_TABLE, KVE_ERR_NULL, "desc.keys.pages.block_table");
    CASE(d.keys.pages.kind = KVE_PAGES_INDPTR, KVE_ERR_NULL, "desc.keys.pages.indptr");
    CASE(d.keys.base = (const char *)g_keys + 2, KVE_ERR_INVALID, "desc.keys.base");
    CASE(d.keys.stride_page = (SIZE_MAX / 2) & ~(size_t)3; d.keys.pages.n_pages = 4; d.keys.pages.n_rows = 1,
         KVE_ERR_OVERFLOW, "desc.keys");
    CASE(d.heads_per_table = 3, KVE_ERR_RANGE, "desc.heads_per_table");
    CASE(d.rows = NULL, KVE_ERR_NULL, "desc.rows");
    CASE(d.slot_pos = NULL, KVE_ERR_NULL, "desc.slot_pos");
    CASE(d.scores = NULL, KVE_ERR_NULL, "desc.scores");
    CASE(g_row.cache_row = 1, KVE_ERR_RANGE, "desc.rows[0].cache_row");
    CASE(g_row.n_slots = 0x80000000u, KVE_ERR_RANGE, "desc.rows[0].n_slots");
    CASE(d.keys.pages.page_size = 4; d.keys.pages.n_pages = 2, KVE_ERR_RANGE, "slot 4: not a slot of its row");
    CASE(g_tab[3] = -2, KVE_ERR_RANGE, "desc.slot_pos[row 0][table 0][slot 3]");
    g_tab[3] = 3;
    /* two rows writing one output row */
    kve_score_row two[2];
    CASE(two[0] = two[1] = g_row; d.rows = two; d.n_rows = 2; d.keys.pages.n_rows = 1;
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
    kve_context_destroy(ctx);
}
END_TEST

/* The calibration loader on files written here: one it reads, then bad ones. */
START_TEST(stats_file_checks)
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
    ck_assert_msg(kve_triattention_stats_load(path, &s) == KVE_OK && s.n_layers == 1 &&
                   s.head_dim == 2 && s.q_mean[1] == -0.25f && s.q_abs_mean[0] == 1.0f &&
                   s.rope_theta == 1e4,
               "stats load: %s", kve_last_error());
    kve_triattention_stats_free(&s);
    ck_assert_msg(s.q_mean == NULL, "stats free");
    h[32 + 8 + 3] = 0xff; /* q_abs_mean = NaN */
    f = fopen(path, "wb");
    fwrite(h, 1, sizeof h, f);
    fclose(f);
    ck_assert_msg(kve_triattention_stats_load(path, &s) == KVE_ERR_INVALID &&
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
    ck_assert_msg(kve_triattention_stats_load(path, &s) == KVE_ERR_INVALID &&
                   strstr(kve_last_error(), "44 bytes") && strstr(kve_last_error(), "promises") &&
                   s.q_mean == NULL,
               "huge header over a short file: %s", kve_last_error());
    ck_assert_msg(kve_triattention_stats_load("/nonexistent/x", &s) == KVE_ERR_INVALID &&
                   strstr(kve_last_error(), "/nonexistent/x"),
               "missing file: %s", kve_last_error());
    ck_assert_msg(kve_triattention_stats_load(NULL, &s) == KVE_ERR_NULL, "path NULL");
    remove(path);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(errors, evict_bad_arguments),
        KVE_TEST(errors, evict_bad_slot_contents),
        KVE_TEST(errors, evict_scored_bad_arguments),
        KVE_TEST(errors, context_and_names),
        KVE_TEST(errors, compact_bad_arguments),
        KVE_TEST(errors, digest_bad_arguments),
        KVE_TEST(errors, score_bad_arguments),
        KVE_TEST(errors, stats_file_checks),
    };
    const kve_suite_spec spec = {"errors", 60, 0, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

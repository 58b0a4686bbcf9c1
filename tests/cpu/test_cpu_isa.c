/* test_cpu_isa.c — every CPU ISA this machine runs, at 1, 2 and 3 threads,
 * against the scalar reference through the public API: keys (and those
 * against libxxhash itself), evictions on thousands of random batches,
 * compaction in and out of place (and its runs against a direct reference);
 * ISA selection and its errors. */
#include <stdio.h>
#include <xxhash.h>

#include "kve_cpu_test.h"
#include "kve_suite.h"
#include "kve_test_util.h"

/* ---- keys ------------------------------------------------------------------ */

static uint64_t xxh_key(uint64_t seed, uint32_t flags, const kve_coord *c)
{
    unsigned char b8[8], b16[16];
    for (int i = 0; i < 8; i++)
        b8[i] = (unsigned char)(c->seq_id >> (8 * i));
    uint32_t w[4] = {flags & KVE_SHARED_LAYERS ? 0xFFFFFFFFu : c->layer,
                     flags & KVE_SHARED_HEADS ? 0xFFFFFFFFu : c->head, c->pos,
                     flags & KVE_PERSISTENT ? 0xFFFFFFFFu : c->round};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++)
            b16[4 * k + i] = (unsigned char)(w[k] >> (8 * i));
    /* keep-set v2's finisher */
    uint64_t m = XXH3_64bits_withSeed(b16, 16, XXH3_64bits_withSeed(b8, 8, seed)) * 0x9E3779B1u;
    return m ^ (m >> 32);
}

static uint32_t rand_u32_edge(uint64_t *rng)
{
    switch (kt_below(rng, 4)) {
    case 0: return kt_below(rng, 16);
    case 1: return 0xFFFFFFFFu - kt_below(rng, 4);
    case 2: return 0x7FFFFFFFu + kt_below(rng, 3) - 1;
    default: return (uint32_t)kt_next(rng);
    }
}

START_TEST(keys_match_libxxhash)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 2609;
    for (int iter = 0; iter < 300; iter++) {
        size_t n = iter == 0 ? 9000 : kt_below(&rng, 70); /* 9000: several 4096-key chunks */
        uint64_t seed = iter % 3 ? kt_next(&rng) : rand_u32_edge(&rng);
        uint32_t flags = kt_below(&rng, 8);
        kve_coord *c = (kve_coord *)malloc((n + 1) * sizeof *c);
        uint64_t *want = (uint64_t *)malloc((n + 1) * 8), *got = (uint64_t *)malloc((n + 1) * 8);
        uint64_t ids[3] = {kt_next(&rng), kt_below(&rng, 5), ~(uint64_t)kt_below(&rng, 5)};
        for (size_t i = 0; i < n; i++) {
            c[i] = (kve_coord){ids[kt_below(&rng, 3)], rand_u32_edge(&rng), rand_u32_edge(&rng),
                               rand_u32_edge(&rng), rand_u32_edge(&rng)};
            want[i] = xxh_key(seed, flags, &c[i]);
        }
        for (int k = 0; k < s.n; k++) {
            memset(got, 0, (n + 1) * 8);
            KT_OK(kve_keys(s.ctx[k], seed, flags, c, n, got));
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(got[i] == want[i], "%s: key %zu of %zu (flags %u): %016llx != %016llx",
                              s.name[k], i, n, flags, (unsigned long long)got[i],
                              (unsigned long long)want[i]);
        }
        free(c);
        free(want);
        free(got);
    }
    isa_set_close(&s);
}
END_TEST

/* ---- eviction --------------------------------------------------------------- */

typedef struct {
    kve_seq seqs[3];
    kve_batch b;
    int32_t *slots;
} batch;

static void shuffle(uint64_t *rng, int32_t *a, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = kt_below(rng, i);
        int32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* `valid` distinct positions below `span` (>= valid) in random slots, the
 * rest -1: a partial shuffle of 0..span-1, then of the slots. */
static void random_table(uint64_t *rng, int32_t *row, uint32_t n, uint32_t valid, uint32_t span)
{
    int32_t *pool = (int32_t *)malloc(((size_t)span + 1) * 4);
    for (uint32_t i = 0; i < span; i++)
        pool[i] = (int32_t)i;
    for (uint32_t i = 0; i < valid; i++) {
        uint32_t j = i + kt_below(rng, span - i);
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
    for (uint32_t t = 0; t < n; t++)
        row[t] = t < valid ? pool[t] : -1;
    free(pool);
    shuffle(rng, row, n);
}

/* A decode-like table: positions 0..valid-1 (prompt first), the generated
 * part optionally shuffled (slot reuse), holes optionally punched, and
 * positions optionally offset near 2^31-1. */
static void decode_table(uint64_t *rng, int32_t *row, uint32_t n, uint32_t valid, uint32_t prompt)
{
    uint32_t base = kt_below(rng, 8) == 0 ? 0x7FFFFFFFu - valid - kt_below(rng, 3) : 0;
    for (uint32_t t = 0; t < n; t++)
        row[t] = t < valid ? (int32_t)(base + t) : -1;
    uint32_t from = prompt < valid ? prompt : valid;
    if (kt_below(rng, 2))
        shuffle(rng, row + from, n - from);
    if (kt_below(rng, 3) == 0)
        shuffle(rng, row, n);
}

/* big: 0 small tables, 1 up to 3200 slots, 2 past 32768 slots a head (each
 * head then has a thread of its own: kve_evict's threads split the heads). */
static void batch_make(uint64_t *rng, batch *r, int big)
{
    memset(r, 0, sizeof *r);
    kve_batch *b = &r->b;
    b->seed = kt_next(rng);
    b->flags = kt_below(rng, 16); /* every switch, and KVE_TRUSTED_SLOTS */
    b->n_seqs = 1 + kt_below(rng, big == 2 ? 2 : 3);
    b->n_layers = big == 2 ? 1 : 1 + kt_below(rng, 3);
    b->n_heads = 1 + kt_below(rng, 4);
    b->layer_offset = kt_below(rng, 3) ? kt_below(rng, 100) : 0xFFFFFFFFu - b->n_layers + 1;
    b->head_offset = kt_below(rng, 100);
    b->n_slots = big == 2 ? 33000 + kt_below(rng, 8000) : big ? 600 + kt_below(rng, 2600) : 1 + kt_below(rng, 300);
    uint32_t n = b->n_slots;
    switch (kt_below(rng, 6)) { /* the budget, around the interesting points */
    case 0: b->budget = 0; break;
    case 1: b->budget = kt_below(rng, 3) ? 0x7FFFFFFFu : n + kt_below(rng, 3); break;
    case 2: b->budget = n - kt_below(rng, n < 4 ? n + 1 : 4); break; /* 0..3 evictions */
    default: b->budget = kt_below(rng, n + 1);
    }
    switch (kt_below(rng, 5)) {
    case 0: b->window = 0; break;
    case 1: b->window = kt_below(rng, 2) ? 0x7FFFFFFFu : n + kt_below(rng, 5); break;
    default: b->window = kt_below(rng, 2) ? 64 : kt_below(rng, n / 2 + 2);
    }
    b->slot_pos_stride = n + kt_below(rng, 3);
    int decode = kt_below(rng, 3) != 0, same_rows = kt_below(rng, 2);
    for (uint32_t s = 0; s < b->n_seqs; s++) {
        uint32_t p = kt_below(rng, n + 1);
        if (kt_below(rng, 10) == 0)
            p = kt_below(rng, 2) ? 0xFFFFFFFFu : 0x80000000u;
        r->seqs[s] = (kve_seq){s && kt_below(rng, 2) ? r->seqs[0].seq_id : kt_next(rng), p,
                               kt_below(rng, 3) ? kt_below(rng, 6) : 0xFFFFFFFFu};
    }
    b->seqs = r->seqs;
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    r->slots = (int32_t *)malloc((heads * b->slot_pos_stride + 1) * 4);
    memset(r->slots, 0xff, (heads * b->slot_pos_stride + 1) * 4); /* padding between rows: -1 */
    for (size_t i = 0; i < heads; i++) {
        int32_t *row = r->slots + i * b->slot_pos_stride;
        uint32_t P = r->seqs[i / ((size_t)b->n_layers * b->n_heads)].prompt_len;
        if (same_rows && i % ((size_t)b->n_layers * b->n_heads)) { /* heads of a sequence alike */
            memcpy(row, row - b->slot_pos_stride, (size_t)n * 4);
            continue;
        }
        uint32_t valid = kt_below(rng, 4) ? n - kt_below(rng, n < 8 ? n + 1 : n / 8) : kt_below(rng, n + 1);
        if (decode)
            decode_table(rng, row, n, valid, P);
        else
            random_table(rng, row, n, valid, valid + kt_below(rng, 3 * (valid + 1)));
    }
    b->slot_pos = r->slots;
}

/* Prompt and window chosen so that a head has exactly `cand` candidates. */
static void batch_with_candidates(uint64_t *rng, batch *r, uint32_t cand)
{
    batch_make(rng, r, 0);
    kve_batch *b = &r->b;
    uint32_t n = b->n_slots, W = kt_below(rng, 4);
    for (uint32_t s = 0; s < b->n_seqs; s++) {
        uint32_t P = n > cand + W ? n - cand - W : 0;
        r->seqs[s].prompt_len = P;
    }
    b->window = W;
    b->budget = kt_below(rng, n + 1);
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    for (size_t i = 0; i < heads; i++)
        decode_table(rng, r->slots + i * b->slot_pos_stride, n, n, r->seqs[i / ((size_t)b->n_layers * b->n_heads)].prompt_len);
}

static void expect_same(const char *who, int iter, const kt_out *a, const kt_out *b, int with_kept)
{
    for (size_t q = 0; q < a->seqs; q++)
        ck_assert_msg(a->run[q] == b->run[q], "%s, batch %d, seq %zu: run_digest differs", who, iter,
                      q);
    for (size_t i = 0; i < a->heads; i++) {
        ck_assert_msg(a->n_evicted[i] == b->n_evicted[i] && a->n_kept[i] == b->n_kept[i] &&
                          a->flags[i] == b->flags[i],
                      "%s, batch %d, head %zu: evicted %u kept %u flags %u, scalar %u %u %u", who,
                      iter, i, b->n_evicted[i], b->n_kept[i], b->flags[i], a->n_evicted[i],
                      a->n_kept[i], a->flags[i]);
        ck_assert_msg(!memcmp(kt_ev(a, i), kt_ev(b, i), a->n_evicted[i] * 4),
                      "%s, batch %d, head %zu: evicted slots differ", who, iter, i);
        ck_assert_msg(a->digest[i] == b->digest[i],
                      "%s, batch %d, head %zu: round digest 0x%016llx, scalar 0x%016llx", who,
                      iter, i, (unsigned long long)b->digest[i], (unsigned long long)a->digest[i]);
        ck_assert_msg(!with_kept || !memcmp(kt_kept(a, i), kt_kept(b, i), a->n_kept[i] * 4),
                      "%s, batch %d, head %zu: kept slots differ", who, iter, i);
    }
}

/* Evicts with ctx; kept rows only when with_kept; a caller workspace when asked. */
static void run_evict(kve_context *ctx, const kve_batch *b, kt_out *o, int with_kept, int own_ws)
{
    kt_out_init(o, b);
    kve_evict_out v = kt_out_view(o);
    if (!with_kept) {
        v.kept = NULL;
        v.kept_stride = 0;
    }
    void *ws = NULL;
    size_t bytes = 0;
    if (own_ws) {
        KT_OK(kve_evict_workspace_size(ctx, b, &bytes));
        ws = bytes ? malloc(bytes) : NULL;
        memset(ws, 0xA5, bytes); /* stale bytes: kernels must not depend on them */
    }
    KT_OK(kve_evict(ctx, b, &v, ws, bytes));
    free(ws);
}

static void check_batch(isa_set *s, batch *r, int iter, uint64_t *rng)
{
    int with_kept = kt_below(rng, 4) != 0, own_ws = kt_below(rng, 2);
    kt_out ref;
    run_evict(s->ctx[0], &r->b, &ref, with_kept, 0);
    for (int k = 1; k < s->n; k++) {
        kt_out o;
        run_evict(s->ctx[k], &r->b, &o, with_kept, own_ws);
        expect_same(s->name[k], iter, &ref, &o, with_kept);
        kt_out_free(&o);
    }
    kt_out_free(&ref);
}

START_TEST(evict_random_batches)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 3430;
    for (int iter = 0; iter < 2400; iter++) {
        batch r;
        if (iter % 6 == 5)
            batch_with_candidates(&rng, &r, kt_below(&rng, 3)); /* 0, 1 or 2 candidates */
        else
            batch_make(&rng, &r, iter % 100 == 50 ? 2 : iter % 40 == 0);
        check_batch(&s, &r, iter, &rng);
        free(r.slots);
    }
    isa_set_close(&s);
}
END_TEST

/* The G1 shape at a small scale: a decode under the paper's schedule with
 * slot reuse, every head evicting a little; then a small budget (the kept
 * side is the smaller one) and an over-budget prompt. */
START_TEST(evict_decode_rounds)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 4096;
    const uint32_t L = 3, H = 4, P = 200, B = 400, W = 64, R = 64, n = B + R;
    int32_t *slots = kt_decode_tables((size_t)L * H, n);
    kve_seq seq = {77, P, 0};
    uint32_t next = n;
    for (uint32_t round = 0; round < 40; round++) {
        seq.round = round;
        kve_batch b = {kt_next(&rng), round % 8 == 7 ? KVE_PERSISTENT : 0, 1, &seq, L, H, 0, 0, n,
                       round % 10 == 9 ? 40 : round % 10 == 8 ? 150 : B, W, slots, n, NULL, 0};
        batch r = {{seq}, b, slots};
        check_batch(&s, &r, (int)round, &rng);
        kt_out o;
        run_evict(s.ctx[0], &b, &o, 0, 0);
        next = kt_refill_freed(slots, (size_t)L * H, n, &o, next);
        kt_out_free(&o);
    }
    free(slots);
    isa_set_close(&s);
}
END_TEST

/* ---- compaction ------------------------------------------------------------- */

START_TEST(compact_matches_scalar)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 515;
    for (int iter = 0; iter < 120; iter++) {
        batch r;
        batch_make(&rng, &r, 0);
        kve_batch *b = &r.b;
        b->flags &= ~(uint32_t)KVE_TRUSTED_SLOTS;
        kt_out o;
        run_evict(s.ctx[0], b, &o, 0, 0);
        uint32_t S = b->n_seqs, L = b->n_layers, H = b->n_heads, T = b->n_slots;
        size_t e = 1 + kt_below(&rng, iter % 4 ? 300 : 2000), heads = (size_t)S * L * H;
        int token_rows = iter % 2, out_of_place = (iter / 2) % 2;
        size_t bytes = heads * T * e, ncache = 1 + kt_below(&rng, 3);
        char *src0 = malloc(bytes * ncache);
        for (size_t i = 0; i < bytes * ncache; i++)
            src0[i] = (char)kt_next(&rng);
        char *ref_buf = NULL;
        int32_t *ref_slots = NULL;
        for (int k = 0; k < s.n; k++) {
            char *src = malloc(bytes * ncache), *dst = malloc(bytes * ncache);
            memcpy(src, src0, bytes * ncache);
            memset(dst, 0x5a, bytes * ncache);
            int32_t *slots = malloc(heads * b->slot_pos_stride * 4);
            memcpy(slots, b->slot_pos, heads * b->slot_pos_stride * 4);
            kve_compact_desc d;
            memset(&d, 0, sizeof d);
            d.n_seqs = S, d.n_layers = L, d.n_heads = H, d.n_slots = T;
            d.slot_pos = slots, d.slot_pos_stride = b->slot_pos_stride;
            d.evicted = o.evicted, d.evicted_stride = o.ev_stride, d.n_evicted = o.n_evicted;
            d.entry_bytes = e, d.n_caches = (uint32_t)ncache;
            for (size_t c = 0; c < ncache; c++) {
                kve_cache_view v = token_rows /* [S][T][L][H][e] or [S][L][H][T][e] */
                    ? (kve_cache_view){src + c * bytes, T * L * H * e, H * e, e, L * H * e}
                    : (kve_cache_view){src + c * bytes, L * H * T * e, H * T * e, T * e, e};
                d.src[c] = v;
                if (out_of_place) {
                    v.base = dst + c * bytes;
                    d.dst[c] = v;
                }
            }
            KT_OK(kve_compact(s.ctx[k], &d));
            char *result = out_of_place ? dst : src;
            if (k == 0) {
                ref_buf = result;
                ref_slots = slots;
                free(out_of_place ? src : dst);
                continue;
            }
            ck_assert_msg(!memcmp(ref_buf, result, bytes * ncache), "%s, batch %d: cache bytes differ",
                          s.name[k], iter);
            ck_assert_msg(!memcmp(ref_slots, slots, heads * b->slot_pos_stride * 4),
                          "%s, batch %d: slot_pos differs", s.name[k], iter);
            free(src);
            free(dst);
            free(slots);
        }
        free(ref_buf);
        free(ref_slots);
        free(src0);
        kt_out_free(&o);
        free(r.slots);
    }
    isa_set_close(&s);
}
END_TEST

/* Tables whose kept slots form runs of every kind (long runs of full rows,
 * runs of one between evictions, holes, and every head alike so that token
 * rows join whole rows across heads), in slot-major and head-major caches,
 * on every ISA and thread count, against a direct per-entry reference. */
typedef struct {
    uint32_t L, H, T, ncache;
    size_t e;
    int token_rows, out_of_place;
} runs_shape;

/* Head rows of pattern @p p and their ascending evicted lists. */
static void runs_tables(uint64_t *rng, const runs_shape *g, int p, int32_t *rows, int32_t *ev,
                        uint32_t *n_ev)
{
    for (size_t i = 0; i < (size_t)g->L * g->H; i++) {
        int32_t *row = rows + i * g->T, *e = ev + i * g->T;
        if (p == 3 && i > 0) { /* every head as the first */
            memcpy(row, rows, g->T * 4);
            memcpy(e, ev, g->T * 4);
            n_ev[i] = n_ev[0];
            continue;
        }
        n_ev[i] = 0;
        for (uint32_t t = 0; t < g->T; t++) {
            int hole = p == 2 && kt_below(rng, 5) == 0;
            row[t] = hole ? -1 : (int32_t)t;
            int evict = !hole && (p == 1 ? t % 2 == 1 : kt_below(rng, p == 0 ? 40 : 6) == 0);
            if (evict)
                e[n_ev[i]++] = (int32_t)t;
        }
    }
}

static kve_cache_view runs_view(const runs_shape *g, char *base)
{
    size_t L = g->L, H = g->H, T = g->T, e = g->e;
    return g->token_rows ? (kve_cache_view){base, 0, H * e, e, L * H * e}
                         : (kve_cache_view){base, 0, H * T * e, T * e, e};
}

START_TEST(compact_runs_exact)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 733;
    static const size_t sizes[] = {1, 3, 8, 32, 40, 64, 100, 256};
    for (int iter = 0; iter < 104; iter++) {
        runs_shape g = {1 + kt_below(&rng, 3), 1 + kt_below(&rng, 4),
                        iter % 8 == 7 ? 1000 : 1 + kt_below(&rng, 200), 1 + kt_below(&rng, 3),
                        sizes[kt_below(&rng, 8)], iter % 2, (iter / 2) % 2};
        /* 16 MiB of rows: the copies stream (kernels_cpu/compact_cpu.c), with holes
         * (96..99), without (100..103), 102 and 103 off 16-byte alignment. */
        size_t off = iter >= 102 ? 8 : 0;
        if (iter >= 96)
            g = (runs_shape){1, 8, 2048, 2, 512, iter % 2, (iter / 2) % 2};
        int p = iter >= 100 ? 0 : iter >= 96 ? 2 : (iter / 4) % 4;
        size_t heads = (size_t)g.L * g.H, bytes = heads * g.T * g.e;
        int32_t *rows = malloc(heads * g.T * 4), *ev = malloc(heads * g.T * 4);
        int32_t *slots = malloc(heads * g.T * 4);
        uint32_t *n_ev = malloc(heads * 4);
        runs_tables(&rng, &g, p, rows, ev, n_ev);
        char *orig = malloc(bytes * g.ncache), *src_mem = malloc(bytes * g.ncache + off);
        char *dst_mem = malloc(bytes * g.ncache + off), *src = src_mem + off, *dst = dst_mem + off;
        for (size_t i = 0; i < bytes * g.ncache; i += 8) { /* 8 random bytes a draw */
            uint64_t v = kt_next(&rng);
            memcpy(orig + i, &v, bytes * g.ncache - i < 8 ? bytes * g.ncache - i : 8);
        }
        for (int k = 0; k < s.n; k++) {
            memcpy(src, orig, bytes * g.ncache);
            memcpy(slots, rows, heads * g.T * 4);
            kve_compact_desc d;
            memset(&d, 0, sizeof d);
            d.n_seqs = 1, d.n_layers = g.L, d.n_heads = g.H, d.n_slots = g.T;
            d.slot_pos = slots, d.slot_pos_stride = g.T;
            d.evicted = ev, d.evicted_stride = g.T, d.n_evicted = n_ev;
            d.entry_bytes = g.e, d.n_caches = g.ncache;
            for (uint32_t c = 0; c < g.ncache; c++) {
                d.src[c] = runs_view(&g, src + c * bytes);
                if (g.out_of_place)
                    d.dst[c] = runs_view(&g, dst + c * bytes);
            }
            KT_OK(kve_compact(s.ctx[k], &d));
            for (size_t i = 0; i < heads; i++) {
                const int32_t *row = rows + i * g.T, *e = ev + i * g.T;
                uint32_t j = 0, x = 0;
                for (uint32_t t = 0; t < g.T; t++) {
                    if (x < n_ev[i] && e[x] == (int32_t)t) {
                        x++;
                        continue;
                    }
                    if (row[t] < 0)
                        continue;
                    ck_assert_msg(slots[i * g.T + j] == row[t], "%s, batch %d: head %zu slot %u",
                                  s.name[k], iter, i, j);
                    for (uint32_t c = 0; c < g.ncache; c++) {
                        kve_cache_view from = runs_view(&g, orig + c * bytes);
                        const kve_cache_view *to = g.out_of_place ? &d.dst[c] : &d.src[c];
                        size_t l = i / g.H, h = i % g.H, at = l * from.stride_layer + h * from.stride_head;
                        ck_assert_msg(!memcmp((char *)to->base + at + j * to->stride_slot,
                                              (char *)from.base + at + t * from.stride_slot, g.e),
                                      "%s, batch %d: head %zu entry %u of cache %u", s.name[k],
                                      iter, i, j, c);
                    }
                    j++;
                }
                for (; j < g.T; j++)
                    ck_assert_int_eq(slots[i * g.T + j], -1);
            }
        }
        free(rows);
        free(ev);
        free(slots);
        free(n_ev);
        free(orig);
        free(src_mem);
        free(dst_mem);
    }
    isa_set_close(&s);
}
END_TEST

/* ---- input checks -------------------------------------------------------- */

START_TEST(input_checks_exact)
{
    isa_set s;
    isa_set_open(&s);
    uint64_t rng = 808;
    for (int iter = 0; iter < 1500; iter++) {
        batch r;
        batch_make(&rng, &r, iter % 50 == 0);
        kve_batch *b = &r.b;
        size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
        /* Damage a few heads: a repeat (near or far), a value below -1, or a
         * far position that makes the table sparse. */
        for (int k = kt_below(&rng, 4); k > 0; k--) {
            int32_t *row = r.slots + kt_below(&rng, (uint32_t)heads) * b->slot_pos_stride;
            uint32_t n = b->n_slots, a = kt_below(&rng, n), c = kt_below(&rng, n);
            switch (kt_below(&rng, 5)) {
            case 0: row[a] = row[c]; break;
            case 1: row[a] = row[c] >= 0 ? row[c] : row[a]; break;
            case 2: row[a] = -2 - (int32_t)kt_below(&rng, 3); break;
            case 3: row[a] = 0x7FFFFFF0 - (int32_t)kt_below(&rng, 5); break;
            default: row[a] = (int32_t)kt_below(&rng, 2 * n + 2) - 1;
            }
        }
        char label[32];
        snprintf(label, sizeof label, "batch %d", iter);
        kve_check_contexts(s.ctx, s.name, s.n, b, label);
        free(r.slots);
    }
    isa_set_close(&s);
}
END_TEST

/* ---- ISA selection -------------------------------------------------------------- */

START_TEST(isa_selection)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    kve_cpu_isa best = KVE_CPU_ISA_SCALAR, got;
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        if (avail) {
            best = (kve_cpu_isa)isa;
            KT_OK(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa));
            KT_OK(kve_context_get_cpu_isa(ctx, &got));
            ck_assert_int_eq(got, isa);
            continue;
        }
        /* An ISA this CPU lacks: an error, never a silent fallback. */
        ck_assert_int_eq(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa), KVE_ERR_UNAVAILABLE);
        kve_context *other = NULL;
        setenv("KVE_CPU_ISA", kve_cpu_isa_name((kve_cpu_isa)isa), 1);
        ck_assert_int_eq(kve_context_create(KVE_BACKEND_CPU, &other), KVE_ERR_ENV);
        ck_assert_ptr_null(other);
        unsetenv("KVE_CPU_ISA");
    }
    /* AUTO resolves to the best this CPU runs; the context reports it. */
    KT_OK(kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_AUTO));
    KT_OK(kve_context_get_cpu_isa(ctx, &got));
    ck_assert_int_eq(got, best);
    ck_assert_int_eq(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)9), KVE_ERR_INVALID);
    kve_context_destroy(ctx);

    static const char *const names[] = {"scalar", "AVX2", "avx512"};
    for (int i = 0; i < 3; i++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)(KVE_CPU_ISA_SCALAR + i), &avail));
        if (!avail)
            continue;
        setenv("KVE_CPU_ISA", names[i], 1);
        KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
        KT_OK(kve_context_get_cpu_isa(ctx, &got));
        ck_assert_int_eq(got, KVE_CPU_ISA_SCALAR + i);
        kve_context_destroy(ctx);
    }
    setenv("KVE_CPU_ISA", "bogus", 1);
    ctx = NULL;
    ck_assert_int_eq(kve_context_create(KVE_BACKEND_CPU, &ctx), KVE_ERR_ENV);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(kve_last_error(), "bogus"));
    unsetenv("KVE_CPU_ISA");
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(isa, keys_match_libxxhash),
        KVE_TEST(isa, evict_random_batches),
        KVE_TEST(isa, evict_decode_rounds),
        KVE_TEST(isa, compact_matches_scalar),
        KVE_TEST(isa, compact_runs_exact),
        KVE_TEST(isa, input_checks_exact),
        KVE_TEST(isa, isa_selection),
    };
    const kve_suite_spec spec = {"cpu_isa", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

/* test_evict.c — kve_evict on the CPU: golden keep-sets, the spec's
 * properties on random batches, thread-count and sharding invariance,
 * persistent bottom-k, uniformity and independence across heads. */
#include <math.h>
#include <stdio.h>
#include <xxhash.h>

#include "golden_vectors.h"
#include "kve_suite.h"
#include "kve_test_util.h"

static kve_context *new_cpu(int threads)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    KT_OK(kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_SCALAR));
    if (threads)
        KT_OK(kve_context_set_threads(ctx, threads));
    return ctx;
}

START_TEST(golden_cases)
{
    kve_context *ctx = new_cpu(1);
    for (size_t i = 0; i < KVE_GOLDEN_N_CASES; i++) {
        const kve_golden_case *g = &kve_golden_cases[i];
        kve_seq seq = {g->seq_id, g->prompt, g->round};
        kve_batch b = {g->seed, g->flags, 1, &seq, 1, 1, g->layer, g->head, g->n_slots,
                       g->budget, g->window, g->slot_pos, g->n_slots, NULL, 0};
        kt_out o;
        KT_OK(kt_evict(ctx, &b, &o));
        ck_assert_msg(o.n_evicted[0] == g->n_evicted && o.n_kept[0] == g->n_kept,
                      "%s: evicted %u kept %u, expected %u %u", g->name, o.n_evicted[0],
                      o.n_kept[0], g->n_evicted, g->n_kept);
        ck_assert_msg(!g->n_evicted || !memcmp(o.evicted, g->evicted, g->n_evicted * 4), "%s",
                      g->name);
        ck_assert_msg(!g->n_kept || !memcmp(o.kept, g->kept, g->n_kept * 4), "%s", g->name);
        ck_assert_int_eq((o.flags[0] & KVE_HEAD_OVER_BUDGET) != 0, g->over_budget);
        kt_out_free(&o);
    }
    kve_context_destroy(ctx);
}
END_TEST

/* A random batch of 1-2 sequences x 1-3 layers x 1-4 heads. */
typedef struct {
    kve_seq seqs[2];
    kve_batch b;
    int32_t *slots;
} rand_batch;

static void rand_batch_make(uint64_t *rng, rand_batch *r)
{
    memset(r, 0, sizeof *r);
    kve_batch *b = &r->b;
    b->seed = kt_next(rng);
    b->flags = kt_below(rng, 8);
    b->n_seqs = 1 + kt_below(rng, 2);
    b->n_layers = 1 + kt_below(rng, 3);
    b->n_heads = 1 + kt_below(rng, 4);
    b->layer_offset = kt_below(rng, 100);
    b->head_offset = kt_below(rng, 100);
    b->n_slots = kt_below(rng, 90);
    b->budget = kt_below(rng, 70);
    b->window = kt_below(rng, 20);
    b->slot_pos_stride = b->n_slots + kt_below(rng, 3);
    for (uint32_t s = 0; s < b->n_seqs; s++)
        r->seqs[s] = (kve_seq){kt_next(rng), kt_below(rng, 40), kt_below(rng, 6)};
    b->seqs = r->seqs;
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    r->slots = (int32_t *)malloc((heads * b->slot_pos_stride + 1) * 4);
    for (size_t i = 0; i < heads; i++) {
        uint32_t valid = b->n_slots ? kt_below(rng, b->n_slots + 1) : 0;
        kt_random_table(rng, r->slots + i * b->slot_pos_stride, b->n_slots, valid,
                        valid + kt_below(rng, 3 * (valid + 1)));
    }
    b->slot_pos = r->slots;
}

START_TEST(spec_properties)
{
    kve_context *ctx = new_cpu(0);
    uint64_t rng = 42;
    for (int iter = 0; iter < 3000; iter++) {
        rand_batch r;
        rand_batch_make(&rng, &r);
        const kve_batch *b = &r.b;
        kt_out o;
        KT_OK(kt_evict(ctx, b, &o));
        for (size_t i = 0; i < o.heads; i++) {
            const int32_t *row = b->slot_pos + i * b->slot_pos_stride;
            uint32_t P = r.seqs[i / ((size_t)b->n_layers * b->n_heads)].prompt_len;
            uint32_t valid = 0, prefix = 0, gen = 0;
            for (uint32_t t = 0; t < b->n_slots; t++) {
                valid += row[t] >= 0;
                prefix += row[t] >= 0 && (uint32_t)row[t] < P;
            }
            gen = valid - prefix;
            uint32_t win = b->window < gen ? b->window : gen;
            uint32_t prot = prefix + win;
            uint32_t expect_kept = valid <= b->budget ? valid : (prot > b->budget ? prot : b->budget);
            ck_assert_uint_eq(o.n_kept[i], expect_kept);
            ck_assert_uint_eq(o.n_evicted[i] + o.n_kept[i], valid);
            ck_assert(kt_ascending(kt_ev(&o, i), o.n_evicted[i], b->n_slots));
            ck_assert(kt_ascending(kt_kept(&o, i), o.n_kept[i], b->n_slots));
            ck_assert_int_eq((o.flags[i] & KVE_HEAD_OVER_BUDGET) != 0,
                             valid > b->budget && prot > b->budget);
            /* The W largest generated positions: their lower bound. */
            int32_t win_lo = INT32_MAX;
            if (win) {
                int32_t *g = (int32_t *)malloc(gen * 4);
                uint32_t k = 0;
                for (uint32_t t = 0; t < b->n_slots; t++)
                    if (row[t] >= 0 && (uint32_t)row[t] >= P)
                        g[k++] = row[t];
                for (uint32_t a = 0; a < win; a++) /* partial selection sort, descending */
                    for (uint32_t c = a + 1; c < gen; c++)
                        if (g[c] > g[a]) {
                            int32_t tmp = g[a];
                            g[a] = g[c];
                            g[c] = tmp;
                        }
                win_lo = g[win - 1];
                free(g);
            }
            for (uint32_t e = 0; e < o.n_evicted[i]; e++) {
                int32_t p = row[kt_ev(&o, i)[e]];
                ck_assert_msg(p >= 0, "evicted an empty slot");
                ck_assert_msg((uint32_t)p >= P, "evicted prompt position %d (P=%u)", p, P);
                ck_assert_msg(!win || p < win_lo, "evicted window position %d", p);
            }
        }
        kt_out_free(&o);
        free(r.slots);
    }
    kve_context_destroy(ctx);
}
END_TEST

static int same_out(const kt_out *a, const kt_out *b)
{
    for (size_t i = 0; i < a->heads; i++) {
        if (a->n_evicted[i] != b->n_evicted[i] || a->n_kept[i] != b->n_kept[i] ||
            a->flags[i] != b->flags[i])
            return 0;
        if (memcmp(kt_ev(a, i), kt_ev(b, i), a->n_evicted[i] * 4) ||
            memcmp(kt_kept(a, i), kt_kept(b, i), a->n_kept[i] * 4))
            return 0;
    }
    return 1;
}

START_TEST(thread_count_invariance)
{
    kve_context *c1 = new_cpu(1), *c2 = new_cpu(2), *c3 = new_cpu(3);
    uint64_t rng = 7;
    for (int iter = 0; iter < 500; iter++) {
        rand_batch r;
        rand_batch_make(&rng, &r);
        kt_out o1, o2, o3;
        KT_OK(kt_evict(c1, &r.b, &o1));
        KT_OK(kt_evict(c2, &r.b, &o2));
        KT_OK(kt_evict(c3, &r.b, &o3));
        ck_assert(same_out(&o1, &o2));
        ck_assert(same_out(&o1, &o3));
        kt_out_free(&o1);
        kt_out_free(&o2);
        kt_out_free(&o3);
        free(r.slots);
    }
    kve_context_destroy(c1);
    kve_context_destroy(c2);
    kve_context_destroy(c3);
}
END_TEST

/* Tensor-parallel shards: two contexts, each with half the heads and its
 * head_offset, equal the unsharded call head for head; likewise for a
 * pipeline split over layers. */
START_TEST(shards_equal_unsharded)
{
    kve_context *full = new_cpu(2), *shard_a = new_cpu(1), *shard_b = new_cpu(1);
    uint64_t rng = 99;
    for (int iter = 0; iter < 300; iter++) {
        uint32_t L = 2 + kt_below(&rng, 2), H = 2 * (1 + kt_below(&rng, 3)), n = 10 + kt_below(&rng, 60);
        kve_seq seq = {kt_next(&rng), kt_below(&rng, 10), kt_below(&rng, 4)};
        int32_t *slots = (int32_t *)malloc((size_t)L * H * n * 4);
        for (uint32_t i = 0; i < L * H; i++)
            kt_random_table(&rng, slots + (size_t)i * n, n, n - kt_below(&rng, 4), 2 * n);
        kve_batch b = {kt_next(&rng), kt_below(&rng, 8), 1, &seq, L, H, 5, 16, n,
                       kt_below(&rng, n), kt_below(&rng, 8), slots, n, NULL, 0};
        kt_out of;
        KT_OK(kt_evict(full, &b, &of));
        /* Tensor parallel: heads [0, H/2) and [H/2, H), rows at a head stride of n
         * within each layer: give each shard its own copy of its rows. */
        for (int part = 0; part < 2; part++) {
            uint32_t h0 = part ? H / 2 : 0;
            int32_t *mine = (int32_t *)malloc((size_t)L * (H / 2) * n * 4);
            for (uint32_t l = 0; l < L; l++)
                memcpy(mine + (size_t)l * (H / 2) * n, slots + ((size_t)l * H + h0) * n,
                       (size_t)(H / 2) * n * 4);
            kve_batch sb = b;
            sb.n_heads = H / 2;
            sb.head_offset = b.head_offset + h0;
            sb.slot_pos = mine;
            kt_out os;
            KT_OK(kt_evict(part ? shard_b : shard_a, &sb, &os));
            for (uint32_t l = 0; l < L; l++)
                for (uint32_t h = 0; h < H / 2; h++) {
                    size_t fi = (size_t)l * H + h0 + h, si = (size_t)l * (H / 2) + h;
                    ck_assert_uint_eq(os.n_evicted[si], of.n_evicted[fi]);
                    ck_assert(!memcmp(kt_ev(&os, si), kt_ev(&of, fi), of.n_evicted[fi] * 4));
                }
            kt_out_free(&os);
            free(mine);
        }
        /* Pipeline parallel: the second half of the layers alone. */
        kve_batch pb = b;
        pb.n_layers = L / 2;
        pb.layer_offset = b.layer_offset + (L - L / 2);
        pb.slot_pos = slots + (size_t)(L - L / 2) * H * n;
        kt_out op;
        KT_OK(kt_evict(shard_a, &pb, &op));
        for (size_t i = 0; i < op.heads; i++) {
            size_t fi = (size_t)(L - L / 2) * H + i;
            ck_assert_uint_eq(op.n_evicted[i], of.n_evicted[fi]);
            ck_assert(!memcmp(kt_ev(&op, i), kt_ev(&of, fi), of.n_evicted[fi] * 4));
        }
        kt_out_free(&op);
        kt_out_free(&of);
        free(slots);
    }
    kve_context_destroy(full);
    kve_context_destroy(shard_a);
    kve_context_destroy(shard_b);
}
END_TEST

static int cmp_u64_pair(const void *a, const void *b)
{
    const uint64_t *x = (const uint64_t *)a, *y = (const uint64_t *)b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Persistent keys: after many rounds of the schedule, the kept candidates
 * are exactly the bottom-k keys of every position that ever left the
 * window, computed from scratch. */
START_TEST(persistent_bottom_k)
{
    kve_context *ctx = new_cpu(1);
    const uint32_t P = 8, W = 4, B = 24, R = 6, N = B + R; /* capacity max(B, P+W) + r */
    const uint32_t k = B - P - W;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        kve_seq seq = {seed * 77, P, 0};
        int32_t slots[30];
        uint32_t count = 0, next_pos = 0;
        for (; count < P; count++)
            slots[count] = (int32_t)next_pos++;
        for (uint32_t t = count; t < N; t++)
            slots[t] = -1;
        for (int step = 0; step < 600; step++) {
            if (count == N) {
                kve_batch b = {seed, KVE_PERSISTENT, 1, &seq, 1, 1, 3, 5, N, B, W, slots, N, NULL, 0};
                kt_out o;
                KT_OK(kt_evict(ctx, &b, &o));
                ck_assert_uint_eq(o.n_evicted[0], R);
                /* From scratch: every generated position below the window. */
                uint32_t win_lo = next_pos - W, hist = win_lo - P;
                uint64_t(*all)[2] = malloc(sizeof(uint64_t[2]) * hist);
                kve_coord c;
                for (uint32_t p = P; p < win_lo; p++) {
                    c = (kve_coord){seq.seq_id, 3, 5, p, 12345};
                    KT_OK(kve_keys(ctx, seed, KVE_PERSISTENT, &c, 1, &all[p - P][0]));
                    all[p - P][1] = p;
                }
                qsort(all, hist, sizeof all[0], cmp_u64_pair);
                /* Apply the eviction, then compare kept candidates. */
                for (uint32_t e = 0; e < o.n_evicted[0]; e++)
                    slots[kt_ev(&o, 0)[e]] = -1;
                uint32_t got = 0;
                for (uint32_t t = 0; t < N; t++)
                    if (slots[t] >= (int32_t)P && slots[t] < (int32_t)win_lo) {
                        int found = 0;
                        for (uint32_t j = 0; j < k && j < hist; j++)
                            found |= all[j][1] == (uint64_t)slots[t];
                        ck_assert_msg(found, "position %d kept but not in the bottom-k", slots[t]);
                        got++;
                    }
                ck_assert_uint_eq(got, hist < k ? hist : k);
                free(all);
                count = o.n_kept[0];
                kt_out_free(&o);
                seq.round++;
            }
            for (uint32_t t = 0; t < N; t++) /* next token: first free slot */
                if (slots[t] < 0) {
                    slots[t] = (int32_t)next_pos++;
                    break;
                }
            count++;
        }
        ck_assert_uint_gt(seq.round, 50);
    }
    kve_context_destroy(ctx);
}
END_TEST

/* Wilson-Hilferty: the chi-square quantile with df degrees at z. */
static double chi2_quantile(double df, double z)
{
    double a = 2.0 / (9.0 * df);
    double c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
}

START_TEST(uniform_inclusion)
{
    /* 64 candidates, keep 16, over 4000 seeds: inclusion counts per
     * position. For k-of-K uniform subsets, (K-1)/K * sum (o-e)^2/(N p (1-p))
     * is chi-square with K-1 degrees; require p > 0.001. */
    kve_context *ctx = new_cpu(0);
    enum { K = 64, KEEP = 16, P = 5, W = 3, TRIALS = 4000 };
    int32_t slots[P + K + W];
    for (int t = 0; t < P + K + W; t++)
        slots[t] = t;
    double counts[K] = {0};
    for (int s = 0; s < TRIALS; s++) {
        kve_seq seq = {(uint64_t)s, P, 0};
        kve_batch b = {0xabcdefULL, 0, 1, &seq, 1, 1, 0, 0, P + K + W, P + W + KEEP, W, slots, P + K + W, NULL, 0};
        kt_out o;
        KT_OK(kt_evict(ctx, &b, &o));
        ck_assert_uint_eq(o.n_kept[0], P + W + KEEP);
        for (uint32_t j = 0; j < o.n_kept[0]; j++) {
            int32_t pos = slots[kt_kept(&o, 0)[j]];
            if (pos >= P && pos < P + K)
                counts[pos - P] += 1;
        }
        kt_out_free(&o);
    }
    double p = (double)KEEP / K, e = TRIALS * p, x = 0;
    for (int i = 0; i < K; i++)
        x += (counts[i] - e) * (counts[i] - e);
    x = x / (TRIALS * p * (1 - p)) * (K - 1) / K;
    double crit = chi2_quantile(K - 1, 3.0902);
    ck_assert_msg(x < crit, "chi-square %.1f >= %.1f (p < 0.001)", x, crit);
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(heads_independent)
{
    /* Two heads of one layer keep 32 of 128 candidates each: the overlap is
     * hypergeometric, mean 8; shared heads overlap fully. */
    kve_context *ctx = new_cpu(0);
    enum { K = 128, KEEP = 32, TRIALS = 2000 };
    int32_t slots[2 * K];
    for (int t = 0; t < 2 * K; t++)
        slots[t] = t % K;
    double sum = 0, sum_sq = 0;
    for (int shared = 0; shared < 2; shared++) {
        for (int s = 0; s < TRIALS; s++) {
            kve_seq seq = {(uint64_t)s * 31 + 1, 0, (uint32_t)s};
            kve_batch b = {5, shared ? KVE_SHARED_HEADS : 0, 1, &seq, 1, 2, 0, 0, K, KEEP, 0, slots, K, NULL, 0};
            kt_out o;
            KT_OK(kt_evict(ctx, &b, &o));
            int overlap = 0;
            for (int a = 0; a < KEEP; a++)
                for (int c = 0; c < KEEP; c++)
                    overlap += kt_kept(&o, 0)[a] == kt_kept(&o, 1)[c];
            if (shared)
                ck_assert_int_eq(overlap, KEEP);
            sum += overlap;
            sum_sq += (double)overlap * overlap;
            kt_out_free(&o);
        }
        if (!shared) {
            double mean = sum / TRIALS, expect = (double)KEEP * KEEP / K;
            double var = KEEP * ((double)KEEP / K) * ((double)(K - KEEP) / K) * ((double)(K - KEEP) / (K - 1));
            double se = sqrt(var / TRIALS);
            ck_assert_msg(fabs(mean - expect) < 4 * se, "mean overlap %.3f, expected %.3f +- %.3f",
                          mean, expect, se);
            double sample_var = sum_sq / TRIALS - mean * mean;
            ck_assert_msg(sample_var > 0.7 * var && sample_var < 1.3 * var,
                          "overlap variance %.3f, expected %.3f", sample_var, var);
        }
    }
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(workspace_caller_memory)
{
    /* A queried workspace in caller memory gives the same result. */
    kve_context *ctx = new_cpu(2);
    uint64_t rng = 5;
    rand_batch r;
    rand_batch_make(&rng, &r);
    r.b.n_slots = 80;
    r.b.slot_pos_stride = 80;
    free(r.slots);
    size_t heads = (size_t)r.b.n_seqs * r.b.n_layers * r.b.n_heads;
    r.slots = (int32_t *)malloc(heads * 80 * 4);
    for (size_t i = 0; i < heads; i++)
        kt_random_table(&rng, r.slots + i * 80, 80, 70, 200);
    r.b.slot_pos = r.slots;
    size_t bytes = 0;
    KT_OK(kve_evict_workspace_size(ctx, &r.b, &bytes));
    ck_assert_uint_gt(bytes, 0);
    void *ws = malloc(bytes);
    kt_out a, b;
    KT_OK(kt_evict(ctx, &r.b, &a));
    kt_out_init(&b, &r.b);
    kve_evict_out v = kt_out_view(&b);
    KT_OK(kve_evict(ctx, &r.b, &v, ws, bytes));
    ck_assert(same_out(&a, &b));
    ck_assert_int_eq(kve_evict(ctx, &r.b, &v, ws, bytes - 1), KVE_ERR_WORKSPACE);
    free(ws);
    kt_out_free(&a);
    kt_out_free(&b);
    free(r.slots);
    kve_context_destroy(ctx);
}
END_TEST

/* SPEC §11 straight from the text, through libxxhash: a head's part of the
 * round digest is the wrapping sum over its evicted tokens of
 * XXH3(LE32 layer|head|pos|round, seq_seed(seed ^ tweak)), with the key's
 * shared-field switches and the real round. */
static uint64_t ref_round_digest(const kve_batch *b, size_t i, const int32_t *ev, uint32_t n)
{
    size_t per_seq = (size_t)b->n_layers * b->n_heads;
    const kve_seq *seq = &b->seqs[i / per_seq];
    unsigned char id[8], m[16];
    for (int k = 0; k < 8; k++)
        id[k] = (unsigned char)(seq->seq_id >> (8 * k));
    uint64_t seed = XXH3_64bits_withSeed(id, 8, b->seed ^ KVE_RUN_DIGEST_TWEAK);
    uint32_t f[4] = {(b->flags & KVE_SHARED_LAYERS) ? UINT32_MAX
                                                    : b->layer_offset + (uint32_t)(i / b->n_heads % b->n_layers),
                     (b->flags & KVE_SHARED_HEADS) ? UINT32_MAX : b->head_offset + (uint32_t)(i % b->n_heads),
                     0, seq->round};
    uint64_t sum = 0;
    for (uint32_t e = 0; e < n; e++) {
        f[2] = (uint32_t)b->slot_pos[i * b->slot_pos_stride + (size_t)ev[e]];
        for (int k = 0; k < 16; k++)
            m[k] = (unsigned char)(f[k / 4] >> (8 * (k % 4)));
        sum += XXH3_64bits_withSeed(m, 16, seed);
    }
    return sum;
}

START_TEST(round_digest_reference)
{
    kve_context *ctx = new_cpu(0);
    uint64_t rng = 1109;
    size_t nonzero = 0;
    for (int iter = 0; iter < 1500; iter++) {
        rand_batch r;
        rand_batch_make(&rng, &r);
        kt_out o;
        KT_OK(kt_evict(ctx, &r.b, &o));
        size_t per_seq = (size_t)r.b.n_layers * r.b.n_heads;
        uint64_t run[64] = {0};
        ck_assert_uint_le(r.b.n_seqs, 64);
        for (size_t i = 0; i < o.heads; i++) {
            uint64_t want = ref_round_digest(&r.b, i, kt_ev(&o, i), o.n_evicted[i]);
            ck_assert_msg(o.digest[i] == want, "batch %d head %zu (flags %u): 0x%016llx, spec 0x%016llx",
                          iter, i, r.b.flags, (unsigned long long)o.digest[i],
                          (unsigned long long)want);
            run[i / per_seq] += 3 * want; /* kt_out asks for weight 3 */
            nonzero += o.n_evicted[i] > 0;
        }
        for (uint32_t q = 0; q < r.b.n_seqs; q++)
            ck_assert_msg(o.run[q] == run[q], "batch %d seq %u: run_digest 0x%016llx, spec 0x%016llx",
                          iter, q, (unsigned long long)o.run[q], (unsigned long long)run[q]);
        kt_out_free(&o);
        free(r.slots);
    }
    ck_assert_uint_gt(nonzero, 1000); /* the batches did evict */
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(evict, golden_cases),
        KVE_TEST(evict, spec_properties),
        KVE_TEST(evict, thread_count_invariance),
        KVE_TEST(evict, shards_equal_unsharded),
        KVE_TEST(evict, persistent_bottom_k),
        KVE_TEST(evict, uniform_inclusion),
        KVE_TEST(evict, heads_independent),
        KVE_TEST(evict, workspace_caller_memory),
        KVE_TEST(evict, round_digest_reference),
    };
    const kve_suite_spec spec = {"evict", 300, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}

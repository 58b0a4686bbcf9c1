/*
 * fuzz_evict — kve_evict (and kve_digest of its result) on adversarial
 * batches, random or scored (the bytes after the outputs' choice turn
 * KVE_SCORED on, with scores on every float edge: NaN, +-0, +-inf,
 * subnormals): every KVE_OK is held against SPEC §3/§12 (fuzz_ref.h); the
 * call must agree with the header on which batches are valid, a content
 * error (a position below -1, a repeat without KVE_TRUSTED_SLOTS, a NaN
 * candidate) must give its status and name the first head at fault, and
 * every error must come with a message (the outputs after one are
 * unspecified).
 */
#include <xxhash.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"

#define MAX_SLOTS 300u

/* A value for a slot table: mostly plausible, often on an edge. */
static int32_t table_value(fz_bytes *b, uint32_t n)
{
    uint8_t sel = fz_u8(b);
    if (sel < 64)
        return -1;
    if (sel < 200)
        return (int32_t)fz_below(b, 2 * n + 2);
    static const int32_t edges[] = {INT32_MAX, INT32_MAX - 1, -2, INT32_MIN, 0, INT32_MIN + 1};
    if (sel < 240)
        return edges[sel % 6];
    return (int32_t)fz_u32(b);
}

static void fill_row(fz_bytes *b, int32_t *row, uint32_t n, const int32_t *prev)
{
    uint8_t mode = fz_u8(b) % 5;
    if (mode == 0 || (mode == 4 && !prev))
        for (uint32_t t = 0; t < n; t++)
            row[t] = table_value(b, n);
    else if (mode == 1) { /* an ascending run, wrapping as int32 from any start */
        uint32_t start = fz_u8(b) & 1 ? 0x7fffffffu - fz_below(b, 2 * n + 1) : fz_u32(b);
        for (uint32_t t = 0; t < n; t++)
            row[t] = (int32_t)(start + t);
    } else if (mode == 2) { /* a shuffled 0..n-1 with holes */
        for (uint32_t t = 0; t < n; t++)
            row[t] = (int32_t)t;
        for (uint32_t t = n; t > 1; t--) {
            uint32_t j = fz_below(b, t);
            int32_t x = row[t - 1];
            row[t - 1] = row[j];
            row[j] = x;
        }
        for (uint32_t k = fz_below(b, n + 1); k > 0; k--)
            row[fz_below(b, n)] = -1;
    } else if (mode == 3) { /* a spread table: positions i * step + base */
        uint32_t step = 1 + fz_below(b, 70000), base = fz_u32(b) & 0x7fffffffu;
        for (uint32_t t = 0; t < n; t++)
            row[t] = (int32_t)((base + (uint64_t)t * step) & 0x7fffffffu);
    } else
        memcpy(row, prev, n * sizeof *row);
    /* A few pointed edits: a repeat across a vector-block edge, a bad value. */
    for (uint8_t k = fz_u8(b) % 4; k > 0 && n > 1; k--) {
        static const uint32_t edges[] = {7, 8, 15, 16, 31, 32, 63, 64};
        uint32_t j = fz_u8(b) & 1 ? edges[fz_u8(b) % 8] % n : fz_below(b, n);
        uint32_t i = fz_below(b, n);
        row[j] = fz_u8(b) & 1 ? row[i] : table_value(b, n);
    }
}

static size_t rows_span(size_t rows, size_t stride, size_t len, int *overflow)
{
    size_t s;
    *overflow = 0;
    if (!rows || !len)
        return 0;
    if (__builtin_mul_overflow(rows - 1, stride, &s) || __builtin_add_overflow(s, len, &s) ||
        s > SIZE_MAX / 4) {
        *overflow = 1;
        return len;
    }
    return s;
}

/* A score: often an edge (NaN, +-0, +-inf, subnormal, few values for ties). */
static float score_value(fz_bytes *b)
{
    static const uint32_t edges[] = {0x7fc00000u, 0xffc00001u, 0x00000000u, 0x80000000u,
                                     0x7f800000u, 0xff800000u, 0x00000001u, 0x80000001u,
                                     0x3f800000u, 0xbf800000u, 0x7f7fffffu, 0xff7fffffu};
    uint8_t sel = fz_u8(b);
    uint32_t u = sel < 96 ? edges[sel % 12] : sel < 200 ? 0x3f800000u + (fz_u8(b) % 4 << 23)
                                                        : fz_u32(b);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void free_each(void *const *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i]);
}

static size_t pick_stride(fz_bytes *b, size_t min)
{
    uint8_t sel = fz_u8(b);
    if (sel < 230)
        return min + fz_below(b, 3);
    if (sel < 240)
        return min ? min - 1 : 0;
    if (sel < 250)
        return SIZE_MAX / 4 - fz_below(b, 4);
    return (size_t)fz_u64(b);
}

/* The spec's digest (§6) of the batch's keep-sets, evicted slots flagged in
 * ev (NULL: none). */
static uint64_t ref_digest(const kve_batch *bt, const int32_t *slots, const uint8_t *ev)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset_withSeed(st, 0);
    size_t i = 0;
    int32_t *kept = (int32_t *)malloc(((bt->n_seqs && bt->n_layers && bt->n_heads ? (size_t)bt->n_slots : 0) + 1) * sizeof *kept);
    for (uint32_t s = 0; s < bt->n_seqs; s++)
        for (uint32_t l = 0; l < bt->n_layers; l++)
            for (uint32_t h = 0; h < bt->n_heads; h++, i++) {
                const int32_t *row = bt->n_slots ? slots + i * bt->slot_pos_stride : slots;
                uint32_t count = 0;
                for (uint32_t t = 0; t < bt->n_slots; t++)
                    if (row[t] >= 0 && !(ev && ev[i * bt->n_slots + t]))
                        kept[count++] = row[t];
                qsort(kept, count, sizeof *kept, kve_test_cmp_i32);
                uint8_t hdr[20];
                uint64_t id = bt->seqs[s].seq_id;
                uint32_t f[3] = {bt->layer_offset + l, bt->head_offset + h, count};
                for (int k = 0; k < 8; k++)
                    hdr[k] = (uint8_t)(id >> (8 * k));
                for (int k = 0; k < 12; k++)
                    hdr[8 + k] = (uint8_t)(f[k / 4] >> (8 * (k % 4)));
                XXH3_64bits_update(st, hdr, 20);
                for (uint32_t k = 0; k < count; k++) {
                    uint8_t le[4];
                    for (int j = 0; j < 4; j++)
                        le[j] = (uint8_t)((uint32_t)kept[k] >> (8 * j));
                    XXH3_64bits_update(st, le, 4);
                }
            }
    free(kept);
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}

/* One input decoded: the batch, its outputs and the buffers behind them, and
 * what the header says kve_evict must answer. */
typedef struct {
    kve_batch bt;
    kve_evict_out out;
    kve_seq *seqs;
    int32_t *slots, *evicted, *kept;
    uint32_t *n_evicted, *n_kept;
    uint8_t *head_flags;
    float *scores;
    void *ws;
    size_t ws_bytes;
    size_t heads;     /* n_seqs * n_layers * n_heads */
    uint32_t n;       /* slots filled per row: n_slots, or 0 when no row can be */
    size_t fill_rows; /* rows filled: every head's, or the first when the span overflows */
    uint8_t opt;      /* the outputs' choice: kept, head_flags, a workspace, NULL outputs */
    int bad;          /* an argument error: the call must refuse */
    int bad_table;    /* the first table problem below the argument errors (ref_table_problem) */
    size_t bad_head;  /* its head */
    int trusted_dup;  /* a repeat under KVE_TRUSTED_SLOTS: the answer is unspecified (SPEC) */
    int nan_head;     /* a NaN at a candidate of a valid scored batch: refused */
    size_t nan_at;    /* its head */
    uint64_t *round_digest, *run_digest, *run_before; /* run_before: run_digest's first values */
} evict_case;

/* The batch's header. 0: a valid batch too large to afford (skip the input). */
static int decode_header(fz_bytes *in, evict_case *c)
{
    kve_batch *bt = &c->bt;
    bt->seed = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
    bt->flags = fz_u8(in) < 250 ? fz_u8(in) & 0xfu : fz_u32(in);
    bt->n_seqs = fz_below(in, 3);
    bt->n_layers = fz_below(in, 3);
    bt->n_heads = fz_below(in, 4);
    bt->layer_offset = fz_u8(in) < 240 ? fz_below(in, 64) : UINT32_MAX - fz_below(in, 3);
    bt->head_offset = fz_u8(in) < 240 ? fz_below(in, 64) : UINT32_MAX - fz_below(in, 3);
    bt->n_slots = fz_count(in, MAX_SLOTS + 1);
    bt->budget = fz_count(in, MAX_SLOTS + 1);
    bt->window = fz_count(in, 40);
    c->heads = (size_t)bt->n_seqs * bt->n_layers * bt->n_heads;
    int too_big = bt->n_slots > MAX_SLOTS && bt->n_slots <= 0x7fffffffu;
    if (too_big && c->heads) /* a valid table we cannot afford: skip */
        return 0;
    c->n = c->heads && bt->n_slots <= MAX_SLOTS ? bt->n_slots : 0;
    c->bad = (bt->flags & ~(uint32_t)(KVE_KEY_FLAGS | KVE_TRUSTED_SLOTS | KVE_SCORED)) ||
             (bt->n_layers && bt->layer_offset > UINT32_MAX - (bt->n_layers - 1)) ||
             (bt->n_heads && bt->head_offset > UINT32_MAX - (bt->n_heads - 1)) ||
             bt->n_slots > 0x7fffffffu || bt->budget > 0x7fffffffu || bt->window > 0x7fffffffu;
    return 1;
}

/* The sequences and the slot tables. 0: a span too large to afford. */
static int decode_slots(fz_bytes *in, evict_case *c)
{
    kve_batch *bt = &c->bt;
    c->seqs = (kve_seq *)fz_alloc(bt->n_seqs * sizeof *c->seqs, 0);
    for (uint32_t s = 0; s < bt->n_seqs; s++) {
        c->seqs[s].seq_id = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
        c->seqs[s].prompt_len = fz_count(in, 40);
        c->seqs[s].round = fz_u8(in) & 1 ? fz_u32(in) : fz_u8(in) % 4;
    }
    bt->seqs = c->seqs;
    int overflow;
    bt->slot_pos_stride = pick_stride(in, bt->n_slots);
    size_t span = rows_span(c->heads, bt->slot_pos_stride, c->n, &overflow);
    if (c->heads && bt->n_slots && bt->slot_pos_stride < bt->n_slots)
        c->bad = 1, span = c->n, overflow = 1; /* rows overlap: rejected before any read */
    c->bad |= overflow;
    if (span > (1u << 22))
        return 0;
    c->slots = (int32_t *)fz_alloc(span * 4, 0xff);
    c->fill_rows = !c->n ? 0 : overflow ? 1 : c->heads;
    for (size_t i = 0; i < c->fill_rows; i++)
        fill_row(in, c->slots + i * bt->slot_pos_stride, c->n,
                 i ? c->slots + (i - 1) * bt->slot_pos_stride : NULL);
    bt->slot_pos = fz_u8(in) == 255 ? NULL : c->slots;
    c->bad |= c->heads && bt->n_slots && !bt->slot_pos;
    return 1;
}

/* The first bad table (its head is named), kept apart from the argument
 * errors, which the call reports first. */
static void find_bad_table(evict_case *c)
{
    for (size_t i = 0; !c->bad && i < c->fill_rows; i++) {
        int p = ref_table_problem(c->slots + i * c->bt.slot_pos_stride, c->n);
        if (!c->bad_table && (p == 1 || (p == 2 && !(c->bt.flags & KVE_TRUSTED_SLOTS))))
            c->bad_table = p, c->bad_head = i;
        c->trusted_dup |= p == 2 && (c->bt.flags & KVE_TRUSTED_SLOTS);
    }
}

/* Outputs, each exactly as long as the header asks. 0: too large to afford. */
static int decode_outputs(fz_bytes *in, evict_case *c)
{
    const kve_batch *bt = &c->bt;
    kve_evict_out *out = &c->out;
    int overflow;
    size_t max_ev = bt->n_slots > bt->budget ? bt->n_slots - bt->budget : 0;
    out->evicted_stride = pick_stride(in, max_ev ? max_ev : 1);
    c->bad |= c->heads && out->evicted_stride < (max_ev ? max_ev : 1);
    size_t ev_span = rows_span(c->heads, out->evicted_stride, c->n ? max_ev : 0, &overflow);
    c->bad |= overflow && c->heads;
    uint8_t opt = c->opt = fz_u8(in);
    out->kept_stride = opt & 1 ? pick_stride(in, bt->n_slots) : 0;
    if ((opt & 1) && c->heads && out->kept_stride < bt->n_slots)
        c->bad = 1;
    size_t kept_span = opt & 1 ? rows_span(c->heads, out->kept_stride, c->n, &overflow) : 0;
    c->bad |= (opt & 1) && overflow && c->heads;
    if (ev_span > (1u << 22) || kept_span > (1u << 22))
        return 0;
    c->evicted = (int32_t *)fz_alloc(ev_span * 4, 0xa5);
    c->kept = (int32_t *)fz_alloc(kept_span * 4, 0xa5);
    c->n_evicted = (uint32_t *)fz_alloc(c->heads * 4, 0xa5);
    c->n_kept = (uint32_t *)fz_alloc(c->heads * 4, 0xa5);
    c->head_flags = (uint8_t *)fz_alloc(c->heads, 0xa5);
    out->evicted = opt == 0xfe ? NULL : c->evicted;
    out->n_evicted = c->n_evicted;
    out->n_kept = opt == 0xfc ? NULL : c->n_kept;
    out->head_flags = opt & 2 ? c->head_flags : NULL;
    out->kept = opt & 1 ? c->kept : NULL;
    c->bad |= c->heads && (!out->evicted || !out->n_kept);
    return 1;
}

/* Scored: read last, so the corpus of the random path decodes as before.
 * 0: a valid scores span too large to afford. */
static int decode_scores(fz_bytes *in, evict_case *c)
{
    kve_batch *bt = &c->bt;
    if (fz_u8(in) & 1)
        bt->flags |= KVE_SCORED;
    if (!(bt->flags & KVE_SCORED))
        return 1;
    int overflow;
    c->bad |= (bt->flags & KVE_PERSISTENT) != 0;
    bt->scores_stride = pick_stride(in, bt->n_slots);
    c->bad |= c->heads && bt->n_slots && bt->scores_stride < bt->n_slots;
    size_t sc_span = rows_span(c->heads, bt->scores_stride, c->n, &overflow);
    c->bad |= c->heads && bt->n_slots && overflow;
    if (sc_span > (1u << 22) && !overflow)
        return 0;
    int clamped = 0;
    if (overflow && c->n) {
        sc_span = c->n;
        c->bad = 1;
        clamped = 1; /* a span past the address space: refused before any read */
    }
    c->scores = (float *)fz_alloc(sc_span * 4 + 4, 0x7f); /* 0x7f7f7f7f: a number */
    for (size_t i = 0; c->n && !overflow && !clamped && c->scores && i < c->heads; i++)
        for (uint32_t t = 0; t < c->n; t++)
            c->scores[i * bt->scores_stride + t] = score_value(in);
    bt->scores = fz_u8(in) == 255 ? NULL : c->scores;
    c->bad |= c->heads && bt->n_slots && !bt->scores;
    return 1;
}

/* A workspace of the size kve_evict_workspace_size gives, when the outputs'
 * choice asks for one and the batch is valid. */
static void make_workspace(kve_context *ctx, evict_case *c)
{
    if (!(c->opt & 4) || c->bad)
        return;
    if (kve_evict_workspace_size(ctx, &c->bt, &c->ws_bytes) != KVE_OK)
        FZ_FAIL("workspace size of a valid batch");
    c->ws = fz_alloc(c->ws_bytes, 0);
    if (!c->ws) /* a batch of no head may still ask for n_slots-sized scratch */
        c->ws_bytes = 0;
}

/* The first head with a NaN candidate score. Heads are checked in order,
 * slot_pos before scores: a NaN below the first bad table is the error. */
static void find_nan_head(evict_case *c)
{
    const kve_batch *bt = &c->bt;
    for (size_t i = 0; (bt->flags & KVE_SCORED) && !c->bad && !c->trusted_dup && !c->nan_head &&
                       i < c->heads && (!c->bad_table || i < c->bad_head); i++) {
        const kve_seq *q = &c->seqs[i / ((size_t)bt->n_layers * bt->n_heads)];
        ref_head rh = {0, 0, 0, 0, 0, 0, q->prompt_len, bt->window, bt->budget,
                       c->n ? c->scores + i * bt->scores_stride : c->scores};
        uint8_t *tmp = (uint8_t *)fz_alloc(c->n + 1, 0);
        uint32_t ne, nk;
        c->nan_head |= ref_evict_head(&rh, c->n ? c->slots + i * bt->slot_pos_stride : c->slots,
                                      c->n, tmp, &ne, &nk) < 0;
        c->nan_at = i;
        free(tmp);
    }
}

/* The status agrees with the header; an error names the head at fault. */
static void check_status(const evict_case *c, kve_status st)
{
    char want[64];
    if (c->nan_head) {
        snprintf(want, sizeof want, "batch.scores[head %zu][slot ", c->nan_at);
        FZ_CHECK(st == KVE_ERR_INVALID && strstr(kve_last_error(), "is NaN") &&
                     !strncmp(kve_last_error(), want, strlen(want)),
                 "a NaN candidate score of head %zu gave %s: %s", c->nan_at, kve_status_string(st),
                 kve_last_error());
    }
    if (!c->bad && c->bad_table && !c->nan_head && !c->trusted_dup) {
        snprintf(want, sizeof want, "batch.slot_pos[head %zu][slot ", c->bad_head);
        FZ_CHECK(st == (c->bad_table == 1 ? KVE_ERR_RANGE : KVE_ERR_DUPLICATE) &&
                     !strncmp(kve_last_error(), want, strlen(want)),
                 "table problem %d at head %zu gave %s: %s", c->bad_table, c->bad_head,
                 kve_status_string(st), kve_last_error());
    }
    if (c->bad || c->nan_head || c->bad_table) {
        FZ_CHECK(st != KVE_OK, "an invalid batch was accepted (n_slots %u, budget %u, table "
                 "problem %d: 1 = value < -1, 2 = repeat)", c->bt.n_slots, c->bt.budget, c->bad_table);
    } else if (!c->trusted_dup) {
        FZ_CHECK(st == KVE_OK, "a valid batch was rejected: %s", kve_status_string(st));
    }
    /* kve_evict's outputs after an error are unspecified (the contents are
     * checked head by head as it evicts): status and message only. */
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
}

/* Head i's outputs against the spec; ev + i * n gets its evicted slots. */
static void check_head(const evict_case *c, size_t i, uint32_t s, uint32_t l, uint32_t h,
                       uint8_t *ev)
{
    const kve_batch *bt = &c->bt;
    uint32_t n = c->n;
    ref_head rh = {bt->seed, c->seqs[s].seq_id, bt->flags & KVE_KEY_FLAGS,
                   bt->layer_offset + l, bt->head_offset + h, c->seqs[s].round,
                   c->seqs[s].prompt_len, bt->window, bt->budget,
                   !(bt->flags & KVE_SCORED) ? NULL
                   : n ? c->scores + i * bt->scores_stride : c->scores};
    const int32_t *row = n ? c->slots + i * bt->slot_pos_stride : c->slots;
    uint32_t ne, nk;
    int over = ref_evict_head(&rh, row, n, ev + i * n, &ne, &nk);
    FZ_CHECK(c->n_evicted[i] == ne, "head %zu: n_evicted %u, spec %u", i, c->n_evicted[i], ne);
    FZ_CHECK(c->n_kept[i] == nk, "head %zu: n_kept %u, spec %u", i, c->n_kept[i], nk);
    if (c->out.head_flags)
        FZ_CHECK(c->head_flags[i] == (over ? KVE_HEAD_OVER_BUDGET : 0),
                 "head %zu: flags %u, spec over-budget %d", i, c->head_flags[i], over);
    uint32_t e = 0, k = 0;
    for (uint32_t t = 0; t < n; t++) {
        if (ev[i * n + t])
            FZ_CHECK(c->evicted[i * c->out.evicted_stride + e++] == (int32_t)t,
                     "head %zu: evicted[%u] is not slot %u", i, e - 1, t);
        else if (row[t] >= 0 && c->out.kept)
            FZ_CHECK(c->kept[i * c->out.kept_stride + k++] == (int32_t)t,
                     "head %zu: kept[%u] is not slot %u", i, k - 1, t);
    }
}

/* The digests' outputs (SPEC §11), read last so that the corpus decodes
 * as before: round_digest [heads] and run_digest [n_seqs] (it starts from
 * arbitrary values, which the call adds to) with a weight, each exactly
 * sized; rarely run_digest over round_digest's bytes, which must be refused. */
static void decode_digests(fz_bytes *in, evict_case *c)
{
    kve_evict_out *out = &c->out;
    uint8_t sel = fz_u8(in);
    size_t seqs = c->bt.n_seqs;
    if (sel & 1)
        out->round_digest = c->round_digest = (uint64_t *)fz_alloc(c->heads * 8, 0xc3);
    if (sel & 2) {
        c->run_digest = (uint64_t *)fz_alloc(seqs * 8, 0);
        c->run_before = (uint64_t *)fz_alloc(seqs * 8, 0);
        for (size_t s = 0; c->run_digest && s < seqs; s++)
            c->run_digest[s] = c->run_before[s] = fz_u8(in) & 1 ? fz_u64(in) : 0;
        out->run_digest = c->run_digest;
        out->run_digest_weight = sel & 4 ? fz_u64(in) : sel & 8 ? fz_below(in, 9) : 0;
    }
    if ((sel >> 4) == 15 && out->round_digest && out->run_digest && seqs && c->heads) {
        out->run_digest = out->round_digest; /* overlapping outputs */
        c->bad = 1;
    }
}

/* round_digest and run_digest of an accepted call against SPEC §11 from
 * the evictions the reference found (@p ev [heads][n]). */
static void check_digests(const evict_case *c, const uint8_t *ev)
{
    const kve_batch *bt = &c->bt;
    const uint32_t fl = bt->flags & (KVE_SHARED_HEADS | KVE_SHARED_LAYERS);
    uint64_t w = c->out.run_digest_weight ? c->out.run_digest_weight : 1;
    size_t i = 0;
    for (uint32_t s = 0; s < bt->n_seqs; s++) {
        uint64_t sum = 0;
        for (uint32_t l = 0; l < bt->n_layers; l++)
            for (uint32_t h = 0; h < bt->n_heads; h++, i++) {
                const int32_t *row = c->n ? c->slots + i * bt->slot_pos_stride : c->slots;
                uint64_t d = 0;
                for (uint32_t t = 0; t < c->n; t++)
                    if (ev[i * c->n + t])
                        d += ref_key(bt->seed ^ 0x6b76652d72756e31ull, fl, c->seqs[s].seq_id,
                                     bt->layer_offset + l, bt->head_offset + h, (uint32_t)row[t],
                                     c->seqs[s].round);
                if (c->out.round_digest)
                    FZ_CHECK(c->round_digest[i] == d, "head %zu: round_digest %llx, SPEC %llx", i,
                             (unsigned long long)c->round_digest[i], (unsigned long long)d);
                sum += d;
            }
        if (c->out.run_digest)
            FZ_CHECK(c->run_digest[s] == c->run_before[s] + w * sum,
                     "seq %u: run_digest %llx, SPEC %llx", s, (unsigned long long)c->run_digest[s],
                     (unsigned long long)(c->run_before[s] + w * sum));
    }
}

/* A KVE_OK: every head against the spec, then the digest of what was kept
 * and of the whole tables. */
static void check_result(kve_context *ctx, const evict_case *c)
{
    const kve_batch *bt = &c->bt;
    uint8_t *ev = (uint8_t *)fz_alloc(c->heads * c->n + 1, 0);
    size_t i = 0;
    for (uint32_t s = 0; s < bt->n_seqs; s++)
        for (uint32_t l = 0; l < bt->n_layers; l++)
            for (uint32_t h = 0; h < bt->n_heads; h++, i++)
                check_head(c, i, s, l, h, ev);
    check_digests(c, ev);
    uint64_t d;
    FZ_CHECK(kve_digest(ctx, bt, &c->out, &d) == KVE_OK, "digest after evict");
    FZ_CHECK(d == ref_digest(bt, c->slots, ev), "digest of the keep-sets");
    FZ_CHECK(kve_digest(ctx, bt, NULL, &d) == KVE_OK, "digest of the tables");
    FZ_CHECK(d == ref_digest(bt, c->slots, NULL), "digest of the tables");
    free(ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    evict_case c = {0};
    /* The decoders read the input in this order (the corpus depends on it);
     * any of them may skip an input too large to afford. */
    if (decode_header(&in, &c) && decode_slots(&in, &c)) {
        find_bad_table(&c); /* before the outputs: only the slots' argument errors hide it */
        if (decode_outputs(&in, &c) && decode_scores(&in, &c)) {
            decode_digests(&in, &c);
            make_workspace(ctx, &c);
            find_nan_head(&c);
            kve_status st = kve_evict(ctx, &c.bt, &c.out, c.ws, c.ws_bytes);
            check_status(&c, st);
            if (st == KVE_OK && !c.trusted_dup)
                check_result(ctx, &c);
        }
    }
    void *bufs[] = {c.ws,         c.seqs,      c.slots,        c.evicted,    c.kept,
                    c.n_evicted,  c.n_kept,    c.head_flags,   c.scores,     c.round_digest,
                    c.run_digest, c.run_before};
    free_each(bufs, sizeof bufs / sizeof *bufs);
    return 0;
}

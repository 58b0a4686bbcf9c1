/*
 * demo_run.c — one arm of `kvevict demo` through the engine path: a cache
 * state (kve_state_admit, kve_state_append), the prompt appended in chunks
 * and then one token per step, and per layer one kve_cache_write that runs
 * the round's moves and writes the new K and V rows at each head's slot, as
 * an attention layer does (docs/INTEGRATION.md "Step by step"). Every arm
 * writes the same tokens; only the schedule (budget, pinned prompt) and the
 * selector (random keys or scores) differ.
 *
 * The cache: one page per row, NHD, [slot][layer][head][entry], so the
 * attention kernel's view of a head is its slots 0 .. n_valid - 1. A K entry
 * is head_dim = entry/2 bf16 values, a fixed vector of the head plus noise,
 * rotated by RoPE at the token's position (so that scorers read keys shaped
 * like a model's); a V entry is noise. Both are a pure function of (seed,
 * head, position), so the end checks every valid slot's bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "demo.h"
#include "demo_scored.h"

#define KVE_DEMO_CHUNK 64u /* prompt tokens per append (chunked prefill) */

static double kve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t kve_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint16_t kve_bf16(float x) /* round to nearest even; inputs are finite */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* RoPE's cos and sin for every position of the run: [positions][dim/2][2]. */
static float *kve_demo_rope(const kve_demo_opts *o)
{
    uint32_t half = (uint32_t)(o->entry / 4), n = o->prompt + o->steps;
    float *cs = (float *)kve_cli_malloc("the RoPE table", (size_t)n * half, 2 * sizeof(float));
    for (uint32_t p = 0; cs && p < n; p++)
        for (uint32_t i = 0; i < half; i++) {
            double ang = p * pow(10000.0, -(double)i / half);
            cs[((size_t)p * half + i) * 2] = (float)cos(ang);
            cs[((size_t)p * half + i) * 2 + 1] = (float)sin(ang);
        }
    return cs;
}

/* Each head's fixed key vector, components in [-1, 1): [heads][dim]. */
float *kve_demo_head_vectors(const kve_demo_opts *o)
{
    size_t heads = (size_t)o->layers * o->heads, dim = o->entry / 2;
    float *v = (float *)kve_cli_malloc("the heads' key vectors", heads * dim, sizeof(float));
    for (size_t h = 0; v && h < heads; h++) {
        uint64_t s = o->seed * 0x2545F4914F6CDD1DULL ^ (h << 1);
        for (size_t i = 0; i < dim; i += 4) {
            uint64_t r = kve_mix(&s);
            for (size_t j = 0; j < 4 && i + j < dim; j++)
                v[h * dim + i + j] = (float)(int16_t)(r >> (16 * j)) / 32768.0f;
        }
    }
    return v;
}

/* Head h's K and V entries for the token at @p pos: K the head's vector
 * plus noise in [-0.25, 0.25), rotated by RoPE (rotate-half pairs (i, i +
 * dim/2)) and rounded to bf16; V noise bytes. */
static void kve_demo_entry(const kve_demo_opts *o, const float *rope, const float *vec, size_t h,
                           uint32_t pos, unsigned char *k, unsigned char *v)
{
    uint32_t half = (uint32_t)(o->entry / 4);
    const float *cs = rope + (size_t)pos * half * 2, *a = vec + h * 2 * half, *b = a + half;
    uint64_t noise = o->seed * 0x2545F4914F6CDD1DULL ^ (h << 1) ^ ((uint64_t)pos << 32), z = 0;
    for (uint32_t i = 0; i < half; i++) {
        if (i % 2 == 0)
            z = kve_mix(&noise);
        float x = a[i] + (float)(int16_t)z / 131072.0f, y = b[i] + (float)(int16_t)(z >> 16) / 131072.0f;
        z >>= 32;
        float c = cs[2 * i], s = cs[2 * i + 1];
        uint16_t lo = kve_bf16(x * c - y * s), hi = kve_bf16(x * s + y * c);
        memcpy(k + 2 * i, &lo, 2); /* memcpy: entries need not be 2-aligned */
        memcpy(k + 2 * (half + i), &hi, 2);
    }
    uint64_t vs = noise ^ 0x56ULL << 56;
    size_t i = 0;
    for (; i + 8 <= o->entry; i += 8) {
        uint64_t r = kve_mix(&vs);
        memcpy(v + i, &r, 8);
    }
    if (i < o->entry) { /* entry % 4 == 0: one half word left */
        uint32_t r = (uint32_t)kve_mix(&vs);
        memcpy(v + i, &r, 4);
    }
}

uint32_t kve_demo_bin_lo(uint32_t n, uint32_t b)
{
    return (uint32_t)((uint64_t)n * b / KVE_DEMO_BINS);
}

static uint32_t kve_demo_bin(uint32_t n, uint32_t pos)
{
    uint32_t b = (uint32_t)((uint64_t)pos * KVE_DEMO_BINS / n);
    while (b + 1 < KVE_DEMO_BINS && kve_demo_bin_lo(n, b + 1) <= pos)
        b++;
    while (b > 0 && kve_demo_bin_lo(n, b) > pos)
        b--;
    return b;
}

/* Everything one arm allocates; released by kve_demo_bufs_free. */
typedef struct {
    kve_context *ctx;
    kve_state *state;
    kve_state_layout lay;
    unsigned char *host; /* [2][CHUNK][heads][entry]: the call's K then V rows */
    void *src[2], *cache[2];
    int64_t *mapping;
    int32_t *moves, *token_row;
    uint32_t *n_moves;
    int32_t *tables, *expanded; /* host copies: the row's tables; per head, for the digest */
    kve_demo_scorer scorer;     /* scored arms */
    int scored;
    float *rope, *vec;          /* kve_demo_rope, kve_demo_head_vectors */
    kve_step_buffers step;
    size_t row_bytes, chunk;
} kve_demo_bufs;

static void kve_demo_bufs_free(kve_demo_bufs *b)
{
    kve_context *c = b->ctx;
    kve_state_destroy(b->state);
    void *dev[] = {b->src[0], b->src[1], b->cache[0], b->cache[1], b->mapping, b->moves,
                   b->token_row, b->n_moves};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        kve_free(c, dev[i]);
    if (b->scored)
        kve_demo_scorer_free(&b->scorer);
    free(b->host);
    free(b->tables);
    free(b->expanded);
    free(b->rope);
    free(b->vec);
}

static kve_status kve_demo_alloc(kve_demo_bufs *b, size_t bytes, void **out)
{
    void *p = NULL;
    kve_status st = kve_alloc(b->ctx, bytes ? bytes : 1, &p);
    *out = p;
    return st;
}

static void kve_demo_arm_config(const kve_demo_opts *o, kve_arm_kind kind, kve_demo_arm *arm)
{
    static const char *const names[KVE_N_ARMS] = {"full", "triattention", "knorm", "random",
                                                  "random-p0"};
    arm->kind = kind;
    arm->name = names[kind];
    arm->prompt_len = kind == KVE_ARM_RANDOM_P0 ? 0 : o->prompt;
    arm->budget = kind == KVE_ARM_FULL ? o->prompt + o->steps : o->budget;
    arm->flags = o->flags | (kind == KVE_ARM_TRI || kind == KVE_ARM_KNORM ? KVE_SCORED : 0);
}

/* The state and buffers of one arm; host buffers first, so that a size
 * beyond memory says which buffer and how many bytes. */
static kve_status kve_demo_setup(const kve_demo_opts *o, kve_demo_arm *arm, kve_demo_bufs *b)
{
    size_t heads = (size_t)o->layers * o->heads;
    b->row_bytes = heads * o->entry;
    b->chunk = o->prompt < KVE_DEMO_CHUNK ? (o->prompt ? o->prompt : 1) : KVE_DEMO_CHUNK;
    b->host = (unsigned char *)kve_cli_malloc("the step's K and V rows", 2 * b->chunk + 2, b->row_bytes);
    if (!b->host || !(b->rope = kve_demo_rope(o)) || !(b->vec = kve_demo_head_vectors(o)))
        return KVE_ERR_NOMEM;
    kve_schedule sc = {o->seed, arm->flags, arm->budget, o->window, o->interval};
    kve_status st = kve_schedule_capacity(&sc, arm->prompt_len, &arm->capacity);
    if (st != KVE_OK)
        return st;
    kve_state_desc d = {sc, 1, o->layers, o->heads, 0, 0, arm->capacity, 0, 0, 0};
    if ((st = kve_state_create(b->ctx, &d, NULL, 0, &b->state)) != KVE_OK ||
        (st = kve_state_get_layout(b->state, &b->lay)) != KVE_OK)
        return st;
    size_t tables = (size_t)b->lay.table_layers * b->lay.table_heads;
    uint32_t max_moves = 0;
    if ((st = kve_state_max_moves(b->state, 1, &max_moves)) != KVE_OK)
        return st;
    b->tables = (int32_t *)kve_cli_malloc("the row's slot tables", b->lay.row_elems, 4);
    b->expanded = b->tables ? (int32_t *)kve_cli_malloc("per-head slot tables", heads * arm->capacity, 4)
                            : NULL;
    if (!b->expanded)
        return KVE_ERR_NOMEM;
    size_t cache_bytes = b->row_bytes * arm->capacity;
    for (int c = 0; c < 2 && st == KVE_OK; c++) {
        st = kve_demo_alloc(b, b->chunk * b->row_bytes, &b->src[c]);
        if (st == KVE_OK)
            st = kve_demo_alloc(b, cache_bytes, &b->cache[c]);
    }
    if (st == KVE_OK)
        st = kve_demo_alloc(b, tables * b->chunk * 8, (void **)&b->mapping);
    if (st == KVE_OK)
        st = kve_demo_alloc(b, tables * max_moves * 8, (void **)&b->moves);
    if (st == KVE_OK)
        st = kve_demo_alloc(b, tables * 4, (void **)&b->n_moves);
    if (st == KVE_OK)
        st = kve_demo_alloc(b, b->chunk * 4, (void **)&b->token_row);
    if (st == KVE_OK && (arm->flags & KVE_SCORED)) {
        b->scored = 1;
        st = kve_demo_scorer_init(&b->scorer, b->ctx, o, arm->kind, b->cache[0], arm->capacity,
                                  tables);
    }
    if (st == KVE_OK) { /* every token goes to page-table row 0 */
        memset(b->host, 0, b->chunk * 4);
        st = kve_copy(b->ctx, b->token_row, b->host, b->chunk * 4, KVE_COPY_HOST_TO_BACKEND);
    }
    b->step = (kve_step_buffers){b->mapping, (uint32_t)b->chunk, b->moves, b->n_moves, 1, max_moves,
                                 NULL, 0, 0};
    if (st == KVE_OK)
        st = kve_state_admit(b->state, 0, o->seed ^ 0x5eedULL, arm->prompt_len);
    return st;
}

/* Layer l's kve_cache_write of the call's n tokens: its slice of the
 * mapping and of the move lists, into its heads of the shared pages. */
static kve_status kve_demo_write(const kve_demo_opts *o, const kve_demo_arm *arm,
                                 kve_demo_bufs *b, uint32_t l, uint32_t n)
{
    uint32_t th = b->lay.table_heads, tl = b->lay.table_layers > 1 ? l : 0;
    size_t lay_off = (size_t)l * o->heads * o->entry;
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    d.n_tokens = n;
    d.n_heads = o->heads;
    d.entry_bytes = o->entry;
    d.n_caches = 2;
    for (int c = 0; c < 2; c++) {
        d.src[c] = (const char *)b->src[c] + lay_off;
        d.dst[c] = (char *)b->cache[c] + lay_off;
    }
    d.src_stride_token = b->row_bytes;
    d.src_stride_head = o->entry;
    d.layout = KVE_LAYOUT_NHD;
    d.dst_stride_page = b->row_bytes * arm->capacity;
    d.dst_stride_slot = b->row_bytes;
    d.dst_stride_head = o->entry;
    d.pages.page_size = arm->capacity;
    d.pages.n_pages = 1;
    d.slots = b->mapping + (size_t)tl * b->step.max_tokens * th;
    d.slots_stride_token = th;
    d.slots_stride_head = th > 1;
    d.token_row = b->token_row;
    d.pages.n_rows = 1;
    d.pages.kind = KVE_PAGES_NONE;
    d.moves = b->moves + (size_t)tl * th * b->step.max_moves * 2;
    d.n_moves = b->n_moves + (size_t)tl * th;
    d.n_move_rows = 1;
    d.max_moves = b->step.max_moves;
    d.moves_stride_row = th;
    d.moves_stride_head = th > 1;
    return kve_cache_write(b->ctx, &d);
}

/* Table i of the row, as read by kve_state_read_slots. */
static const int32_t *kve_demo_table(const kve_demo_bufs *b, size_t i)
{
    return b->tables + i * b->lay.max_slots;
}

static kve_status kve_demo_snapshot(const kve_demo_opts *o, kve_demo_arm *arm, kve_demo_bufs *b,
                                    uint32_t snap, const kve_state_seq_info *info)
{
    kve_status st = kve_state_read_slots(b->state, 0, b->tables, b->lay.row_elems);
    uint32_t n = o->prompt + o->steps;
    arm->snap_tokens[snap] = info->n_tokens;
    arm->snap_round[snap] = info->round;
    for (uint32_t h = 0; st == KVE_OK && h < o->map_heads; h++) {
        uint32_t *row = arm->map_kept + ((size_t)snap * o->map_heads + h) * KVE_DEMO_BINS;
        const int32_t *t = kve_demo_table(b, h);
        for (uint32_t s = 0; s < info->n_valid; s++)
            row[kve_demo_bin(n, (uint32_t)t[s])]++;
    }
    return st;
}

/* Appends @p n tokens from position @p pos (their K/V made and copied to
 * the backend), runs the due round's scoring first in a scored arm, then
 * the layers' cache writes; times the round when one ran. */
static kve_status kve_demo_call(const kve_demo_opts *o, kve_demo_arm *arm, kve_demo_bufs *b,
                                uint32_t pos, uint32_t n, kve_state_seq_info *info)
{
    for (uint32_t t = 0; t < n; t++)
        for (size_t h = 0; h < (size_t)o->layers * o->heads; h++)
            kve_demo_entry(o, b->rope, b->vec, h, pos + t, b->host + t * b->row_bytes + h * o->entry,
                           b->host + (b->chunk + t) * b->row_bytes + h * o->entry);
    kve_status st = KVE_OK;
    for (int c = 0; c < 2 && st == KVE_OK; c++)
        st = kve_copy(b->ctx, b->src[c], b->host + c * b->chunk * b->row_bytes, n * b->row_bytes,
                      KVE_COPY_HOST_TO_BACKEND);
    uint32_t row = 0, before = info->round;
    double t0 = kve_now();
    if (st == KVE_OK && b->scored)
        st = kve_demo_score_due(&b->scorer, b->state, o, &b->step, n);
    if (st == KVE_OK)
        st = kve_state_append(b->state, 1, &row, &n, &b->step);
    if (st == KVE_OK)
        st = kve_context_synchronize(b->ctx);
    double t1 = kve_now();
    if (st == KVE_OK)
        st = kve_state_get_seq(b->state, 0, info);
    if (st == KVE_OK && info->round > before) {
        arm->choose_s += t1 - t0;
        arm->round_ms[arm->rounds++] = 1e3 * (t1 - t0);
    }
    for (uint32_t l = 0; l < o->layers && st == KVE_OK; l++)
        st = kve_demo_write(o, arm, b, l, n);
    if (st == KVE_OK)
        st = kve_context_synchronize(b->ctx);
    arm->write_s += kve_now() - t1;
    return st;
}

static void kve_demo_progress(const kve_demo_opts *o, const kve_demo_arm *arm, int idx, int n_arms,
                              uint32_t done)
{
    uint32_t total = o->prompt + o->steps;
    int filled = (int)(30.0 * done / (total ? total : 1));
    printf("\r  arm %d/%d %-13s [%.*s%*s] %u/%u tokens, %u rounds ", idx + 1, n_arms, arm->name,
           filled, "##############################", 30 - filled, "", done, total, arm->rounds);
    fflush(stdout);
}

/* The final tables: survival per bin over every head, the keep-set digest
 * (per-head tables, docs/SPEC.md "Digest"), the running digest. */
static kve_status kve_demo_finish(const kve_demo_opts *o, kve_demo_arm *arm, kve_demo_bufs *b,
                                  const kve_state_seq_info *info)
{
    kve_status st = kve_state_read_slots(b->state, 0, b->tables, b->lay.row_elems);
    uint32_t n = o->prompt + o->steps;
    size_t heads = (size_t)o->layers * o->heads;
    for (size_t h = 0; st == KVE_OK && h < heads; h++) {
        size_t l = h / o->heads, hh = h % o->heads;
        size_t ti = (b->lay.table_layers > 1 ? l : 0) * b->lay.table_heads +
                    (b->lay.table_heads > 1 ? hh : 0);
        const int32_t *t = kve_demo_table(b, ti);
        memcpy(b->expanded + h * arm->capacity, t, (size_t)arm->capacity * 4);
        for (uint32_t s = 0; s < info->n_valid; s++)
            arm->surv_kept[kve_demo_bin(n, (uint32_t)t[s])]++;
    }
    kve_seq seq = {o->seed ^ 0x5eedULL, arm->prompt_len, info->round};
    kve_batch hb = {o->seed, 0, 1, &seq, o->layers, o->heads, 0, 0, arm->capacity,
                    arm->budget, o->window, b->expanded, arm->capacity, NULL, 0};
    kve_context *host = NULL;
    if (st == KVE_OK)
        st = kve_context_create(KVE_BACKEND_CPU, &host);
    if (st == KVE_OK)
        st = kve_digest(host, &hb, NULL, &arm->digest);
    kve_context_destroy(host);
    if (st == KVE_OK)
        st = kve_state_read_digest(b->state, 0, &arm->run_digest);
    return st;
}

/* Every valid slot of every head must hold its position's K and V bytes. */
static kve_status kve_demo_verify(const kve_demo_opts *o, kve_demo_arm *arm, kve_demo_bufs *b,
                                  uint32_t n_valid)
{
    size_t heads = (size_t)o->layers * o->heads;
    unsigned char *want = b->host, *got = b->host + b->chunk * b->row_bytes;
    kve_status st = KVE_OK;
    for (uint32_t s = 0; s < n_valid && st == KVE_OK; s++) {
        for (int c = 0; c < 2 && st == KVE_OK; c++) {
            st = kve_copy(b->ctx, got + c * b->row_bytes,
                          (const char *)b->cache[c] + (size_t)s * b->row_bytes, b->row_bytes,
                          KVE_COPY_BACKEND_TO_HOST);
        }
        for (size_t h = 0; h < heads && st == KVE_OK; h++) {
            uint32_t pos = (uint32_t)b->expanded[h * arm->capacity + s];
            kve_demo_entry(o, b->rope, b->vec, h, pos, want, want + o->entry);
            for (int c = 0; c < 2; c++)
                arm->bad += memcmp(want + c * o->entry, got + c * b->row_bytes + h * o->entry,
                                   o->entry) != 0;
        }
    }
    return st;
}

int kve_demo_run_arm(kve_context *ctx, const kve_demo_opts *o, kve_arm_kind kind,
                     kve_demo_arm *arm, int arm_index, int n_arms)
{
    memset(arm, 0, sizeof *arm);
    kve_demo_arm_config(o, kind, arm);
    kve_demo_bufs b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    double t0 = kve_now();
    uint32_t max_rounds = o->steps / (o->interval ? o->interval : 1) + 2;
    arm->round_ms = (double *)kve_cli_malloc("the rounds' times", max_rounds, sizeof(double));
    arm->held = (uint32_t *)calloc((size_t)o->steps + 1, 4);
    arm->map_kept = (uint32_t *)calloc((size_t)KVE_DEMO_SNAPS * o->map_heads * KVE_DEMO_BINS, 4);
    kve_status st = arm->round_ms && arm->held && arm->map_kept ? kve_demo_setup(o, arm, &b)
                                                                : KVE_ERR_NOMEM;
    kve_state_seq_info info = {0};
    uint32_t snap = 0, n_all = o->prompt + o->steps;
    for (uint32_t pos = 0; st == KVE_OK && pos < n_all;) {
        uint32_t n = pos < o->prompt ? (uint32_t)(o->prompt - pos < b.chunk ? o->prompt - pos : b.chunk) : 1;
        st = kve_demo_call(o, arm, &b, pos, n, &info);
        pos += n;
        if (pos >= o->prompt && st == KVE_OK) {
            arm->held[pos - o->prompt] = info.n_valid;
            arm->held_peak = info.n_valid > arm->held_peak ? info.n_valid : arm->held_peak;
        }
        /* snapshot j after o->prompt + (j + 1) * steps / SNAPS tokens */
        while (st == KVE_OK && snap < KVE_DEMO_SNAPS &&
               pos == o->prompt + (uint32_t)((uint64_t)(snap + 1) * o->steps / KVE_DEMO_SNAPS))
            st = kve_demo_snapshot(o, arm, &b, snap++, &info);
        if (o->progress && (pos % 256 == 0 || pos == n_all))
            kve_demo_progress(o, arm, arm_index, n_arms, pos);
    }
    if (o->progress)
        printf("\n");
    if (st == KVE_OK)
        st = kve_demo_finish(o, arm, &b, &info);
    if (st == KVE_OK)
        st = kve_demo_verify(o, arm, &b, info.n_valid);
    arm->wall_s = kve_now() - t0;
    kve_demo_bufs_free(&b);
    if (st == KVE_OK)
        kve_demo_expected_survival(o, arm);
    if (st != KVE_OK) {
        char what[64];
        snprintf(what, sizeof what, "demo: arm %s", arm->name);
        return kve_cli_fail(what, st);
    }
    return 0;
}

void kve_demo_arm_free(kve_demo_arm *arm)
{
    free(arm->round_ms);
    free(arm->held);
    free(arm->map_kept);
    arm->round_ms = NULL;
    arm->held = NULL;
    arm->map_kept = NULL;
}

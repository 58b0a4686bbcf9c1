/*
 * bench_arms.c — kvevict-bench-arms: the per-round cost of the A/B arms'
 * selectors, the analogue of the Random Attention paper's Table 9 (per
 * round: random 0.30 ms, SnapKV 0.37, R-KV 0.58, TriAttention 1.47-1.64 ms,
 * PyTorch on an H200), measured in one run on the CPU: kvevict's random
 * eviction, and K-norm and TriAttention as kvevict's scorer (kve_score, one
 * call per layer) plus its scored selection (kve_evict with KVE_SCORED),
 * next to the PyTorch peers a user would write (bench/peers_scored.py:
 * rand + topk + sort; -||k|| + topk + sort; TriAttention's reference scorer
 * and its factored form, + topk + sort), with the ratios.
 *
 * One round = every KV head of the workload (G1: 36 x 8, G2: 64 x 8, G3:
 * 128 sequences of G1) holding 2112 slots (P = 1024, W = 64, 1024
 * candidates) keeps 960 of its candidates. Keys are random bf16, head_dim
 * 128, in one HND page per layer; TriAttention's query statistics random
 * (GQA group 4, rope theta 1e6). The G3 sequences read the keys of G1's
 * layers (the same bytes per sequence; each sequence has its own tables).
 * After each workload, "Table 9, honest": the paper's per-layer figures
 * converted to the round, each arm's round, the read floor timed beside
 * K-norm (bench_read on the CPU, a device copy on a GPU), the ratios.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kvevict.h"

#define A_HEADS 8
#define A_SLOTS 2112
#define A_PROMPT 1024
#define A_BUDGET 2048
#define A_WINDOW 64
#define A_DIM 128
#define A_GROUP 4
#define A_STORED 36 /* layers of keys held (G3 cycles over them) */

typedef struct {
    const char *name;
    uint32_t seqs, layers;
} arm_workload;

static const arm_workload kArmWorkloads[] = {{"G1", 1, 36}, {"G2", 1, 64}, {"G3", 128, 36}};

static int g_results; /* --results: RESULT lines for bench/gpu_check.sh */
static int g_min;     /* --stat min: the fastest round, robust on a busy machine */

static void fail(const char *what, kve_status st) { bench_fail("kvevict-bench-arms", what, st); }

/* One workload's inputs and the calls of a round. */
typedef struct {
    kve_context *ctx;
    const arm_workload *w;
    size_t heads;
    int32_t *slots;
    float *scores, *q_mean, *q_abs;
    uint16_t *keys;
    kve_seq *seqs;
    kve_score_row *rows;
    int32_t *evicted;
    uint32_t *n_ev, *n_kept;
    uint32_t round;
    int on_host;      /* CPU backend: the host arrays are the backend's */
    void *dev[9];     /* GPU backends: device copies, in the order of arm_to_backend */
    void *copy_dst;   /* GPU backends: where the floor's copy of the keys goes */
    double floor_s;   /* the read floor's seconds a round (arm_floor) */
} arm_run;

/* The keys a round reads: a KV head's generated slots (P..2111, its 1024
 * candidates and the 64 of the window) in each (sequence, layer), and the
 * candidates' alone; the whole key cache held. */
#define A_GEN_BYTES ((size_t)(A_SLOTS - A_PROMPT) * A_DIM * 2)
#define A_CAND_BYTES ((size_t)(A_BUDGET - A_PROMPT) * A_DIM * 2)
#define A_KEY_BYTES ((size_t)A_STORED * A_HEADS * A_SLOTS * A_DIM * 2)

/* The paper's Table 9 (Random Attention, HF harness, PyTorch, one H200):
 * ms per layer call. */
#define PAPER_RANDOM_MS 0.30
#define PAPER_TRI_LO_MS 1.47
#define PAPER_TRI_HI_MS 1.64

/* The arrays the backend reads, as backend memory: the host ones on the CPU,
 * device copies on a GPU (slot tables, scores, keys, query statistics,
 * sequences, and the eviction's outputs). */
static void arm_to_backend(arm_run *r)
{
    size_t nq = (size_t)A_STORED * A_HEADS * A_GROUP * (A_DIM / 2);
    void **host[9] = {(void **)&r->slots, (void **)&r->scores, (void **)&r->keys,
                      (void **)&r->q_mean, (void **)&r->q_abs, (void **)&r->seqs,
                      (void **)&r->evicted, (void **)&r->n_ev, (void **)&r->n_kept};
    size_t bytes[9] = {r->heads * A_SLOTS * 4, r->heads * A_SLOTS * 4,
                       (size_t)A_STORED * A_HEADS * A_SLOTS * A_DIM * 2, nq * 8, nq * 4,
                       r->w->seqs * sizeof(kve_seq), r->heads * (A_SLOTS - A_BUDGET) * 4,
                       r->heads * 4, r->heads * 4};
    kve_backend be;
    kve_context_get_backend(r->ctx, &be);
    r->on_host = be == KVE_BACKEND_CPU;
    for (int i = 0; i < 9 && !r->on_host; i++) {
        kve_status st = kve_alloc(r->ctx, bytes[i], &r->dev[i]);
        if (st == KVE_OK)
            st = kve_copy(r->ctx, r->dev[i], *host[i], bytes[i], KVE_COPY_HOST_TO_BACKEND);
        if (st != KVE_OK)
            fail("the workload's device buffers", st);
        free(*host[i]);
        *host[i] = r->dev[i];
    }
    if (!r->on_host && kve_alloc(r->ctx, A_KEY_BYTES, &r->copy_dst) != KVE_OK)
        fail("the floor's device buffer", KVE_ERR_NOMEM);
}

/* A full head in steady state: the prompt in slots 0..P-1, the generated
 * positions P..2111 scattered over the other slots. */
static void arm_setup(arm_run *r, kve_context *ctx, const arm_workload *w)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->w = w;
    r->heads = (size_t)w->seqs * w->layers * A_HEADS;
    size_t nq = (size_t)A_STORED * A_HEADS * A_GROUP * (A_DIM / 2);
    r->slots = (int32_t *)malloc(r->heads * A_SLOTS * 4);
    r->scores = (float *)calloc(r->heads * A_SLOTS, 4);
    r->keys = (uint16_t *)malloc((size_t)A_STORED * A_HEADS * A_SLOTS * A_DIM * 2);
    r->q_mean = (float *)malloc(nq * 2 * 4);
    r->q_abs = (float *)malloc(nq * 4);
    r->seqs = (kve_seq *)malloc(w->seqs * sizeof(kve_seq));
    r->rows = (kve_score_row *)malloc(w->seqs * sizeof(kve_score_row));
    r->evicted = (int32_t *)malloc(r->heads * (A_SLOTS - A_BUDGET) * 4);
    r->n_ev = (uint32_t *)malloc(r->heads * 4);
    r->n_kept = (uint32_t *)malloc(r->heads * 4);
    if (!r->slots || !r->scores || !r->keys || !r->q_mean || !r->q_abs || !r->seqs || !r->rows ||
        !r->evicted || !r->n_ev || !r->n_kept)
        fail("the workload's buffers", KVE_ERR_NOMEM);
    uint64_t rng = 7; /* the tables, then the keys and query statistics */
    bench_fill_tables(r->slots, r->heads, A_SLOTS, A_PROMPT, &rng);
    for (size_t i = 0; i < (size_t)A_STORED * A_HEADS * A_SLOTS * A_DIM; i += 4) {
        uint64_t v = bench_splitmix64(&rng);
        for (int j = 0; j < 4; j++) { /* bf16 of a uniform value in [-1, 1) */
            float x = (float)(int16_t)(v >> (16 * j)) / 32768.0f;
            uint32_t u;
            memcpy(&u, &x, 4);
            r->keys[i + j] = (uint16_t)(u >> 16);
        }
    }
    for (size_t i = 0; i < nq; i++) {
        uint64_t v = bench_splitmix64(&rng);
        r->q_mean[2 * i] = (float)(int16_t)v / 16384.0f;
        r->q_mean[2 * i + 1] = (float)(int16_t)(v >> 16) / 16384.0f;
        r->q_abs[i] = 2.5f;
    }
    for (uint32_t s = 0; s < w->seqs; s++) {
        r->seqs[s] = (kve_seq){1000 + s, A_PROMPT, 0};
        r->rows[s] = (kve_score_row){0, 0, A_SLOTS, A_PROMPT, A_WINDOW, A_SLOTS, 0, A_SLOTS};
    }
    arm_to_backend(r);
}

static void arm_free(arm_run *r)
{
    free(r->rows);
    if (!r->on_host) {
        for (int i = 0; i < 9; i++)
            kve_free(r->ctx, r->dev[i]);
        kve_free(r->ctx, r->copy_dst);
        return;
    }
    free(r->slots);
    free(r->scores);
    free(r->keys);
    free(r->q_mean);
    free(r->q_abs);
    free(r->seqs);
    free(r->evicted);
    free(r->n_ev);
    free(r->n_kept);
}

/* Layer l's kve_score over every sequence of the workload. */
static kve_status arm_score_layer(arm_run *r, kve_scorer scorer, uint32_t l)
{
    uint32_t ls = l % A_STORED;
    size_t per_layer = (size_t)A_HEADS * A_GROUP * (A_DIM / 2);
    for (uint32_t s = 0; s < r->w->seqs; s++) {
        uint64_t off = ((uint64_t)s * r->w->layers + l) * A_HEADS * A_SLOTS;
        r->rows[s].table_offset = r->rows[s].scores_offset = off;
    }
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = scorer;
    d.flags = KVE_SCORE_ZNORM;
    d.weight = 1.0f;
    d.keys = (kve_key_cache){.base = r->keys + (size_t)ls * A_HEADS * A_SLOTS * A_DIM,
                             .dtype = KVE_DTYPE_BF16, .head_dim = A_DIM, .n_heads = A_HEADS,
                             .layout = KVE_LAYOUT_HND, .pages.page_size = A_SLOTS, .pages.n_pages = 1,
                             .pages.kind = KVE_PAGES_NONE, .pages.n_rows = 1};
    d.tri = (kve_triattention_params){.group = A_GROUP, .q_mean = r->q_mean + ls * per_layer * 2,
                                      .q_abs_mean = r->q_abs + ls * per_layer, .rope_theta = 1e6};
    d.heads_per_table = 1;
    d.n_rows = r->w->seqs;
    d.rows = r->rows;
    d.slot_pos = r->slots;
    d.slot_pos_stride_table = A_SLOTS;
    d.scores = r->scores;
    d.scores_stride_table = A_SLOTS;
    return kve_score(r->ctx, &d);
}

/* One round of @p arm (0 random, else a scorer): scoring (when scored),
 * then the selection, finished on the backend; the scoring's seconds
 * through @p score_s. */
static kve_status arm_round(arm_run *r, int arm, double *score_s)
{
    double t0 = bench_now();
    kve_status st = KVE_OK;
    for (uint32_t l = 0; arm && st == KVE_OK && l < r->w->layers; l++)
        st = arm_score_layer(r, (kve_scorer)arm, l);
    if (st == KVE_OK && arm)
        st = kve_context_synchronize(r->ctx);
    *score_s = bench_now() - t0;
    for (uint32_t s = 0; r->on_host && s < r->w->seqs; s++)
        r->seqs[s].round = r->round; /* fresh keys every round (host memory only) */
    r->round++;
    kve_batch b = {2609, arm ? KVE_SCORED : 0, r->w->seqs, r->seqs, r->w->layers, A_HEADS, 0, 0,
                   A_SLOTS, A_BUDGET, A_WINDOW, r->slots, A_SLOTS, arm ? r->scores : NULL,
                   arm ? A_SLOTS : 0};
    kve_evict_out out = {.evicted = r->evicted, .evicted_stride = A_SLOTS - A_BUDGET,
                         .n_evicted = r->n_ev, .n_kept = r->n_kept};
    if (st == KVE_OK)
        st = kve_evict(r->ctx, &b, &out, NULL, 0);
    if (st == KVE_OK)
        st = kve_context_synchronize(r->ctx);
    return st;
}

/* One pass of the round's read floor, in seconds. CPU: one thread reads,
 * as plain loads (bench_read), every key of the generated slots the round
 * scores, in the scorers' order (sequence, layer, head): the bytes K-norm
 * reads, plus the window's 64 a head. GPU: a device-to-device copy of the
 * whole key cache (kve_copy: it reads every byte once, and writes it). */
static double arm_floor(arm_run *r)
{
    static volatile uint64_t sink;
    double t0 = bench_now();
    if (!r->on_host) {
        kve_status st = kve_copy(r->ctx, r->copy_dst, r->keys, A_KEY_BYTES,
                                 KVE_COPY_BACKEND_TO_BACKEND);
        if (st == KVE_OK)
            st = kve_context_synchronize(r->ctx);
        if (st != KVE_OK)
            fail("the floor's device copy", st);
        return bench_now() - t0;
    }
    uint64_t sum = 0;
    for (uint32_t s = 0; s < r->w->seqs; s++)
        for (uint32_t l = 0; l < r->w->layers; l++)
            for (uint32_t h = 0; h < A_HEADS; h++)
                sum += bench_read(r->keys + (((size_t)(l % A_STORED) * A_HEADS + h) * A_SLOTS +
                                             A_PROMPT) * A_DIM,
                                  A_GEN_BYTES);
    sink += sum;
    return bench_now() - t0;
}

/* Bytes one arm_floor pass reads. */
static double arm_floor_bytes(const arm_run *r)
{
    return r->on_host ? (double)r->w->seqs * r->w->layers * A_HEADS * A_GEN_BYTES
                      : (double)A_KEY_BYTES;
}

/* Median round and median scoring part over >= 3 rounds and min_time;
 * on failure the status, and the message in @p why. */
static kve_status arm_time(arm_run *r, int arm, double min_time, double *round_s, double *score_s,
                           char *why, size_t why_len)
{
    enum { MAX = 500 };
    static double t[MAX], sc[MAX], fl[MAX];
    int n = 0;
    double s;
    kve_status st = arm_round(r, arm, &s); /* warm-up */
    double start = bench_now();
    while (st == KVE_OK && n < MAX && (n < 3 || bench_now() - start < min_time)) {
        if (arm == KVE_SCORER_KNORM) /* the floor beside K-norm, a pass a round */
            fl[n] = arm_floor(r);
        double t0 = bench_now();
        st = arm_round(r, arm, &sc[n]);
        t[n++] = bench_now() - t0;
    }
    if (arm == KVE_SCORER_KNORM && st == KVE_OK) {
        qsort(fl, (size_t)n, sizeof(double), bench_cmp_double);
        r->floor_s = g_min ? fl[0] : fl[n / 2];
    }
    if (st != KVE_OK) {
        snprintf(why, why_len, "%s: %s", kve_status_string(st), kve_last_error());
        return st;
    }
    qsort(t, (size_t)n, sizeof(double), bench_cmp_double);
    qsort(sc, (size_t)n, sizeof(double), bench_cmp_double);
    *round_s = g_min ? t[0] : t[n / 2];
    *score_s = g_min ? sc[0] : sc[n / 2];
    return KVE_OK;
}

/* The PyTorch peers' PEER lines: ms per (peer, workload), -1 when absent,
 * and the reason when skipped. */
typedef struct {
    double ms[4][3];
    char why[4][3][96];
    int layers_timed[4][3];
} arm_peers;

static const char *const kPeerNames[4] = {"random", "knorm", "tri-ref", "tri-factored"};

static void run_arm_peers(const char *python, const char *script, const char *wl, double min_time,
                          int ref_layers, const char *device, arm_peers *p)
{
    char cmd[4096], line[512], name[32], wname[8], rest[256];
    double med, best;
    snprintf(cmd, sizeof cmd, "%s %s --workloads %s --min-seconds %.2f --ref-layers %d --device %s",
             python, script, wl, min_time, ref_layers, device);
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr);
        if (sscanf(line, "PEER %31s %7s %255[^\n]", name, wname, rest) != 3)
            continue;
        for (int k = 0; k < 4; k++)
            for (int w = 0; w < 3; w++) {
                if (strcmp(name, kPeerNames[k]) || strcmp(wname, kArmWorkloads[w].name))
                    continue;
                const char *lt = strstr(rest, "layers_timed=");
                if (!strncmp(rest, "skipped=", 8))
                    snprintf(p->why[k][w], sizeof p->why[k][w], "%.90s", rest + 8);
                else if (sscanf(rest, "median_ms=%lf min_ms=%lf", &med, &best) == 2) {
                    p->ms[k][w] = g_min ? best : med;
                    p->layers_timed[k][w] = lt ? atoi(lt + 13) : 0;
                }
            }
    }
    pclose(f);
}

static const char kArmUsage[] =
    "usage: kvevict-bench-arms [options]\n"
    "Per-round cost of random, K-norm and TriAttention selection (kvevict: scorer + scored\n"
    "selection) next to the PyTorch peers (bench/peers_scored.py), with ratios.\n"
    "  --workloads LIST  G1,G2,G3 (default G1,G2,G3)\n"
    "  --threads N       kvevict's CPU threads (default 1; the peers run single-threaded)\n"
    "  --min-time S      seconds per figure at least (default 1)\n"
    "  --ref-layers N    layers of a round the TriAttention reference peer is timed on, then\n"
    "                    scaled (default 1: its phase tensor makes a CPU round minutes)\n"
    "  --no-peers        kvevict only\n"
    "  --python PATH     interpreter for the peers (default " KVE_BENCH_PYTHON ")\n"
    "  --backend NAME    kvevict's backend (default cpu; cuda or hip: the peers run there too)\n"
    "  --results         also RESULT lines (bench/gpu_check.sh reads them)\n"
    "  --stat S          median (default) or min: the fastest round, robust on a busy machine\n"
    "  --peer-workloads LIST  the workloads the peers run (default: --workloads; a CPU\n"
    "                    G3 round of the PyTorch peers takes minutes)\n";

/* One line: kvevict's arm (ms < 0: none on this line; kve_why set: it did
 * not run) and a PyTorch peer; RESULT lines for bench/gpu_check.sh. */
static void print_row(const char *wl, const char *arm, double ms, double score_ms, double random_ms,
                      const char *kve_why, const char *peer, int peer_i, double peer_ms,
                      double peer_random, double kve_ms, const char *why)
{
    char a[3][32] = {"", "", ""};
    if (kve_why && *kve_why) {
        printf("%-3s %-13s not run: %.60s\n", wl, arm, kve_why);
        arm = "";
    } else if (ms >= 0) {
        snprintf(a[0], sizeof a[0], "%.3f", ms);
        snprintf(a[2], sizeof a[2], "%.2f", random_ms > 0 ? ms / random_ms : 0);
        if (g_results)
            printf("RESULT arms_%s_%s_ms %.4f\n", wl, arm, ms);
    }
    if (score_ms >= 0 && a[0][0])
        snprintf(a[1], sizeof a[1], "%.3f", score_ms);
    printf("%-3s %-13s %11s %10s %8s | %-26s", wl, arm, a[0], a[1], a[2], peer);
    if (peer_ms > 0) {
        printf(" %12.3f %8.2f", peer_ms, peer_ms / peer_random);
        if (kve_ms > 0)
            printf(" %9.1f\n", peer_ms / kve_ms);
        else
            printf(" %9s\n", "-");
        if (g_results)
            printf("RESULT arms_%s_torch_%s_ms %.4f\n", wl, kPeerNames[peer_i], peer_ms);
    } else {
        printf(" not run: %s\n", why && *why ? why : "no figure from the peers");
    }
}

/* A round's figures for the Table 9 lines: ms of each arm's round and of
 * its scoring (0 random, 1 K-norm, 2 TriAttention; < 0: did not run), the
 * read floor. */
typedef struct {
    double ms[3], score_ms[3];
    double floor_ms, floor_bytes, cand_bytes;
    int on_host;
} arm_round_figures;

/* The paper's Table 9 beside this run's rounds (issue 39): the paper's per
 * layer figures times the workload's layers, labelled as converted; each
 * arm's round; the read floor and K-norm's scoring rate against it; the
 * ratio random : TriAttention as measured, and with a scorer exactly at the
 * floor (its scoring the floor's time for the candidates' bytes). */
static void print_table9(const char *wl, const arm_workload *w, const arm_round_figures *f,
                         const char *backend)
{
    double L = w->layers, lo = PAPER_TRI_LO_MS / PAPER_RANDOM_MS;
    double hi = PAPER_TRI_HI_MS / PAPER_RANDOM_MS;
    printf("%-3s Table 9, honest: one round = %u sequence(s) x %u layers x %d KV heads\n", wl,
           w->seqs, w->layers, A_HEADS);
    if (w->seqs == 1)
        printf("    paper, converted   random %.2f ms | TriAttention %.2f-%.2f ms | x random "
               "%.1f-%.1f (a layer call's %.2f / %.2f-%.2f ms x %u layers; HF, PyTorch, H200)\n",
               PAPER_RANDOM_MS * L, PAPER_TRI_LO_MS * L, PAPER_TRI_HI_MS * L, lo, hi,
               PAPER_RANDOM_MS, PAPER_TRI_LO_MS, PAPER_TRI_HI_MS, w->layers);
    else
        printf("    paper, converted   none: its figures are one request's layer call\n");
    if (f->ms[0] < 0 || f->ms[1] < 0 || f->ms[2] < 0) {
        printf("    kvevict, %-9s  an arm did not run (above)\n\n", backend);
        return;
    }
    printf("    kvevict, %-9s  random %.3f ms | K-norm %.3f ms (scoring %.3f) | TriAttention "
           "%.3f ms (scoring %.3f)\n",
           backend, f->ms[0], f->ms[1], f->score_ms[1], f->ms[2], f->score_ms[2]);
    double floor_gbs = f->floor_bytes / (f->floor_ms * 1e6);
    double kn_gbs = f->cand_bytes / (f->score_ms[1] * 1e6);
    if (f->on_host)
        printf("    read floor         %.1f MB of the round's keys (generated slots) read on one "
               "thread, %d-byte loads: %.3f ms, %.2f GB/s\n",
               f->floor_bytes / 1e6, bench_read_width(), f->floor_ms, floor_gbs);
    else
        printf("    read floor         device-to-device copy of the %.1f MB key cache (it reads "
               "and writes each byte): %.3f ms, %.2f GB/s read\n",
               f->floor_bytes / 1e6, f->floor_ms, floor_gbs);
    printf("    K-norm scoring     %.1f MB of candidates' keys: %.2f GB/s = %.2f of the read "
           "floor; TriAttention's scoring %.2f x K-norm's\n",
           f->cand_bytes / 1e6, kn_gbs, kn_gbs / floor_gbs, f->score_ms[2] / f->score_ms[1]);
    double at_floor = f->ms[2] - f->score_ms[2] + f->cand_bytes / (floor_gbs * 1e6);
    printf("    random : TriAttention   1 : %.1f measured; 1 : %.1f with a scorer at the read "
           "floor (paper, converted: 1 : %.1f-%.1f)\n\n",
           f->ms[2] / f->ms[0], at_floor / f->ms[0], lo, hi);
    if (g_results) {
        printf("RESULT arms_%s_floor_gbs %.3f\n", wl, floor_gbs);
        printf("RESULT arms_%s_knorm_of_floor %.4f\n", wl, kn_gbs / floor_gbs);
        printf("RESULT arms_%s_tri_over_random %.3f\n", wl, f->ms[2] / f->ms[0]);
    }
}

/* The four lines of workload @p w: kvevict's three arms and the peers. */
static void arm_workload_rows(kve_context *ctx, int w, double min_time, const arm_peers *pp)
{
    static const char *const peer_label[4] = {"rand+topk+sort", "-||k||+topk+sort",
                                              "reference scorer+topk", "factored scorer+topk"};
    const arm_peers p = *pp;
    arm_run r;
    arm_setup(&r, ctx, &kArmWorkloads[w]);
    double t[3] = {0, 0, 0}, sc[3] = {0, 0, 0};
    char why[3][160] = {"", "", ""};
    arm_round_figures f;
    for (int arm = 0; arm < 3; arm++) { /* 0 random, 1 K-norm, 2 TriAttention (kve_scorer) */
        int ok = arm_time(&r, arm, min_time, &t[arm], &sc[arm], why[arm], sizeof why[arm]) ==
                 KVE_OK;
        f.ms[arm] = ok ? t[arm] * 1e3 : -1;
        f.score_ms[arm] = ok ? sc[arm] * 1e3 : -1;
    }
    f.floor_ms = r.floor_s * 1e3;
    f.floor_bytes = arm_floor_bytes(&r);
    f.cand_bytes = (double)r.heads * A_CAND_BYTES;
    f.on_host = r.on_host;
    arm_free(&r);
    const char *name = kArmWorkloads[w].name;
    double pr = p.ms[0][w], ms[3] = {t[0] * 1e3, t[1] * 1e3, t[2] * 1e3};
    print_row(name, "random", ms[0], -1, ms[0], why[0], peer_label[0], 0, p.ms[0][w], pr,
              ms[0], p.why[0][w]);
    print_row(name, "knorm", ms[1], sc[1] * 1e3, ms[0], why[1], peer_label[1], 1, p.ms[1][w],
              pr, ms[1], p.why[1][w]);
    char label[64];
    snprintf(label, sizeof label, "%s%s", peer_label[2], p.layers_timed[2][w] ? "*" : "");
    print_row(name, "triattention", ms[2], sc[2] * 1e3, ms[0], why[2], label, 2, p.ms[2][w],
              pr, ms[2], p.why[2][w]);
    print_row(name, "", -1, -1, ms[0], NULL, peer_label[3], 3, p.ms[3][w], pr, ms[2],
              p.why[3][w]);
    kve_backend be;
    kve_context_get_backend(ctx, &be);
    printf("\n");
    print_table9(name, &kArmWorkloads[w], &f, kve_backend_name(be));
    fflush(stdout);
}

typedef struct {
    int run[3], threads, ref_layers, peers;
    double min_time;
    const char *python, *backend, *peer_wl;
} arm_options;

/* The command line into @p o; -1 to go on, else the exit status. */
static int parse_arm_options(int argc, char **argv, arm_options *o)
{
    static const struct option longs[] = {{"workloads", 1, 0, 'w'}, {"threads", 1, 0, 't'},
                                          {"min-time", 1, 0, 'm'},  {"ref-layers", 1, 0, 'r'},
                                          {"no-peers", 0, 0, 'n'},  {"python", 1, 0, 'p'},
                                          {"backend", 1, 0, 'b'},   {"results", 0, 0, 'x'},
                                          {"stat", 1, 0, 's'},      {"peer-workloads", 1, 0, 'q'},
                                          {"help", 0, 0, 'h'},
                                          {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
        switch (c) {
        case 'w':
            for (int w = 0; w < 3; w++)
                o->run[w] = strstr(optarg, kArmWorkloads[w].name) != NULL;
            break;
        case 't': o->threads = atoi(optarg); break;
        case 'm': o->min_time = atof(optarg); break;
        case 'r': o->ref_layers = atoi(optarg); break;
        case 'n': o->peers = 0; break;
        case 'p': o->python = optarg; break;
        case 'b': o->backend = optarg; break;
        case 'x': g_results = 1; break;
        case 's': g_min = !strcmp(optarg, "min"); break;
        case 'q': o->peer_wl = optarg; break;
        case 'h': fputs(kArmUsage, stdout); return 0;
        default: fputs(kArmUsage, stderr); return 2;
        }
    }
    return -1;
}

/* The run's header: the machine, the backend, the statistic, the columns. */
static void print_arm_header(const arm_options *o, kve_context *ctx, kve_backend be)
{
    char model[256];
    bench_cpu_model(model, sizeof model);
    kve_cpu_isa isa;
    kve_context_get_cpu_isa(ctx, &isa);
    if (be == KVE_BACKEND_CPU)
        printf("kvevict-bench-arms: %s; kvevict on %s, %d thread(s); PyTorch peers "
               "single-threaded; %s of >= 3 rounds and %.2f s\n", model,
               kve_cpu_isa_name(isa), o->threads, g_min ? "fastest" : "medians", o->min_time);
    else
        printf("kvevict-bench-arms: kvevict on the %s backend, the PyTorch peers on the same GPU; "
               "%s of >= 3 rounds and %.2f s\n", kve_backend_name(be),
               g_min ? "fastest" : "medians", o->min_time);
    printf("one round = every KV head of the workload keeps 960 of its 1024 candidates "
           "(2112 slots, P = 1024, W = 64)\n\n");
    printf("%-3s %-13s %11s %10s %8s | %-26s %12s %8s %9s\n", "wl", "arm", "kvevict ms",
           "(scoring)", "x random", "PyTorch peer", "peer ms", "x random", "peer/kve");
}

int main(int argc, char **argv)
{
    arm_options o = {{1, 1, 1}, 1, 1, 1, 1.0, KVE_BENCH_PYTHON, "cpu", NULL};
    int status = parse_arm_options(argc, argv, &o);
    if (status >= 0)
        return status;
    char wl[16] = "";
    for (int w = 0; w < 3; w++)
        if (o.run[w])
            snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s%s", *wl ? "," : "",
                     kArmWorkloads[w].name);
    arm_peers p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 4; k++)
        for (int w = 0; w < 3; w++)
            p.ms[k][w] = -1, snprintf(p.why[k][w], sizeof p.why[k][w], "--no-peers");
    kve_backend be;
    kve_context *ctx = NULL;
    kve_status st = kve_backend_from_name(o.backend, &be);
    if (st == KVE_OK)
        st = kve_context_create(be, &ctx);
    if (st == KVE_OK && be == KVE_BACKEND_CPU)
        st = kve_context_set_threads(ctx, o.threads);
    if (st != KVE_OK)
        fail("the context", st);
    kve_context_get_backend(ctx, &be);
    if (o.peers) /* on the GPU the peers' CUDA torch (ROCm builds answer to "cuda" too) */
        run_arm_peers(o.python, KVE_BENCH_PEERS_SCORED, o.peer_wl ? o.peer_wl : wl, o.min_time,
                      o.ref_layers, be == KVE_BACKEND_CPU ? "cpu" : "cuda", &p);
    print_arm_header(&o, ctx, be);
    for (int w = 0; w < 3; w++)
        if (o.run[w])
            arm_workload_rows(ctx, w, o.min_time, &p);
    printf("\n* timed on %d layer(s) of the round and scaled to all of them.\n"
           "x random: the arm's round over the random arm's round (the paper's Table 9, PyTorch on "
           "an H200: SnapKV 1.23, R-KV 1.93, TriAttention 4.9-5.5); peer/kve: the PyTorch peer's "
           "round over kvevict's.\n", o.ref_layers);
    kve_context_destroy(ctx);
    return 0;
}

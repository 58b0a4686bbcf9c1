/*
 * bench_cpu.c — kvevict-bench: the CPU backend on the standard workloads
 * (G1, G2, G3 of docs/BENCHMARKS.md) per ISA and thread count, next to its
 * floors (a hash-only pass over the same candidates; memcpy of the same
 * bytes) and to the peers a user would write today (numpy, PyTorch; run by
 * bench/peers.py in the same process tree, single-threaded).
 *
 * Eviction goes through the public API (kve_evict), checked (the default)
 * and with KVE_TRUSTED_SLOTS; the floor calls the ISA's hash kernel directly.
 */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_util.h"
#include "kve_cpu_kernels.h"
#include "kvevict.h"


typedef struct {
    const char *name;
    uint32_t seqs, layers;
} workload;

static const workload kWorkloads[] = {{"G1", 1, G_LAYERS}, {"G2", 1, 64}, {"G3", 128, G_LAYERS}};

typedef struct {
    double min_time;
    int isas[4], n_isas;
    int threads[8], n_threads;
    int run[9]; /* G1, G2, G3, compaction, moves, state memory, decode step, scoring, scored */
    int peers;
    const char *python, *script;
} options;

int g_use_min; /* --stat min: the fastest run instead of the median (bench.h) */

/* The @p k (1 or 2) steps in turn, at least 3 runs each and k x min_time
 * seconds in all, after a warm-up: each one's median (least with --stat
 * min) in t[i]. */
static void time_steps(double min_time, const timed_step *const *st, int k, double t[2])
{
    enum { MAX_RUNS = 2000 };
    static double s[2][MAX_RUNS];
    int n = 0;
    for (int i = 0; i < k; i++) { /* warm-up */
        if (st[i]->setup)
            st[i]->setup(st[i]->arg);
        st[i]->body(st[i]->arg);
    }
    double start = bench_now();
    for (; n < MAX_RUNS && (n < 3 || bench_now() - start < k * min_time); n++)
        for (int i = 0; i < k; i++) {
            if (st[i]->setup)
                st[i]->setup(st[i]->arg);
            double t0 = bench_now();
            st[i]->body(st[i]->arg);
            s[i][n] = bench_now() - t0;
        }
    for (int i = 0; i < k; i++) {
        qsort(s[i], (size_t)n, sizeof(double), bench_cmp_double);
        t[i] = g_use_min ? s[i][0] : s[i][n / 2];
    }
}

double time_median(double min_time, step_fn setup, step_fn body, void *arg)
{
    const timed_step one = {setup, body, arg}, *st[1] = {&one};
    double t[2];
    time_steps(min_time, st, 1, t);
    return t[0];
}

void time_pair(double min_time, const timed_step *a, const timed_step *b, double *ta, double *tb)
{
    const timed_step *st[2] = {a, b};
    double t[2];
    time_steps(min_time, st, 2, t);
    *ta = t[0];
    *tb = t[1];
}

void die(const char *what, kve_status st) { bench_fail("kvevict-bench", what, st); }

uint32_t g_spread = 1; /* --spread K (bench.h) */

/* A full G head in steady state under slot reuse (bench_util.h); with
 * --spread K, generated position P + i becomes P + K * i. */
void fill_tables(int32_t *slots, size_t heads, uint64_t seed)
{
    uint64_t rng = seed;
    bench_fill_tables(slots, heads, G_SLOTS, G_PROMPT, &rng);
    for (size_t i = 0; g_spread > 1 && i < heads * G_SLOTS; i++)
        if (slots[i] >= G_PROMPT)
            slots[i] = G_PROMPT + (int32_t)g_spread * (slots[i] - G_PROMPT);
}

kve_context *cpu_context(int isa, int threads)
{
    kve_context *ctx = NULL;
    kve_status st = kve_context_create(KVE_BACKEND_CPU, &ctx);
    if (st == KVE_OK)
        st = kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa);
    if (st == KVE_OK)
        st = kve_context_set_threads(ctx, threads);
    if (st != KVE_OK)
        die("context", st);
    return ctx;
}

typedef struct {
    double checked, trusted, floor;
    double digest_on, digest_off; /* checked, with and without round_digest, paired */
    double by_layer, one_call;    /* checked, a call per layer vs one call, paired */
} evict_result;

typedef struct {
    kve_context *ctx;
    const kve_batch *b;
    const kve_evict_out *out;
    void *ws;
    size_t ws_bytes;
    kve_seq *seqs;
    uint32_t round;
    const kve_cpu_kernels *kernels;
    const int32_t *cand;
    int threads;
    uint64_t *keys;
} evict_run;

static void evict_next_round(void *arg) /* fresh keys every round */
{
    evict_run *r = (evict_run *)arg;
    r->round++;
    for (uint32_t s = 0; s < r->b->n_seqs; s++)
        r->seqs[s].round = r->round;
}

void evict_or_die(kve_context *ctx, const kve_batch *b, const kve_evict_out *out, void *ws,
                  size_t ws_bytes)
{
    kve_status st = kve_evict(ctx, b, out, ws, ws_bytes);
    if (st != KVE_OK)
        die("kve_evict", st);
}

static void evict_once(void *arg)
{
    evict_run *r = (evict_run *)arg;
    evict_or_die(r->ctx, r->b, r->out, r->ws, r->ws_bytes);
}

/* The round as an engine that evicts layer by layer runs it: one
 * kve_evict per (sequence, layer), of that layer's heads. */
static void evict_by_layer_once(void *arg)
{
    evict_run *r = (evict_run *)arg;
    const kve_batch *b = r->b;
    const kve_evict_out *o = r->out;
    for (uint32_t s = 0; s < b->n_seqs; s++)
        for (uint32_t l = 0; l < b->n_layers; l++) {
            size_t first = ((size_t)s * b->n_layers + l) * b->n_heads;
            kve_batch one = *b;
            one.n_seqs = 1;
            one.seqs = b->seqs + s;
            one.n_layers = 1;
            one.layer_offset = l;
            one.slot_pos = b->slot_pos + first * b->slot_pos_stride;
            kve_evict_out out = *o;
            out.evicted = o->evicted + first * o->evicted_stride;
            out.n_evicted = o->n_evicted + first;
            out.n_kept = o->n_kept + first;
            out.head_flags = o->head_flags ? o->head_flags + first : NULL;
            evict_or_die(r->ctx, &one, &out, r->ws, r->ws_bytes);
        }
}

static void floor_once(void *arg)
{
    evict_run *r = (evict_run *)arg;
    size_t per_seq = (size_t)r->b->n_layers * r->b->n_heads, heads = r->b->n_seqs * per_seq;
#pragma omp parallel for schedule(static) num_threads(r->threads)
    for (size_t i = 0; i < heads; i++) {
        kve_head_job j;
        memset(&j, 0, sizeof j);
        j.seed = r->b->seed;
        j.seq_id = r->seqs[i / per_seq].seq_id;
        j.layer = (uint32_t)(i / r->b->n_heads % r->b->n_layers);
        j.head = (uint32_t)(i % r->b->n_heads);
        j.round = r->round;
        r->kernels->head_keys(&j, r->cand, G_CAND, r->keys + (size_t)omp_get_thread_num() * G_CAND);
    }
}

/* One workload on one ISA and thread count. */
static evict_result bench_evict(const workload *w, int isa, int threads, double min_time)
{
    size_t heads = (size_t)w->seqs * w->layers * G_HEADS;
    int32_t *slots = (int32_t *)malloc(heads * G_SLOTS * 4);
    kve_seq *seqs = (kve_seq *)malloc(w->seqs * sizeof *seqs);
    fill_tables(slots, heads, 42);
    for (uint32_t s = 0; s < w->seqs; s++)
        seqs[s] = (kve_seq){1000 + s, G_PROMPT, 0};
    kve_batch b = {2609, 0, w->seqs, seqs, w->layers, G_HEADS, 0, 0, G_SLOTS, G_BUDGET,
                   G_WINDOW, slots, G_SLOTS, NULL, 0};
    size_t ev_stride = G_SLOTS - G_BUDGET;
    int32_t *evicted = (int32_t *)malloc(heads * ev_stride * 4);
    uint32_t *n_ev = (uint32_t *)malloc(heads * 4), *n_kept = (uint32_t *)malloc(heads * 4);
    uint8_t *flags = (uint8_t *)malloc(heads);
    kve_evict_out out = {.evicted = evicted, .evicted_stride = ev_stride, .n_evicted = n_ev,
                         .n_kept = n_kept, .head_flags = flags};
    kve_context *ctx = cpu_context(isa, threads);
    size_t ws_bytes = 0;
    kve_status st = kve_evict_workspace_size(ctx, &b, &ws_bytes);
    void *ws = NULL;
    if (st == KVE_OK)
        st = kve_alloc(ctx, ws_bytes, &ws);
    if (st != KVE_OK)
        die("workspace", st);
    evict_result r;
    evict_run run = {ctx, &b, &out, ws, ws_bytes, seqs, 0, NULL, NULL, 0, NULL};
    for (int trusted = 0; trusted < 2; trusted++) {
        b.flags = trusted ? KVE_TRUSTED_SLOTS : 0;
        *(trusted ? &r.trusted : &r.checked) = time_median(min_time, evict_next_round, evict_once, &run);
    }
    /* The running digest's cost (SPEC §11): checked rounds with round_digest
     * on and off, measured back to back, three times; the smallest of each. */
    b.flags = 0;
    uint64_t *digest = (uint64_t *)malloc(heads * 8);
    r.digest_on = r.digest_off = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        out.round_digest = digest;
        double on = time_median(min_time / 3, evict_next_round, evict_once, &run);
        out.round_digest = NULL;
        double off = time_median(min_time / 3, evict_next_round, evict_once, &run);
        r.digest_on = on < r.digest_on ? on : r.digest_on;
        r.digest_off = off < r.digest_off ? off : r.digest_off;
    }
    free(digest);
    /* Per-call overhead: the same checked round in one call and in a call
     * per layer, in turn. */
    const timed_step one_call = {evict_next_round, evict_once, &run},
                     by_layer = {evict_next_round, evict_by_layer_once, &run};
    time_pair(min_time, &by_layer, &one_call, &r.by_layer, &r.one_call);
    /* The floor: keys of the same candidates (positions P..B-1 of each head),
     * nothing else, on the same ISA and threads. */
    run.kernels = kve_cpu_kernels_get((kve_cpu_isa)isa);
    int32_t cand[G_CAND];
    for (uint32_t i = 0; i < G_CAND; i++)
        cand[i] = (int32_t)(G_PROMPT + i);
    run.cand = cand;
    run.threads = threads;
    uint64_t *keys = (uint64_t *)aligned_alloc(64, (size_t)threads * G_CAND * 8);
    run.keys = keys;
    r.floor = time_median(min_time, evict_next_round, floor_once, &run);
    free(keys);
    kve_free(ctx, ws);
    kve_context_destroy(ctx);
    free(slots);
    free(seqs);
    free(evicted);
    free(n_ev);
    free(n_kept);
    free(flags);
    return r;
}

/* Thread scaling by pairs: a round on `threads` threads, then one on 1
 * thread, alternately; the median of the per-pair ratios. Pairing keeps the
 * ratio meaningful when other load on the machine comes and goes. */
static double bench_scaling(const workload *w, int isa, int threads, int pairs)
{
    size_t heads = (size_t)w->seqs * w->layers * G_HEADS, ev_stride = G_SLOTS - G_BUDGET;
    int32_t *slots = (int32_t *)malloc(heads * G_SLOTS * 4), *evicted = (int32_t *)malloc(heads * ev_stride * 4);
    kve_seq *seqs = (kve_seq *)malloc(w->seqs * sizeof *seqs);
    uint32_t *n_ev = (uint32_t *)malloc(heads * 4), *n_kept = (uint32_t *)malloc(heads * 4);
    fill_tables(slots, heads, 42);
    for (uint32_t s = 0; s < w->seqs; s++)
        seqs[s] = (kve_seq){1000 + s, G_PROMPT, 0};
    kve_batch b = {2609, 0, w->seqs, seqs, w->layers, G_HEADS, 0, 0, G_SLOTS, G_BUDGET,
                   G_WINDOW, slots, G_SLOTS, NULL, 0};
    kve_evict_out out = {.evicted = evicted, .evicted_stride = ev_stride, .n_evicted = n_ev,
                         .n_kept = n_kept};
    kve_context *one = cpu_context(isa, 1), *many = cpu_context(isa, threads);
    size_t bytes = 0;
    kve_status st = kve_evict_workspace_size(many, &b, &bytes);
    void *ws = malloc(bytes);
    double ratio[64];
    pairs = pairs > 64 ? 64 : pairs;
    for (int p = -1; p < pairs && st == KVE_OK; p++) { /* p = -1: warm-up */
        double t[2] = {1, 1};
        for (int k = 0; k < 2 && st == KVE_OK; k++) {
            for (uint32_t s = 0; s < w->seqs; s++)
                seqs[s].round++;
            double t0 = bench_now();
            st = kve_evict(k ? one : many, &b, &out, ws, bytes);
            t[k] = bench_now() - t0;
        }
        if (p >= 0)
            ratio[p] = t[1] / t[0];
    }
    if (st != KVE_OK)
        die("kve_evict", st);
    qsort(ratio, (size_t)pairs, sizeof(double), bench_cmp_double);
    kve_context_destroy(one);
    kve_context_destroy(many);
    free(ws);
    free(slots);
    free(evicted);
    free(seqs);
    free(n_ev);
    free(n_kept);
    return ratio[pairs / 2];
}

typedef struct {
    double numpy[3], torch[3];
} peer_result;

/* Runs bench/peers.py and reads its PEER lines. */
static void run_peers(const options *o, peer_result *p)
{
    for (int w = 0; w < 3; w++)
        p->numpy[w] = p->torch[w] = -1;
    char wl[32] = "", cmd[4096];
    for (int w = 0; w < 3; w++)
        if (o->run[w])
            snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s%s", *wl ? "," : "", kWorkloads[w].name);
    if (!*wl)
        return;
    /* OpenBLAS tuning variables of this machine are unset for the numpy peer. */
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE %s %s --workloads %s "
             "--min-seconds %.2f", o->python, o->script, wl, o->min_time * 2);
    FILE *f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "kvevict-bench: cannot run %s\n", cmd);
        return;
    }
    char line[512], name[32], wname[8];
    double med;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr);
        if (sscanf(line, "PEER %31s %7s median_ms=%lf", name, wname, &med) != 3)
            continue;
        for (int w = 0; w < 3; w++)
            if (!strcmp(wname, kWorkloads[w].name))
                (!strcmp(name, "numpy") ? p->numpy : p->torch)[w] = med;
    }
    pclose(f);
}

static int parse_list(const char *arg, const char *const *names, int n_names, int *out, int max)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) {
        int found = -1;
        for (int i = 0; i < n_names; i++)
            if (!strcmp(tok, names[i]))
                found = i;
        if (found < 0 && !names)
            found = atoi(tok);
        if (found < 0) {
            fprintf(stderr, "kvevict-bench: unknown name \"%s\"\n", tok);
            exit(2);
        }
        out[n++] = found;
    }
    return n;
}

static const char kUsage[] =
    "usage: kvevict-bench [options]\n"
    "The CPU backend on G1 (36x8 heads), G2 (64x8) and G3 (128 x G1): 2112 slots per head,\n"
    "P=1024, B=2048, W=64, so 1024 candidates and 64 evictions per head; and the compaction of\n"
    "G1's K and V (256-byte entries) after a round. Per ISA and thread count: ms per round,\n"
    "ns per candidate, the ratio to the hash-only floor; numpy and PyTorch side by side.\n"
    "  --workloads LIST  G1,G2,G3,compact,moves,memory,step,score,scored (default all): moves =\n"
    "                    a decode step's moves (kve_cache_write) vs memcpy; memory = state vs\n"
    "                    K/V bytes; step = G2 decode steps at 1, 8, 32, 128 rows, a round in\n"
    "                    every row and in none, and staggered at 128 (append, + moves and\n"
    "                    writes); score = a G1 round of TriAttention and K-norm scoring\n"
    "                    vs PyTorch; scored = a G1 round by scores (KVE_SCORED) vs by keys\n"
    "  --isa LIST        scalar,avx2,avx512 (default: each this CPU runs)\n"
    "  --threads LIST    thread counts (default 1,2)\n"
    "  --min-time S      seconds per measurement at least (default 0.5)\n"
    "  --stat S          median (default) or min: the fastest round, robust on a busy machine\n"
    "  --pages P         4k (default) or 2m: compaction's and moves' caches and their floors'\n"
    "                    buffers on 2 MiB transparent huge pages (madvise)\n"
    "  --spread K        generated positions P + K*i instead of P + i (1 to 1000000, default 1):\n"
    "                    a long decode's table, whose kept positions lie K times further\n"
    "                    apart; the recent window then holds about 64/K slots, so a head has\n"
    "                    up to 1087 candidates. Peers skipped (theirs are not spread)\n"
    "  --no-peers        skip the numpy and PyTorch peers\n"
    "  --python PATH     interpreter for the peers (default " KVE_BENCH_PYTHON ")\n"
    "  --peers PATH      the peers script (default " KVE_BENCH_PEERS ")\n";

static const char *const kIsaNames[] = {"auto", "scalar", "avx2", "avx512"};

/* The command line into @p o; -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, options *o)
{
    static const char *const wl_names[] = {"G1",     "G2",   "G3",    "compact", "moves",
                                           "memory", "step", "score", "scored"};
    static const struct option longs[] = {
        {"workloads", 1, 0, 'w'}, {"isa", 1, 0, 'i'},    {"threads", 1, 0, 't'},
        {"min-time", 1, 0, 'm'},  {"no-peers", 0, 0, 'n'}, {"python", 1, 0, 'p'},
        {"peers", 1, 0, 's'},     {"help", 0, 0, 'h'},    {"stat", 1, 0, 'x'},
        {"pages", 1, 0, 'g'},     {"spread", 1, 0, 'k'},  {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
        int list[9], n;
        switch (c) {
        case 'w':
            n = parse_list(optarg, wl_names, 9, list, 9);
            memset(o->run, 0, sizeof o->run);
            for (int i = 0; i < n; i++)
                o->run[list[i]] = 1;
            break;
        case 'i': o->n_isas = parse_list(optarg, kIsaNames, 4, o->isas, 4); break;
        case 't': o->n_threads = parse_list(optarg, NULL, 0, o->threads, 8); break;
        case 'm': o->min_time = atof(optarg); break;
        case 'x': g_use_min = !strcmp(optarg, "min"); break;
        case 'g':
            if (strcmp(optarg, "4k") && strcmp(optarg, "2m")) {
                fprintf(stderr, "kvevict-bench: --pages %s: 4k or 2m\n", optarg);
                return 2;
            }
            g_huge_pages = !strcmp(optarg, "2m");
            break;
        case 'k': {
            char *end;
            unsigned long k = strtoul(optarg, &end, 10);
            if (*optarg < '0' || *optarg > '9' || *end || k < 1 || k > 1000000) {
                fprintf(stderr, "kvevict-bench: --spread %s: an integer in 1..1000000\n", optarg);
                return 2;
            }
            g_spread = (uint32_t)k;
            o->peers &= k == 1;
            break;
        }
        case 'n': o->peers = 0; break;
        case 'p': o->python = optarg; break;
        case 's': o->script = optarg; break;
        case 'h': fputs(kUsage, stdout); return 0;
        default: fputs(kUsage, stderr); return 2;
        }
    }
    if (!o->n_isas)
        for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
            int avail = 0;
            kve_cpu_isa_available((kve_cpu_isa)isa, &avail);
            if (avail)
                o->isas[o->n_isas++] = isa;
        }
    return -1;
}

/* Every eviction row of the table, into @p rows. */
static void measure_eviction(const options *o, evict_result rows[3][4][8])
{
    for (int w = 0; w < 3; w++)
        for (int i = 0; o->run[w] && i < o->n_isas; i++)
            for (int t = 0; t < o->n_threads; t++)
                rows[w][i][t] = bench_evict(&kWorkloads[w], o->isas[i], o->threads[t], o->min_time);
}

/* The eviction table (checked, trusted, the floor, the peers' ratios)
 * from @p rows. */
static void print_eviction(const options *o, const peer_result *peers, evict_result rows[3][4][8])
{
    if (!o->run[0] && !o->run[1] && !o->run[2])
        return;
    printf("\neviction, one round = every head of the workload once (1024 candidates, 64 evicted each)");
    if (g_spread > 1)
        printf("; generated positions %u apart (--spread)", g_spread);
    printf("\n");
    printf("%-4s %-7s %3s | %10s %8s %9s | %10s %8s | %9s %8s | %8s %8s\n", "wl", "isa", "thr",
           "checked ms", "ns/cand", "x floor", "trusted ms", "x floor", "floor ms", "ns/key",
           "x numpy", "x torch");
    for (int w = 0; w < 3; w++) {
        if (!o->run[w])
            continue;
        double cands = (double)kWorkloads[w].seqs * kWorkloads[w].layers * G_HEADS * G_CAND;
        for (int i = 0; i < o->n_isas; i++)
            for (int t = 0; t < o->n_threads; t++) {
                evict_result r = rows[w][i][t];
                printf("%-4s %-7s %3d | %10.3f %8.2f %9.2f | %10.3f %8.2f | %9.3f %8.2f |",
                       kWorkloads[w].name, kIsaNames[o->isas[i]], o->threads[t], r.checked * 1e3,
                       r.checked * 1e9 / cands, r.checked / r.floor, r.trusted * 1e3,
                       r.trusted / r.floor, r.floor * 1e3, r.floor * 1e9 / cands);
                if (peers->numpy[w] > 0)
                    printf(" %8.0f", peers->numpy[w] / (r.checked * 1e3));
                else
                    printf(" %8s", "-");
                if (peers->torch[w] > 0)
                    printf(" %8.0f\n", peers->torch[w] / (r.checked * 1e3));
                else
                    printf(" %8s\n", "-");
                fflush(stdout);
            }
    }
}

/* The running digest's cost, the peers' figures, the thread scaling. */
static void print_digest_peers_scaling(const options *o, const peer_result *peers,
                                       evict_result rows[3][4][8])
{
    int any = o->run[0] || o->run[1] || o->run[2];
    if (any)
        printf("\nrunning digest (round_digest on vs off, checked round, same run):\n");
    for (int w = 0; w < 3; w++)
        for (int i = 0; o->run[w] && i < o->n_isas; i++)
            for (int t = 0; t < o->n_threads; t++) {
                const evict_result *r = &rows[w][i][t];
                printf("%-4s %-7s %3d | on %.3f ms, off %.3f ms: %+.1f%%\n", kWorkloads[w].name,
                       kIsaNames[o->isas[i]], o->threads[t], r->digest_on * 1e3,
                       r->digest_off * 1e3, (r->digest_on / r->digest_off - 1) * 100);
            }
    if (any)
        printf("\none call per layer (each sequence's layers in separate kve_evict calls) vs one "
               "call per round, checked, in turn:\n");
    for (int w = 0; w < 3; w++)
        for (int i = 0; o->run[w] && i < o->n_isas; i++)
            for (int t = 0; t < o->n_threads; t++) {
                const evict_result *r = &rows[w][i][t];
                uint32_t calls = kWorkloads[w].seqs * kWorkloads[w].layers;
                printf("%-4s %-7s %3d | %u calls %.3f ms, one call %.3f ms: %+.2f us a call\n",
                       kWorkloads[w].name, kIsaNames[o->isas[i]], o->threads[t], calls,
                       r->by_layer * 1e3, r->one_call * 1e3,
                       (r->by_layer - r->one_call) * 1e6 / (calls - 1));
            }
    if (o->peers)
        for (int w = 0; w < 3; w++)
            if (o->run[w])
                printf("peers, 1 thread, %s: numpy %.3f ms, PyTorch %.3f ms per round\n",
                       kWorkloads[w].name, peers->numpy[w], peers->torch[w]);
    for (int t = 0; t < o->n_threads; t++) {
        if (o->threads[t] < 2)
            continue;
        printf("\nthread scaling, checked, median of 15 paired rounds (%d threads vs 1):", o->threads[t]);
        for (int w = 0; w < 3; w++)
            for (int i = 0; o->run[w] && i < o->n_isas; i++)
                if (o->isas[i] != KVE_CPU_ISA_SCALAR)
                    printf(" %s/%s %.2fx", kWorkloads[w].name, kIsaNames[o->isas[i]],
                           bench_scaling(&kWorkloads[w], o->isas[i], o->threads[t], 15));
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    options o = {0.5, {0}, 0, {1, 2}, 2, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, KVE_BENCH_PYTHON, KVE_BENCH_PEERS};
    int status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    char model[256];
    bench_cpu_model(model, sizeof model);
    printf("kvevict-bench: %s, %d cores visible; %s of >= 3 rounds and %.2f s per figure\n",
           model, omp_get_num_procs(), g_use_min ? "fastest" : "median", o.min_time);

    /* The library first, then the peers: measured after the peers' processes,
     * G1's rounds ran up to 40% slower in some processes (docs/BENCHMARKS.md). */
    static evict_result digest_rows[3][4][8];
    measure_eviction(&o, digest_rows);
    peer_result peers;
    if (o.peers)
        run_peers(&o, &peers);
    else
        for (int w = 0; w < 3; w++)
            peers.numpy[w] = peers.torch[w] = -1;
    print_eviction(&o, &peers, digest_rows);
    print_digest_peers_scaling(&o, &peers, digest_rows);
    if (o.run[3])
        bench_compaction(o.isas, o.n_isas, o.threads, o.n_threads, o.min_time, kIsaNames);
    for (int t = 0; o.run[4] && t < o.n_threads; t++) /* copies: the ISA does not matter */
        bench_moves(0, o.threads[t], o.min_time);
    if (o.run[5])
        bench_state_memory();
    for (int t = 0; o.run[6] && t < o.n_threads; t++)
        bench_step(0, o.threads[t], o.min_time);
    if (o.run[7])
        bench_score(o.isas, o.n_isas, o.threads, o.n_threads, o.min_time,
                    o.peers ? o.python : NULL, KVE_BENCH_SCORE_PEERS);
    if (o.run[8]) {
        printf("\nscored selection (KVE_SCORED) vs random, G1 checked round, ms, least of 3 alternating\n");
        for (int i = 0; i < o.n_isas; i++)
            for (int t = 0; t < o.n_threads; t++)
                bench_scored(o.isas[i], o.threads[t], o.min_time, kIsaNames[o.isas[i]]);
    }
    return 0;
}

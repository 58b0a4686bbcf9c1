/*
 * cmd_replay.c — `kvevict replay`: one request's eviction history from ids
 * alone (docs/SPEC.md "Schedule" and "Running digest"), run through a cache
 * state on any backend, one JSON line per round.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char kve_replay_usage[] =
    "usage: kvevict replay [options]\n"
    "Replay one request under the paper's schedule from ids alone and print, per\n"
    "eviction round, one JSON line: the round, every slot table's evicted\n"
    "positions, the round digest and the running digest (docs/SPEC.md section 11).\n"
    "Lines of two runs compare with `kvevict diff`.\n"
    "  --seed N            the caller's seed (default 0)\n"
    "  --seq-id N          the request id (default 0)\n"
    "  --prompt N          prompt tokens P (default 0)\n"
    "  --tokens N          tokens appended in all, prompt included (default 4096;\n"
    "                      at most 2^31-1, the positions' limit)\n"
    "  --budget N          B (default 2048)    --window N   W (default 64)\n"
    "  --interval N        r, slots each round frees (default 64)\n"
    "  --layers N          layers of this shard (default 1)\n"
    "  --heads N           KV heads per layer of this shard (default 1)\n"
    "  --layer-offset N    global index of the shard's first layer (default 0)\n"
    "  --head-offset N     global index of the shard's first head (default 0)\n"
    "  --persistent | --shared-heads | --shared-layers   key modes\n"
    "  --backend NAME      auto, cpu, cuda or hip (default auto)\n"
    "  --isa NAME          CPU ISA: scalar, avx2, avx512\n"
    "  --threads N         CPU threads, 1 to 1024 (default: OpenMP's)\n"
    "  --summary           print only one line at the end: seq_id, rounds and the\n"
    "                      running digest (what an engine logs at retire)\n";

typedef struct {
    kve_schedule sched;
    uint64_t seq_id;
    uint32_t prompt, tokens, layers, heads, layer_offset, head_offset;
    const char *backend, *isa;
    int threads, summary;
} kve_replay_opts;

static int kve_replay_parse(int argc, char **argv, kve_replay_opts *o)
{
    enum { SEED = 1, SEQ, PROMPT, TOKENS, BUDGET, WINDOW, INTERVAL, LAYERS, HEADS, LOFF, HOFF,
           PERSIST, SHEADS, SLAYERS, BACKEND, ISA, THREADS, SUMMARY, HELP };
    static const struct option opts[] = {
        {"seed", required_argument, 0, SEED},         {"seq-id", required_argument, 0, SEQ},
        {"prompt", required_argument, 0, PROMPT},     {"tokens", required_argument, 0, TOKENS},
        {"budget", required_argument, 0, BUDGET},     {"window", required_argument, 0, WINDOW},
        {"interval", required_argument, 0, INTERVAL}, {"layers", required_argument, 0, LAYERS},
        {"heads", required_argument, 0, HEADS},       {"layer-offset", required_argument, 0, LOFF},
        {"head-offset", required_argument, 0, HOFF},  {"persistent", no_argument, 0, PERSIST},
        {"shared-heads", no_argument, 0, SHEADS},     {"shared-layers", no_argument, 0, SLAYERS},
        {"backend", required_argument, 0, BACKEND},   {"isa", required_argument, 0, ISA},
        {"threads", required_argument, 0, THREADS},   {"summary", no_argument, 0, SUMMARY},
        {"help", no_argument, 0, HELP},               {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->sched.budget = 2048;
    o->sched.window = 64;
    o->sched.interval = 64;
    o->tokens = 4096;
    o->layers = o->heads = 1;
    o->backend = "auto";
    uint32_t *u32[] = {&o->prompt, &o->tokens, &o->sched.budget, &o->sched.window,
                       &o->sched.interval, &o->layers, &o->heads, &o->layer_offset,
                       &o->head_offset};
    kve_cli_engine engine = {&o->sched.flags, &o->backend, &o->isa, &o->threads};
    optind = 1;
    int c, rc = 0;
    uint64_t v;
    kve_cli_seen seen = {{0}, 0};
    while (!rc && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = c >= SEED && c <= HELP ? opts[c - SEED].name : "?";
        if (c >= SEED && c < HELP && (rc = kve_cli_once("replay", name, &seen)))
            break;
        if (kve_cli_engine_option(name, optarg, &engine, &rc))
            continue;
        switch (c) {
        case SEED: rc = kve_cli_parse_u64(name, optarg, UINT64_MAX, &o->sched.seed); break;
        case SEQ: rc = kve_cli_parse_u64(name, optarg, UINT64_MAX, &o->seq_id); break;
        case PROMPT: case TOKENS: case BUDGET: case WINDOW: case INTERVAL: case LAYERS:
        case HEADS: case LOFF: case HOFF:
            /* positions run 0 .. tokens - 1: within 2^31-1, as the library
             * holds them (refused up front, not at the round that passes) */
            rc = kve_cli_parse_u64(name, optarg, c <= TOKENS ? INT32_MAX : UINT32_MAX, &v);
            *u32[c - PROMPT] = (uint32_t)v;
            break;
        case SUMMARY: o->summary = 1; break;
        case HELP: fputs(kve_replay_usage, stdout); return -1;
        default: fputs(kve_replay_usage, stderr); return 2;
        }
    }
    if (!rc && optind < argc)
        rc = kve_cli_usage_error("replay: unexpected argument \"%s\" (see --help)", argv[optind]);
    if (!rc && o->tokens < o->prompt)
        rc = kve_cli_usage_error("replay: --tokens %u is below --prompt %u (the prompt counts)",
                                 o->tokens, o->prompt);
    return rc;
}

/* One replay: a one-row cache state and host copies of its tables. */
typedef struct {
    kve_context *ctx;
    kve_state *state;
    kve_state_layout lay;
    size_t table_len; /* elements of one row's tables */
    int32_t *before, *after;
    kve_coord *coords;
    uint64_t *elems;
    uint32_t *n_ev; /* evicted positions per table */
    int32_t *ev;    /* [tables][interval] */
} kve_replay;

static void kve_replay_free(kve_replay *r)
{
    kve_state_destroy(r->state);
    kve_context_destroy(r->ctx);
    free(r->before);
    free(r->after);
    free(r->coords);
    free(r->elems);
    free(r->n_ev);
    free(r->ev);
}

static int kve_i32_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The positions of each table that left between r->before and r->after
 * (the token appended in between is not in before, so it never counts). */
static size_t kve_replay_evicted(kve_replay *r, const kve_replay_opts *o)
{
    size_t tables = (size_t)r->lay.table_layers * r->lay.table_heads, total = 0;
    uint32_t ms = r->lay.max_slots, cap = o->sched.interval;
    for (size_t t = 0; t < tables; t++) {
        int32_t *b = r->before + t * ms, *a = r->after + t * ms;
        qsort(b, ms, 4, kve_i32_cmp);
        qsort(a, ms, 4, kve_i32_cmp);
        uint32_t n = 0, j = 0;
        for (uint32_t i = 0; i < ms; i++) {
            if (b[i] < 0)
                continue;
            while (j < ms && a[j] < b[i])
                j++;
            if ((j == ms || a[j] != b[i]) && n < cap)
                r->ev[t * cap + n++] = b[i];
        }
        r->n_ev[t] = n;
        total += n;
    }
    return total;
}

/* Wrapping sum of weight x element over the round's evicted tokens, the
 * elements computed on the replay's own backend (kve_keys). */
static kve_status kve_replay_round_digest(kve_replay *r, const kve_replay_opts *o, uint32_t round,
                                          uint64_t *out)
{
    uint32_t f = o->sched.flags, tl_n = r->lay.table_layers, th_n = r->lay.table_heads;
    uint32_t cap = o->sched.interval;
    size_t n = 0;
    for (uint32_t tl = 0; tl < tl_n; tl++)
        for (uint32_t th = 0; th < th_n; th++) {
            size_t t = (size_t)tl * th_n + th;
            for (uint32_t i = 0; i < r->n_ev[t]; i++)
                r->coords[n++] = (kve_coord){o->seq_id, o->layer_offset + tl, o->head_offset + th,
                                             (uint32_t)r->ev[t * cap + i], round};
        }
    *out = 0;
    if (n == 0)
        return KVE_OK;
    kve_status st = kve_cli_keys(r->ctx, o->sched.seed ^ KVE_RUN_DIGEST_TWEAK,
                                 f & ~(uint32_t)KVE_PERSISTENT, r->coords, n, r->elems);
    if (st != KVE_OK)
        return st;
    uint64_t w = 1, sum = 0;
    if (f & KVE_SHARED_HEADS)
        w *= o->heads;
    if (f & KVE_SHARED_LAYERS)
        w *= o->layers;
    for (size_t i = 0; i < n; i++)
        sum += w * r->elems[i];
    *out = sum;
    return KVE_OK;
}

static void kve_replay_print_round(const kve_replay *r, const kve_replay_opts *o, uint32_t round,
                                   uint64_t rd, uint64_t running)
{
    uint32_t f = o->sched.flags, cap = o->sched.interval;
    printf("{\"seq_id\":%llu,\"round\":%u,\"round_digest\":\"0x%016llx\","
           "\"running_digest\":\"0x%016llx\",\"heads\":[",
           (unsigned long long)o->seq_id, round, (unsigned long long)rd,
           (unsigned long long)running);
    for (uint32_t tl = 0; tl < r->lay.table_layers; tl++)
        for (uint32_t th = 0; th < r->lay.table_heads; th++) {
            size_t t = (size_t)tl * r->lay.table_heads + th;
            uint32_t layer = (f & KVE_SHARED_LAYERS) ? UINT32_MAX : o->layer_offset + tl;
            uint32_t head = (f & KVE_SHARED_HEADS) ? UINT32_MAX : o->head_offset + th;
            printf("%s{\"layer\":%u,\"head\":%u,\"evicted\":[", t ? "," : "", layer, head);
            for (uint32_t i = 0; i < r->n_ev[t]; i++)
                printf("%s%d", i ? "," : "", r->ev[t * cap + i]);
            printf("]}");
        }
    printf("]}\n");
}

static kve_status kve_replay_append(kve_replay *r, uint32_t n)
{
    uint32_t row = 0;
    return n ? kve_state_append(r->state, 1, &row, &n, NULL) : KVE_OK;
}

static int kve_replay_run(kve_replay *r, const kve_replay_opts *o)
{
    kve_state_desc d = {.schedule = o->sched, .max_seqs = 1, .n_layers = o->layers,
                        .n_heads = o->heads, .layer_offset = o->layer_offset,
                        .head_offset = o->head_offset};
    kve_status st = kve_schedule_capacity(&o->sched, o->prompt, &d.max_slots);
    if (st != KVE_OK)
        return kve_cli_fail("replay: schedule", st);
    int rc = kve_cli_context(o->backend, o->isa, o->threads, &r->ctx);
    if (rc)
        return rc;
    if ((st = kve_state_create(r->ctx, &d, NULL, 0, &r->state)) != KVE_OK ||
        (st = kve_state_get_layout(r->state, &r->lay)) != KVE_OK)
        return kve_cli_fail("replay: cache state", st);
    size_t tables = (size_t)r->lay.table_layers * r->lay.table_heads;
    r->table_len = tables * r->lay.max_slots;
    r->before = (int32_t *)malloc(r->table_len * 4);
    r->after = (int32_t *)malloc(r->table_len * 4);
    r->coords = (kve_coord *)malloc(tables * o->sched.interval * sizeof *r->coords);
    r->elems = (uint64_t *)malloc(tables * o->sched.interval * 8);
    r->n_ev = (uint32_t *)malloc(tables * 4);
    r->ev = (int32_t *)malloc(tables * o->sched.interval * 4);
    if (!r->before || !r->after || !r->coords || !r->elems || !r->n_ev || !r->ev)
        return kve_cli_usage_error("replay: out of memory for %zu slot tables of %u slots "
                                   "(%zu bytes each copy)",
                                   tables, r->lay.max_slots, r->table_len * 4);
    if ((st = kve_state_admit(r->state, 0, o->seq_id, o->prompt)) != KVE_OK)
        return kve_cli_fail("replay: admit", st);
    /* Fill the heads, then one token per round triggers it (SPEC §5: a token
     * that finds its heads full evicts first), with r - 1 tokens between. */
    uint32_t done = o->tokens < d.max_slots ? o->tokens : d.max_slots;
    if ((st = kve_replay_append(r, done)) != KVE_OK)
        return kve_cli_fail("replay: append", st);
    uint64_t running = 0;
    uint32_t round = 0;
    while (done < o->tokens) {
        if ((st = kve_state_read_slots(r->state, 0, r->before, r->table_len)) != KVE_OK ||
            (st = kve_replay_append(r, 1)) != KVE_OK ||
            (st = kve_state_read_slots(r->state, 0, r->after, r->table_len)) != KVE_OK)
            return kve_cli_fail("replay: round", st);
        done++;
        kve_replay_evicted(r, o);
        uint64_t rd;
        if ((st = kve_replay_round_digest(r, o, round, &rd)) != KVE_OK)
            return kve_cli_fail("replay: digest", st);
        running += rd;
        uint64_t backend_digest = 0;
        if ((st = kve_state_read_digest(r->state, 0, &backend_digest)) != KVE_OK)
            return kve_cli_fail("replay: digest", st);
        if (backend_digest != running) {
            fprintf(stderr,
                    "kvevict: replay: round %u: the cache state's running digest 0x%016llx "
                    "differs from the sum of its evictions' elements 0x%016llx (a bug: report "
                    "it with this command line)\n",
                    round, (unsigned long long)backend_digest, (unsigned long long)running);
            return 1;
        }
        if (!o->summary)
            kve_replay_print_round(r, o, round, rd, running);
        round++;
        uint32_t gap = o->sched.interval - 1, left = o->tokens - done;
        gap = gap < left ? gap : left;
        if ((st = kve_replay_append(r, gap)) != KVE_OK)
            return kve_cli_fail("replay: append", st);
        done += gap;
    }
    if (o->summary)
        printf("{\"seq_id\":%llu,\"rounds\":%u,\"running_digest\":\"0x%016llx\"}\n",
               (unsigned long long)o->seq_id, round, (unsigned long long)running);
    return 0;
}

int kve_cmd_replay(int argc, char **argv)
{
    kve_replay_opts o;
    int rc = kve_replay_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kve_replay r;
    memset(&r, 0, sizeof r);
    rc = kve_replay_run(&r, &o);
    kve_replay_free(&r);
    return rc;
}

/*
 * cmd_demo.c — `kvevict demo`: the A/B comparison a team runs before
 * adopting random eviction, on the G1 geometry through the engine path.
 * Each arm (full cache; TriAttention and K-norm scores, where the backend
 * scores; random; random with the prompt unpinned) decodes the
 * same tokens through its own cache state with slot reuse and kve_cache_write
 * (demo_run.c); the end is one table (memory held against the full cache,
 * rounds, time per round, keep-set digest, the cache contents checked) and
 * an HTML report with its figures (demo_report.c).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"
#include "demo_scored.h"

static const char kve_demo_usage[] =
    "usage: kvevict demo [options]\n"
    "The A/B arms of one decode through the engine path (cache state, slot reuse, cache\n"
    "writes with moves) on the default backend, G1 geometry by default: Qwen3-4B-like,\n"
    "36 layers x 8 KV heads, bf16 x 128 entries, P=1024, B=2048, W=r=64. Arms:\n"
    "  full          no compression (a budget the run never reaches)\n"
    "  triattention  TriAttention's scores select (a synthetic calibration: the demo's\n"
    "                model is synthetic too)\n"
    "  knorm         K-norm scores select (the smallest key norms kept)\n"
    "  random        random eviction, the prompt pinned\n"
    "  random-p0     random eviction, prompt length 0 at admission (nothing pinned)\n"
    "Ends with a table and writes an HTML report with SVG figures (keep map, survival\n"
    "by position against the uniform expectation, memory held, per-round cost).\n"
    "  --arms LIST      comma-separated arms (default: all; the scored ones only where the\n"
    "                   backend scores)\n"
    "  --report FILE    the HTML report (default kvevict-demo.html); --no-report: none\n"
    "  --json FILE      the run's numbers as JSON (the report embeds the same)\n"
    "  --steps N        tokens to generate (default 4096, >= 1)\n"
    "  --layers L       layers (default 36)      --heads H     KV heads (default 8)\n"
    "  --prompt P       prompt tokens (default 1024)\n"
    "  --budget B       kept tokens per head (default 2048)\n"
    "  --window W       protected recent tokens (default 64)\n"
    "  --interval R     tokens between evictions (default 64)\n"
    "  --entry-bytes E  bytes per K or V entry (default 256 = 128 x bf16; a multiple of 4, >= 8)\n"
    "  --map-heads N    slot tables in each keep map (default 4, 1..8)\n"
    "  --seed S         seed (default 1)\n"
    "  --persistent     persistent keys   --shared-heads  one keep-set per layer\n"
    "  --backend NAME   auto, cpu, cuda, hip (default auto)\n"
    "  --threads N      CPU threads, 1 to 1024 (default: OpenMP's)\n"
    "  --no-progress    no progress bar even on a terminal\n";

static const char *const kve_arm_names[KVE_N_ARMS] = {"full", "triattention", "knorm", "random",
                                                      "random-p0"};

/* One item of --arms (kve_cli_parse_list): an arm's name. */
static int kve_demo_arm_item(void *arg, const char *name)
{
    kve_demo_opts *o = (kve_demo_opts *)arg;
    for (int a = 0; a < KVE_N_ARMS; a++)
        if (!strcmp(name, kve_arm_names[a])) {
            o->arms[a] = 1;
            o->arms_given = 1;
            return 0;
        }
    return kve_cli_usage_error("demo: --arms: unknown arm \"%s\" (full, triattention, knorm, "
                               "random, random-p0)",
                               name);
}

static int kve_demo_parse_arms(const char *list, kve_demo_opts *o)
{
    memset(o->arms, 0, sizeof o->arms);
    return kve_cli_parse_list("demo", "--arms", list, kve_demo_arm_item, o);
}

static int kve_demo_parse_flag(int idx, kve_demo_opts *o)
{
    int rc = 0;
    switch (idx) {
    case 8: rc = kve_cli_parse_u64("entry-bytes", optarg, 1 << 16, &o->entry); break;
    case 9: rc = kve_cli_parse_u64("seed", optarg, UINT64_MAX, &o->seed); break;
    case 10: rc = kve_cli_parse_threads(optarg, &o->threads); break;
    case 11: o->backend = optarg; break;
    case 12: o->flags |= KVE_PERSISTENT; break;
    case 13: o->flags |= KVE_SHARED_HEADS; break;
    case 14: o->progress = 0; break;
    case 15: rc = kve_demo_parse_arms(optarg, o); break;
    case 16: o->report = optarg; break;
    case 17: o->report = NULL; break;
    case 18: o->json = optarg; break;
    default: fputs(kve_demo_usage, stdout); return -1;
    }
    return rc;
}

static int kve_demo_parse(int argc, char **argv, kve_demo_opts *o)
{
    static const struct option opts[] = {
        {"steps", required_argument, 0, 0},   {"layers", required_argument, 0, 0},
        {"heads", required_argument, 0, 0},   {"prompt", required_argument, 0, 0},
        {"budget", required_argument, 0, 0},  {"window", required_argument, 0, 0},
        {"interval", required_argument, 0, 0}, {"map-heads", required_argument, 0, 0},
        {"entry-bytes", required_argument, 0, 0}, {"seed", required_argument, 0, 0},
        {"threads", required_argument, 0, 0}, {"backend", required_argument, 0, 0},
        {"persistent", no_argument, 0, 0},    {"shared-heads", no_argument, 0, 0},
        {"no-progress", no_argument, 0, 0},   {"arms", required_argument, 0, 0},
        {"report", required_argument, 0, 0},  {"no-report", no_argument, 0, 0},
        {"json", required_argument, 0, 0},    {"help", no_argument, 0, 0},
        {0, 0, 0, 0}};
    *o = (kve_demo_opts){36, 8, 1024, 2048, 64, 64, 4096, 4, 256, 1, 0, 0, 1, {1, 1, 1, 1, 1}, 0,
                         "auto", "kvevict-demo.html", NULL};
    uint32_t *u32[] = {&o->steps, &o->layers, &o->heads, &o->prompt, &o->budget, &o->window,
                       &o->interval, &o->map_heads};
    static const uint64_t max32[] = {1u << 24, 4096, 4096, 1u << 24, 1u << 24, 1u << 24, 1u << 24,
                                     KVE_DEMO_MAP_HEADS_MAX};
    int idx, c;
    uint64_t v;
    kve_cli_seen seen = {{0}, 0};
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != 0) {
            fputs(kve_demo_usage, stderr);
            return 2;
        }
        /* --report and --no-report are one choice, made once. */
        const char *name = idx == 17 ? "report" : opts[idx].name;
        int rc = kve_cli_once("demo", name, &seen);
        if (rc)
            return rc;
        if (idx < 8) {
            rc = kve_cli_parse_u64(opts[idx].name, optarg, max32[idx], &v);
            *u32[idx] = (uint32_t)v;
        } else {
            rc = kve_demo_parse_flag(idx, o);
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return kve_cli_usage_error("demo: unexpected argument \"%s\"", argv[optind]);
    if (o->entry < 8 || o->entry % 4)
        return kve_cli_usage_error("demo: --entry-bytes %llu: a multiple of 4 (bf16 pairs), at "
                                   "least 8", (unsigned long long)o->entry);
    if (o->interval == 0 || o->layers == 0 || o->heads == 0 || o->steps == 0 || o->map_heads == 0)
        return kve_cli_usage_error("demo: --steps, --interval, --layers, --heads and --map-heads "
                                   "must be >= 1");
    if (o->map_heads > (uint64_t)o->layers * o->heads || (o->flags & KVE_SHARED_HEADS && o->map_heads > o->layers))
        return kve_cli_usage_error("demo: --map-heads %u: more than the slot tables", o->map_heads);
    return 0;
}

/* The table's columns, in words (printed under it, here and in the report). */
static const char kve_demo_legend[] =
    "pinned: prompt tokens the arm never evicts; rounds: evictions run; held/head: tokens a\n"
    "head holds at the end, peak: the most it held; of full: the peak against the full\n"
    "cache (P + tokens generated); ms/round: mean time to choose a round's evictions,\n"
    "choose ms: all rounds' (scoring included); keep-set digest: docs/SPEC.md's digest of\n"
    "the final keep-sets; cache: every kept K/V entry checked in its slot. P: prompt\n"
    "tokens, B: budget (tokens a head keeps), W: recent tokens never evicted, r: tokens\n"
    "between evictions.\n";

void kve_demo_print_table(FILE *f, const kve_demo_opts *o, const kve_demo_arm *arms, int n_arms)
{
    fprintf(f, "%-13s %6s %6s %10s %9s %9s %10s %10s  %-18s  %s\n", "arm", "pinned", "rounds",
            "held/head", "peak", "of full", "ms/round", "choose ms", "keep-set digest", "cache");
    for (int i = 0; i < n_arms; i++) {
        const kve_demo_arm *a = &arms[i];
        char per_round[32] = "-";
        if (a->rounds)
            snprintf(per_round, sizeof per_round, "%.3f", kve_demo_ms_per_round(a));
        fprintf(f, "%-13s %6u %6u %10u %9u %8.1f%% %10s %10.3f  0x%016llx  %s\n", a->name,
                a->prompt_len, a->rounds, a->held[o->steps], a->held_peak,
                100.0 * a->held_peak / (o->prompt + o->steps), per_round, 1e3 * a->choose_s,
                (unsigned long long)a->digest, a->bad ? "CORRUPT" : "verified");
    }
    fputs(kve_demo_legend, f);
}

static void kve_demo_header(kve_context *ctx, const kve_demo_opts *o, char *backend, size_t len)
{
    kve_backend be;
    kve_cpu_isa isa;
    int threads;
    kve_context_get_backend(ctx, &be);
    kve_context_get_cpu_isa(ctx, &isa);
    kve_context_get_threads(ctx, &threads);
    if (be == KVE_BACKEND_CPU)
        snprintf(backend, len, "cpu (%s, %d threads)", kve_cpu_isa_name(isa), threads);
    else
        snprintf(backend, len, "%s", kve_backend_name(be));
    printf("kvevict demo: %u layers x %u KV heads, %llu-byte K and V entries, P=%u B=%u W=%u "
           "r=%u, %u generated tokens\nbackend: %s\n",
           o->layers, o->heads, (unsigned long long)o->entry, o->prompt, o->budget, o->window,
           o->interval, o->steps, backend);
}

int kve_cmd_demo(int argc, char **argv)
{
    kve_demo_opts o;
    int rc = kve_demo_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.progress = o.progress && isatty(STDOUT_FILENO);
    /* The files are checked before the run, not after minutes of it: each
     * is opened for appending (created when missing, nothing truncated). */
    const char *outputs[2][2] = {{"--report", o.report}, {"--json", o.json}};
    for (int i = 0; i < 2; i++) {
        if (!outputs[i][1])
            continue;
        int existed = access(outputs[i][1], F_OK) == 0;
        FILE *probe = fopen(outputs[i][1], "a");
        if (!probe)
            return kve_cli_usage_error("demo: %s %s: cannot write the file: %s", outputs[i][0],
                                       outputs[i][1], strerror(errno));
        fclose(probe);
        if (!existed)
            remove(outputs[i][1]);
    }
    kve_context *ctx = NULL;
    if ((rc = kve_cli_context(o.backend, NULL, o.threads, &ctx)))
        return rc;
    char backend[96];
    kve_demo_header(ctx, &o, backend, sizeof backend);
    const char *why = "scored selection excludes persistent keys (docs/SPEC.md)";
    if ((o.arms[KVE_ARM_TRI] || o.arms[KVE_ARM_KNORM]) &&
        ((o.flags & KVE_PERSISTENT) || !kve_demo_scored_available(ctx, &why))) {
        if (o.arms_given) {
            kve_context_destroy(ctx);
            return kve_cli_usage_error("demo: --arms: no scored arm here: %s", why);
        }
        printf("(no triattention and knorm arms: %s)\n", why);
        o.arms[KVE_ARM_TRI] = o.arms[KVE_ARM_KNORM] = 0;
    }
    kve_demo_arm arms[KVE_N_ARMS];
    int n_arms = 0, total = 0, bad = 0;
    for (int a = 0; a < KVE_N_ARMS; a++)
        total += o.arms[a];
    for (int a = 0; a < KVE_N_ARMS && !rc; a++) {
        if (!o.arms[a])
            continue;
        rc = kve_demo_run_arm(ctx, &o, (kve_arm_kind)a, &arms[n_arms], n_arms, total);
        bad |= arms[n_arms].bad != 0;
        n_arms++;
    }
    if (!rc) {
        kve_demo_print_table(stdout, &o, arms, n_arms);
        if (bad)
            printf("CORRUPT: some valid slots do not hold their token's K/V bytes\n");
        else
            printf("cache contents verified: every kept entry in its slot, in every arm\n");
    }
    if (!rc && o.json) {
        FILE *f = fopen(o.json, "w");
        if (f)
            kve_demo_write_json(f, &o, backend, arms, n_arms);
        if (!f || fclose(f))
            rc = kve_cli_usage_error("demo: --json %s: cannot write the file", o.json);
    }
    if (!rc && o.report) {
        if (kve_demo_write_report(o.report, &o, backend, arms, n_arms))
            rc = kve_cli_usage_error("demo: --report %s: cannot write the file", o.report);
        else
            printf("report: %s\n", o.report);
    }
    for (int i = 0; i < n_arms; i++)
        kve_demo_arm_free(&arms[i]);
    kve_context_destroy(ctx);
    return rc ? rc : bad ? 1 : 0;
}

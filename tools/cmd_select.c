/* cmd_select.c — `kvevict select`, `kvevict key` and `kvevict digest`. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define KVE_CONFIG_OPTIONS                                                                       \
    "  --seed S            the caller's seed (u64, decimal or 0x-hex; default 2609)\n"            \
    "  --seq-id ID         the request id (u64; default 0)\n"                                     \
    "  --layers L          layers in this call (default 36)\n"                                    \
    "  --heads H           KV heads per layer (default 8)\n"                                      \
    "  --layer-offset LO   global index of layer 0 (default 0)\n"                                 \
    "  --head-offset HO    global index of head 0 (default 0)\n"                                  \
    "  --prompt P          prompt length: positions < P are never evicted (default 1024)\n"       \
    "  --window W          most recent generated tokens never evicted (default 64)\n"             \
    "  --budget B          tokens kept per head, prompt included (default 2048)\n"                \
    "  --round R           evictions this sequence has had (default 0)\n"                         \
    "  --cached N          slots per head; slot i holds position i (default 2112)\n"              \
    "  --slots-stdin       read slot tables as JSON from stdin instead: one array of\n"           \
    "                      positions (-1 = empty) for every head, or L*H arrays\n"                \
    "  --persistent        one key per token for life (round ignored)\n"                          \
    "  --shared-heads      one keep-set per layer\n"                                              \
    "  --shared-layers     one keep-set across layers\n"                                          \
    "  --isa NAME          CPU ISA: auto, scalar, avx2, avx512 (default auto)\n"                  \
    "  --threads N         CPU threads, 1 to 1024 (default: OpenMP's)\n"                          \
    "The defaults are G1 of docs/GPU.md: 36 layers x 8 KV heads of 2112 slots, 64 of\n"          \
    "whose 1024 candidates each head evicts.\n"

static const char kve_select_usage[] =
    "usage: kvevict select [options]\n"
    "Evict for one configuration and print, per head, one JSON line:\n"
    "  {\"seq_id\":..,\"layer\":..,\"head\":..,\"evict\":[slots],\"keep\":[slots],"
    "\"over_budget\":bool}\n"
    "with global layer/head indices and slots ascending.\n" KVE_CONFIG_OPTIONS
    "  --backend NAME      auto, cpu, cuda, hip (default auto)\n";

static void kve_print_list(const int32_t *v, uint32_t n)
{
    putchar('[');
    for (uint32_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", v[i]);
    putchar(']');
}

int kve_cmd_select(int argc, char **argv)
{
    kve_cli_config cfg;
    int rc = kve_cli_parse_config(argc, argv, "select", kve_select_usage, "auto", &cfg);
    if (rc)
        return rc < 0 ? 0 : rc;
    kve_context *ctx = NULL;
    rc = kve_cli_context(cfg.backend, cfg.isa, cfg.threads, &ctx);
    kve_cli_result r;
    kve_status st = rc ? KVE_OK : kve_cli_evict(ctx, &cfg, &r);
    if (!rc && st != KVE_OK)
        rc = kve_cli_fail("select", st);
    if (!rc) {
        for (uint32_t l = 0, i = 0; l < cfg.layers; l++)
            for (uint32_t h = 0; h < cfg.heads; h++, i++) {
                printf("{\"seq_id\":%llu,\"layer\":%u,\"head\":%u,\"evict\":",
                       (unsigned long long)cfg.seq_id, cfg.layer_offset + l, cfg.head_offset + h);
                kve_print_list(r.evicted + (size_t)i * r.evicted_stride, r.n_evicted[i]);
                fputs(",\"keep\":", stdout);
                kve_print_list(r.kept + (size_t)i * r.kept_stride, r.n_kept[i]);
                printf(",\"over_budget\":%s}\n",
                       (r.head_flags[i] & KVE_HEAD_OVER_BUDGET) ? "true" : "false");
            }
        kve_cli_result_free(&r);
    }
    kve_context_destroy(ctx);
    kve_cli_config_free(&cfg);
    return rc;
}

static const char kve_key_usage[] =
    "usage: kvevict key [options] --pos P [--pos P2 ...]\n"
    "Print the spec's key for coordinates, one JSON line per position:\n"
    "  {\"seq_id\":..,\"layer\":..,\"head\":..,\"pos\":..,\"round\":..,\"key\":\"0x..\"}\n"
    "(the 64-bit key as a hex string, exact in any JSON reader).\n"
    "  --seed S  --seq-id ID  --layer L  --head H  --round R  (default 0)\n"
    "  --pos P               a position, or a comma-separated list (repeatable)\n"
    "  --persistent  --shared-heads  --shared-layers   mode switches\n"
    "  --backend NAME        auto, cpu, cuda, hip (default auto)\n";

/* The positions --pos gave so far. */
typedef struct {
    uint32_t *pos;
    size_t n, cap;
} kve_key_positions;

/* One item of a --pos list (kve_cli_parse_list). */
static int kve_key_add_pos(void *arg, const char *text)
{
    kve_key_positions *k = (kve_key_positions *)arg;
    uint64_t v;
    int rc = kve_cli_parse_u64("pos", text, UINT32_MAX, &v);
    if (rc)
        return rc;
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        uint32_t *grown = (uint32_t *)realloc(k->pos, cap * sizeof *grown);
        if (!grown)
            return kve_cli_usage_error("key: KVE_ERR_NOMEM: cannot allocate %zu bytes for the "
                                       "positions",
                                       cap * sizeof *grown);
        k->pos = grown;
        k->cap = cap;
    }
    k->pos[k->n++] = (uint32_t)v;
    return 0;
}

int kve_cmd_key(int argc, char **argv)
{
    static const struct option opts[] = {
        {"seed", required_argument, 0, 's'},   {"seq-id", required_argument, 0, 'q'},
        {"layer", required_argument, 0, 'l'},  {"head", required_argument, 0, 'h'},
        {"round", required_argument, 0, 'r'},  {"pos", required_argument, 0, 'p'},
        {"persistent", no_argument, 0, 'P'},   {"shared-heads", no_argument, 0, 'H'},
        {"shared-layers", no_argument, 0, 'L'}, {"backend", required_argument, 0, 'b'},
        {"help", no_argument, 0, '?' + 256},   {0, 0, 0, 0}};
    uint64_t seed = 0, seq = 0, v;
    uint32_t layer = 0, head = 0, round = 0, flags = 0;
    const char *backend = "auto";
    kve_key_positions k = {NULL, 0, 0};
    int c, idx = 0, rc = 0;
    kve_cli_seen seen = {{0}, 0};
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != '?' && c != 'p' && (rc = kve_cli_once("key", opts[idx].name, &seen)))
            break;
        switch (c) {
        case 's': rc = kve_cli_parse_u64("seed", optarg, UINT64_MAX, &seed); break;
        case 'q': rc = kve_cli_parse_u64("seq-id", optarg, UINT64_MAX, &seq); break;
        case 'l': rc = kve_cli_parse_u64("layer", optarg, UINT32_MAX, &v); layer = (uint32_t)v; break;
        case 'h': rc = kve_cli_parse_u64("head", optarg, UINT32_MAX, &v); head = (uint32_t)v; break;
        case 'r': rc = kve_cli_parse_u64("round", optarg, UINT32_MAX, &v); round = (uint32_t)v; break;
        case 'P': flags |= KVE_PERSISTENT; break;
        case 'H': flags |= KVE_SHARED_HEADS; break;
        case 'L': flags |= KVE_SHARED_LAYERS; break;
        case 'b': backend = optarg; break;
        case 'p': rc = kve_cli_parse_list("key", "--pos", optarg, kve_key_add_pos, &k); break;
        case '?' + 256: fputs(kve_key_usage, stdout); free(k.pos); return 0;
        default: fputs(kve_key_usage, stderr); rc = 2;
        }
    }
    if (!rc && optind < argc)
        rc = kve_cli_usage_error("key: unexpected argument \"%s\"", argv[optind]);
    if (!rc && k.n == 0)
        rc = kve_cli_usage_error("key: give at least one --pos");
    kve_context *ctx = NULL;
    if (!rc)
        rc = kve_cli_context(backend, NULL, 0, &ctx);
    kve_coord *coords = rc ? NULL : (kve_coord *)kve_cli_malloc("the coordinates", k.n, sizeof *coords);
    uint64_t *keys = rc || !coords ? NULL : (uint64_t *)kve_cli_malloc("the keys", k.n, sizeof *keys);
    if (!rc && !keys)
        rc = kve_cli_fail("key", KVE_ERR_NOMEM);
    if (!rc) {
        for (size_t i = 0; i < k.n; i++)
            coords[i] = (kve_coord){seq, layer, head, k.pos[i], round};
        kve_status st = kve_cli_keys(ctx, seed, flags, coords, k.n, keys);
        if (st != KVE_OK)
            rc = kve_cli_fail("key", st);
        for (size_t i = 0; !rc && i < k.n; i++)
            printf("{\"seq_id\":%llu,\"layer\":%u,\"head\":%u,\"pos\":%u,\"round\":%u,"
                   "\"key\":\"0x%016llx\"}\n",
                   (unsigned long long)seq, layer, head, k.pos[i], round,
                   (unsigned long long)keys[i]);
    }
    free(coords);
    free(keys);
    free(k.pos);
    kve_context_destroy(ctx);
    return rc;
}

static const char kve_digest_usage[] =
    "usage: kvevict digest [options]\n"
    "Evict for one configuration on one or every backend and print each one's\n"
    "digest of the keep-sets (docs/SPEC.md \"Digest\"), then `digest=0x...` when\n"
    "all agree (exit 0) or MISMATCH (exit 1). The first line gives the configuration\n"
    "hashed (as options), the line before the last the slots evicted and kept, with a\n"
    "warning when nothing was evicted.\n" KVE_CONFIG_OPTIONS
    "  --backend NAME      all (every available backend, every CPU ISA and 1 and 2\n"
    "                      threads), auto, cpu, cuda or hip (default all)\n"
    "  --require LIST      with all: comma-separated backends (cpu, cuda, hip) that\n"
    "                      must have run; one that is not available here fails the\n"
    "                      command (exit 3) with its reason, instead of agreeing\n"
    "                      without it. Backends skipped by all are listed on stderr.\n";

/* Whether @p name is in the comma-separated @p list. */
static int kve_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* One item of --require (kve_cli_parse_list): a backend's name. */
static int kve_require_item(void *arg, const char *name)
{
    kve_backend b = KVE_BACKEND_AUTO; /* the library's names, lower case: not "auto" */
    if (kve_backend_from_name(name, &b) == KVE_OK && b != KVE_BACKEND_AUTO &&
        !strcmp(name, kve_backend_name(b)))
        return 0;
    return kve_cli_usage_error("digest: --require %s: expected cpu, cuda or hip, comma-separated",
                               (const char *)arg);
}

/* Checks --require's names; 0 or an exit code. */
static int kve_check_require(const kve_cli_config *cfg)
{
    if (cfg->require) {
        int rc = kve_cli_parse_list("digest", "--require", cfg->require, kve_require_item,
                                    (void *)cfg->require);
        if (rc)
            return rc;
    }
    if (cfg->require && strcmp(cfg->backend, "all") != 0)
        return kve_cli_usage_error("digest: --require goes with --backend all");
    return 0;
}

/* The configuration a digest hashed, as the options that repeat it. */
static void kve_digest_print_config(const kve_cli_config *cfg)
{
    printf("configuration: --seed %llu --seq-id %llu --layers %u --heads %u --layer-offset %u "
           "--head-offset %u --prompt %u --window %u --budget %u --round %u",
           (unsigned long long)cfg->seed, (unsigned long long)cfg->seq_id, cfg->layers,
           cfg->heads, cfg->layer_offset, cfg->head_offset, cfg->prompt, cfg->window,
           cfg->budget, cfg->round);
    if (cfg->slots_stdin)
        printf(" --slots-stdin (%u slots a head)", cfg->n_slots);
    else
        printf(" --cached %u", cfg->n_slots);
    static const struct {
        uint32_t flag;
        const char *name;
    } switches[] = {{KVE_PERSISTENT, "persistent"},
                    {KVE_SHARED_HEADS, "shared-heads"},
                    {KVE_SHARED_LAYERS, "shared-layers"}};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++)
        if (cfg->flags & switches[i].flag)
            printf(" --%s", switches[i].name);
    putchar('\n');
}

/* What the eviction hashed did: evicted and kept slots over every head, and
 * a warning when nothing was evicted (the digest then checks no choice). */
static void kve_digest_print_counts(const kve_cli_config *cfg, uint64_t evicted, uint64_t kept)
{
    uint64_t heads = (uint64_t)cfg->layers * cfg->heads;
    printf("evicted %llu and kept %llu slots over %llu heads\n", (unsigned long long)evicted,
           (unsigned long long)kept, (unsigned long long)heads);
    if (evicted == 0)
        printf("nothing was evicted: no head holds more than --budget %u tokens, so this digest "
               "checks no random choice (give --cached above the budget)\n",
               cfg->budget);
}

/* Digest of one backend's eviction of cfg; 0 or an exit code. @p counts
 * gets the evicted and kept slots over every head. */
static int kve_digest_one(const kve_cli_config *cfg, const char *backend, const char *isa,
                          int threads, uint64_t *out, uint64_t counts[2])
{
    kve_context *ctx = NULL;
    int rc = kve_cli_context(backend, isa, threads, &ctx);
    if (rc)
        return rc;
    kve_cli_result r;
    kve_status st = kve_cli_evict(ctx, cfg, &r);
    if (st == KVE_OK) {
        /* The digest runs on the host's copy, through a CPU context. */
        kve_context *host = NULL;
        st = kve_context_create(KVE_BACKEND_CPU, &host);
        kve_seq seq = {cfg->seq_id, cfg->prompt, cfg->round};
        kve_batch b = kve_cli_batch(cfg, &seq, cfg->slot_pos);
        kve_evict_out o = {.evicted = r.evicted, .evicted_stride = r.evicted_stride,
                           .n_evicted = r.n_evicted, .n_kept = r.n_kept};
        if (st == KVE_OK)
            st = kve_digest(host, &b, &o, out);
        counts[0] = counts[1] = 0;
        for (size_t h = 0; h < (size_t)cfg->layers * cfg->heads; h++) {
            counts[0] += r.n_evicted[h];
            counts[1] += r.n_kept[h];
        }
        kve_context_destroy(host);
        kve_cli_result_free(&r);
    }
    kve_context_destroy(ctx);
    return st == KVE_OK ? 0 : kve_cli_fail("digest", st);
}

int kve_cmd_digest(int argc, char **argv)
{
    kve_cli_config cfg;
    int rc = kve_cli_parse_config(argc, argv, "digest", kve_digest_usage, "all", &cfg);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc = kve_check_require(&cfg);
    if (rc) {
        kve_cli_config_free(&cfg);
        return rc;
    }
    int all = strcmp(cfg.backend, "all") == 0;
    uint64_t first = 0, d, counts[2] = {0, 0};
    int count = 0, mismatch = 0;
    kve_digest_print_config(&cfg);
    if (!all) {
        rc = kve_digest_one(&cfg, cfg.backend, cfg.isa, cfg.threads, &first, counts);
        if (!rc)
            printf("%s digest=0x%016llx\n", cfg.backend, (unsigned long long)first);
        count = 1;
    }
    static const kve_backend backends[] = {KVE_BACKEND_CPU, KVE_BACKEND_CUDA, KVE_BACKEND_HIP};
    for (size_t b = 0; all && !rc && b < sizeof backends / sizeof backends[0]; b++) {
        int avail = 0;
        kve_backend_available(backends[b], &avail);
        const char *name = kve_backend_name(backends[b]);
        if (!avail) {
            /* Said, not silent: the context the backend refuses gives the reason. */
            kve_context *none = NULL;
            kve_context_create(backends[b], &none);
            kve_context_destroy(none);
            fprintf(stderr, "%s skipped: %s\n", name, kve_last_error());
            if (cfg.require && kve_listed(cfg.require, name)) {
                fprintf(stderr, "kvevict: digest: --require %s: %s did not run\n", cfg.require,
                        name);
                rc = 3;
            }
            continue;
        }
        if (backends[b] != KVE_BACKEND_CPU) {
            rc = kve_digest_one(&cfg, name, NULL, 0, &d, counts);
            if (!rc)
                printf("%s digest=0x%016llx\n", name, (unsigned long long)d);
            mismatch |= count++ && d != first;
            first = count == 1 ? d : first;
            continue;
        }
        for (int isa = KVE_CPU_ISA_SCALAR; !rc && isa <= KVE_CPU_ISA_AVX512; isa++) {
            kve_cpu_isa_available((kve_cpu_isa)isa, &avail);
            for (int threads = 1; avail && !rc && threads <= 2; threads++) {
                const char *isa_name = kve_cpu_isa_name((kve_cpu_isa)isa);
                rc = kve_digest_one(&cfg, name, isa_name, threads, &d, counts);
                if (rc)
                    break;
                printf("%s/%s/%dt digest=0x%016llx\n", name, isa_name, threads,
                       (unsigned long long)d);
                mismatch |= count++ && d != first;
                first = count == 1 ? d : first;
            }
        }
    }
    if (!rc) {
        kve_digest_print_counts(&cfg, counts[0], counts[1]);
        if (mismatch)
            puts("MISMATCH");
        else
            printf("digest=0x%016llx\n", (unsigned long long)first);
        rc = mismatch;
    }
    kve_cli_config_free(&cfg);
    return rc;
}

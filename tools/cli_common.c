/* cli_common.c — option parsing, slot tables and host<->backend plumbing. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The CLI's own allocation failures: the library's kve_last_error() does
 * not see them, so kve_cli_fail prints this message instead. */
static char kve_cli_nomem_message[256];

void *kve_cli_malloc(const char *item, size_t count, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes)) {
        snprintf(kve_cli_nomem_message, sizeof kve_cli_nomem_message,
                 "cannot allocate %s: %zu x %zu bytes overflows size_t", item, count, size);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        snprintf(kve_cli_nomem_message, sizeof kve_cli_nomem_message,
                 "cannot allocate %zu bytes of host memory for %s", bytes, item);
    return p;
}

int kve_cli_fail(const char *what, kve_status st)
{
    const char *msg = st == KVE_ERR_NOMEM && kve_cli_nomem_message[0] ? kve_cli_nomem_message
                                                                      : kve_last_error();
    fprintf(stderr, "kvevict: %s: %s: %s\n", what, kve_status_string(st), msg);
    return 2;
}

int kve_cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kvevict: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    return 2;
}

int kve_cli_parse_u64(const char *opt, const char *text, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    if (!text || !*text || *text == '-' || isspace((unsigned char)*text))
        return kve_cli_usage_error("--%s \"%s\": expected an unsigned integer", opt,
                                   text ? text : "");
    unsigned long long v = strtoull(text, &end, 0);
    if (errno || *end || v > max)
        return kve_cli_usage_error("--%s \"%s\": expected an unsigned integer <= %llu", opt, text,
                                   (unsigned long long)max);
    *out = v;
    return 0;
}

int kve_cli_once(const char *cmd, const char *name, kve_cli_seen *seen)
{
    for (int i = 0; i < seen->n; i++)
        if (!strcmp(seen->names[i], name))
            return kve_cli_usage_error("%s: --%s given twice", cmd, name);
    if (seen->n < (int)(sizeof seen->names / sizeof seen->names[0]))
        seen->names[seen->n++] = name;
    return 0;
}

int kve_cli_parse_list(const char *cmd, const char *opt, const char *text,
                       int (*item)(void *arg, const char *item), void *arg)
{
    size_t n = 1;
    for (const char *p = text;; n++) {
        size_t len = strcspn(p, ",");
        if (len == 0)
            return kve_cli_usage_error("%s: %s \"%s\": empty item %zu (a comma-separated list "
                                       "has none)",
                                       cmd, opt, text, n);
        if (!p[len])
            break;
        p += len + 1;
    }
    char *copy = strdup(text);
    if (!copy)
        return kve_cli_usage_error("%s: %s: KVE_ERR_NOMEM: cannot copy the list", cmd, opt);
    int rc = 0;
    for (char *p = copy; !rc && p;) {
        char *end = strchr(p, ',');
        if (end)
            *end++ = '\0';
        rc = item(arg, p);
        p = end;
    }
    free(copy);
    return rc;
}

int kve_cli_parse_threads(const char *text, int *out)
{
    uint64_t v = 0;
    int rc = kve_cli_parse_u64("threads", text, 1024, &v);
    if (!rc && v == 0)
        rc = kve_cli_usage_error("--threads 0: expected 1 to 1024 (leave --threads out for "
                                 "OpenMP's default)");
    if (!rc)
        *out = (int)v;
    return rc;
}

int kve_cli_engine_option(const char *name, const char *arg, const kve_cli_engine *e, int *rc)
{
    static const struct {
        const char *name;
        uint32_t flag;
    } flags[] = {{"persistent", KVE_PERSISTENT},
                 {"shared-heads", KVE_SHARED_HEADS},
                 {"shared-layers", KVE_SHARED_LAYERS}};
    *rc = 0;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(name, flags[i].name)) {
            *e->flags |= flags[i].flag;
            return 1;
        }
    if (!strcmp(name, "backend"))
        *e->backend = arg;
    else if (!strcmp(name, "isa"))
        *e->isa = arg;
    else if (!strcmp(name, "threads"))
        *rc = kve_cli_parse_threads(arg, e->threads);
    else
        return 0;
    return 1;
}

/* ---- JSON slot tables: an array of ints, or an array of arrays ---------- */

typedef struct {
    const char *p;
    size_t nomem_bytes; /* a failed growth of the table buffer, or 0 */
    const char *bad;    /* where the text stopped making sense, or NULL */
    char want[96];      /* what was expected there */
} kve_json;

/* Records the first malformed place, at the current position; returns -1. */
static long kve_json_fail(kve_json *j, const char *want)
{
    if (!j->bad) {
        j->bad = j->p;
        snprintf(j->want, sizeof j->want, "%s", want);
    }
    return -1;
}

static void kve_json_ws(kve_json *j)
{
    while (isspace((unsigned char)*j->p))
        j->p++;
}

/* Parses "[int, ...]" into a growing buffer; returns count or -1. */
static long kve_json_int_array(kve_json *j, int32_t **buf, size_t *cap, size_t *len)
{
    kve_json_ws(j);
    if (*j->p != '[')
        return kve_json_fail(j, "'[' (a slot table)");
    j->p++;
    long count = 0;
    kve_json_ws(j);
    if (*j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        kve_json_ws(j);
        char *end;
        errno = 0;
        long long v = strtoll(j->p, &end, 10);
        if (end == j->p)
            return kve_json_fail(j, "an integer position");
        if (errno || v < INT32_MIN || v > INT32_MAX)
            return kve_json_fail(j, "a position that fits in int32");
        j->p = end;
        if (*len == *cap) {
            *cap = *cap ? *cap * 2 : 1024;
            int32_t *grown = (int32_t *)realloc(*buf, *cap * sizeof **buf);
            if (!grown) {
                j->nomem_bytes = *cap * sizeof **buf;
                return -1;
            }
            *buf = grown;
        }
        (*buf)[(*len)++] = (int32_t)v;
        count++;
        kve_json_ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == ']') {
            j->p++;
            return count;
        }
        return kve_json_fail(j, "',' or ']'");
    }
}

/* All of stdin as a string; NULL (message printed) when it cannot be held. */
static char *kve_cli_read_all_stdin(void)
{
    size_t cap = 1 << 16, n = 0, got;
    char *text = (char *)malloc(cap);
    while (text && (got = fread(text + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *grown = (char *)realloc(text, cap *= 2);
            if (!grown)
                free(text);
            text = grown;
        }
    }
    if (!text) {
        kve_cli_usage_error("KVE_ERR_NOMEM: cannot allocate %zu bytes to read stdin", cap);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* "[[...], [...], ...]": one table per head, all of one width. Returns the
 * width, -1 when malformed, or -2 (message printed) for a wrong count. */
static long kve_json_tables(kve_json *j, size_t heads, int32_t **buf)
{
    size_t cap = 0, len = 0, rows = 0;
    long width = -1;
    j->p++; /* the outer '[' */
    for (;;) {
        kve_json_ws(j);
        const char *row = j->p;
        long c = kve_json_int_array(j, buf, &cap, &len);
        if (c < 0)
            return -1;
        if (width >= 0 && c != width) {
            char want[96];
            snprintf(want, sizeof want, "a table of %ld slots like the first (this one has %ld)",
                     width, c);
            j->p = row;
            return kve_json_fail(j, want);
        }
        width = c;
        rows++;
        kve_json_ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p != ']')
            return kve_json_fail(j, "',' or ']'");
        j->p++;
        if (rows == heads)
            return width;
        kve_cli_usage_error("stdin holds %zu slot tables; --layers x --heads = %zu", rows, heads);
        return -2;
    }
}

/* "[...]": one table for every head, copied to each. Returns the width,
 * -1 when malformed, or -2 (message printed) when the copies do not fit. */
static long kve_json_table_all(kve_json *j, size_t heads, int32_t **buf)
{
    size_t cap = 0, len = 0;
    long c = kve_json_int_array(j, buf, &cap, &len);
    if (c < 0)
        return -1;
    size_t bytes = (heads * (size_t)c + 1) * sizeof(int32_t);
    int32_t *all = (int32_t *)malloc(bytes);
    if (!all) {
        kve_cli_usage_error("KVE_ERR_NOMEM: cannot allocate %zu bytes for %zu slot tables", bytes,
                            heads);
        return -2;
    }
    for (size_t h = 0; c > 0 && h < heads; h++)
        memcpy(all + h * (size_t)c, *buf, (size_t)c * sizeof *all);
    free(*buf);
    *buf = all;
    return c;
}

/* The message for malformed slot tables: the byte offset, the token found
 * there and what was expected; returns the exit code. */
static int kve_cli_json_error(const char *text, const kve_json *j)
{
    if (j->nomem_bytes)
        return kve_cli_usage_error("KVE_ERR_NOMEM: cannot allocate %zu bytes for the slot "
                                   "tables on stdin",
                                   j->nomem_bytes);
    const char *at = j->bad ? j->bad : j->p;
    size_t len = strcspn(at, " \t\r\n,[]{}:\"");
    len = len ? len : *at != '\0';
    char token[40];
    if (len == 0)
        snprintf(token, sizeof token, "the end of the input");
    else
        snprintf(token, sizeof token, "\"%.*s%s\"", (int)(len > 24 ? 24 : len), at,
                 len > 24 ? "..." : "");
    return kve_cli_usage_error("stdin: bad JSON at byte %zu: %s where %s was expected (the "
                               "slot tables: a JSON array of integers, or an array of --layers "
                               "x --heads such arrays of equal length)",
                               (size_t)(at - text), token, j->bad ? j->want : "'['");
}

/* --slots-stdin: the slot tables as JSON on stdin; 0 or an exit code. */
static int kve_cli_read_stdin_slots(kve_cli_config *cfg)
{
    char *text = kve_cli_read_all_stdin();
    if (!text)
        return 2;
    kve_json j = {text, 0, NULL, ""};
    kve_json_ws(&j);
    const char *second = j.p + 1;
    while (isspace((unsigned char)*second))
        second++;
    size_t heads = (size_t)cfg->layers * cfg->heads;
    int32_t *buf = NULL;
    long width = *j.p == '[' && *second == '[' ? kve_json_tables(&j, heads, &buf)
                                               : kve_json_table_all(&j, heads, &buf);
    kve_json_ws(&j);
    if (width >= 0 && *j.p != '\0')
        width = kve_json_fail(&j, "the end of the input");
    if (width == -2 || j.nomem_bytes || width < 0) {
        free(buf);
        int rc = width == -2 ? 2 : kve_cli_json_error(text, &j);
        free(text);
        return rc;
    }
    free(text);
    cfg->n_slots = (uint32_t)width;
    cfg->slot_pos = buf ? buf : (int32_t *)calloc(1, sizeof(int32_t));
    if (!cfg->slot_pos)
        return kve_cli_usage_error("KVE_ERR_NOMEM: cannot allocate %zu bytes for an empty slot table",
                                   sizeof(int32_t));
    return 0;
}

enum {
    OPT_SEED = 1000, OPT_SEQ, OPT_LAYERS, OPT_HEADS, OPT_LOFF, OPT_HOFF, OPT_PROMPT, OPT_WINDOW,
    OPT_BUDGET, OPT_ROUND, OPT_CACHED, OPT_PERSIST, OPT_SHEADS, OPT_SLAYERS, OPT_BACKEND,
    OPT_STDIN, OPT_ISA, OPT_THREADS, OPT_REQUIRE, OPT_HELP
};

/* The checks across options and the slot tables (stdin's, or the identity
 * of --cached slots); 0 or an exit code. */
static int kve_cli_config_finish(const char *cmd, kve_cli_config *cfg)
{
    if (cfg->layers == 0 || cfg->heads == 0)
        return kve_cli_usage_error("%s: --layers and --heads must be >= 1", cmd);
    if ((uint64_t)cfg->layers * cfg->heads > (1u << 20))
        return kve_cli_usage_error("%s: --layers x --heads = %llu: at most 1048576 heads", cmd,
                                   (unsigned long long)cfg->layers * cfg->heads);
    if (cfg->slots_stdin)
        return kve_cli_read_stdin_slots(cfg);
    if (cfg->cached > (1u << 24))
        return kve_cli_usage_error("%s: --cached %u: at most 16777216 slots", cmd, cfg->cached);
    size_t heads = (size_t)cfg->layers * cfg->heads;
    cfg->n_slots = cfg->cached;
    cfg->slot_pos = (int32_t *)malloc((heads * cfg->n_slots + 1) * sizeof(int32_t));
    if (!cfg->slot_pos)
        return kve_cli_usage_error("%s: KVE_ERR_NOMEM: cannot allocate %zu bytes for %zu slot tables",
                                   cmd, (heads * cfg->n_slots + 1) * sizeof(int32_t), heads);
    for (size_t h = 0; h < heads; h++)
        for (uint32_t t = 0; t < cfg->n_slots; t++)
            cfg->slot_pos[h * cfg->n_slots + t] = (int32_t)t;
    return 0;
}

int kve_cli_parse_config(int argc, char **argv, const char *cmd, const char *usage,
                         const char *default_backend, kve_cli_config *cfg)
{
    static const struct option opts[] = {
        {"seed", required_argument, 0, OPT_SEED},       {"seq-id", required_argument, 0, OPT_SEQ},
        {"layers", required_argument, 0, OPT_LAYERS},   {"heads", required_argument, 0, OPT_HEADS},
        {"layer-offset", required_argument, 0, OPT_LOFF},
        {"head-offset", required_argument, 0, OPT_HOFF},
        {"prompt", required_argument, 0, OPT_PROMPT},   {"window", required_argument, 0, OPT_WINDOW},
        {"budget", required_argument, 0, OPT_BUDGET},   {"round", required_argument, 0, OPT_ROUND},
        {"cached", required_argument, 0, OPT_CACHED},   {"persistent", no_argument, 0, OPT_PERSIST},
        {"shared-heads", no_argument, 0, OPT_SHEADS},   {"shared-layers", no_argument, 0, OPT_SLAYERS},
        {"backend", required_argument, 0, OPT_BACKEND}, {"slots-stdin", no_argument, 0, OPT_STDIN},
        {"isa", required_argument, 0, OPT_ISA},         {"threads", required_argument, 0, OPT_THREADS},
        {"require", required_argument, 0, OPT_REQUIRE}, {"help", no_argument, 0, OPT_HELP},
        {0, 0, 0, 0}};
    memset(cfg, 0, sizeof *cfg);
    /* G1 by default (docs/GPU.md "Proving it on your machines"): a digest
     * or selection with no options evicts 64 of 1024 candidates a head. */
    cfg->seed = KVE_CLI_G1_SEED;
    cfg->layers = KVE_CLI_G1_LAYERS;
    cfg->heads = KVE_CLI_G1_HEADS;
    cfg->prompt = KVE_CLI_G1_PROMPT;
    cfg->window = KVE_CLI_G1_WINDOW;
    cfg->budget = KVE_CLI_G1_BUDGET;
    cfg->cached = KVE_CLI_G1_CACHED;
    cfg->backend = default_backend;
    kve_cli_seen seen = {{0}, 0};
    kve_cli_engine engine = {&cfg->flags, &cfg->backend, &cfg->isa, &cfg->threads};
    optind = 1;
    int c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = c >= OPT_SEED && c <= OPT_HELP ? opts[c - OPT_SEED].name : "?";
        int rc = c >= OPT_SEED && c < OPT_HELP ? kve_cli_once(cmd, name, &seen) : 0;
        if (rc)
            return rc;
        if (kve_cli_engine_option(name, optarg, &engine, &rc)) {
            if (rc)
                return rc;
            continue;
        }
        switch (c) {
        case OPT_SEED: rc = kve_cli_parse_u64(name, optarg, UINT64_MAX, &cfg->seed); break;
        case OPT_SEQ: rc = kve_cli_parse_u64(name, optarg, UINT64_MAX, &cfg->seq_id); break;
        case OPT_LAYERS: case OPT_HEADS: case OPT_LOFF: case OPT_HOFF: case OPT_PROMPT:
        case OPT_WINDOW: case OPT_BUDGET: case OPT_ROUND: case OPT_CACHED: {
            uint32_t *field[] = {&cfg->layers, &cfg->heads, &cfg->layer_offset, &cfg->head_offset,
                                 &cfg->prompt, &cfg->window, &cfg->budget, &cfg->round,
                                 &cfg->cached};
            rc = kve_cli_parse_u64(name, optarg, UINT32_MAX, &v);
            *field[c - OPT_LAYERS] = (uint32_t)v;
            break;
        }
        case OPT_STDIN: cfg->slots_stdin = 1; break;
        case OPT_REQUIRE:
            if (strcmp(cmd, "digest") != 0)
                return kve_cli_usage_error("%s: --require is an option of digest", cmd);
            cfg->require = optarg;
            break;
        case OPT_HELP: fputs(usage, stdout); return -1;
        default: fprintf(stderr, "%s", usage); return 2;
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return kve_cli_usage_error("%s: unexpected argument \"%s\" (see --help)", cmd, argv[optind]);
    return kve_cli_config_finish(cmd, cfg);
}

void kve_cli_config_free(kve_cli_config *cfg)
{
    free(cfg->slot_pos);
    cfg->slot_pos = NULL;
}

int kve_cli_context(const char *backend, const char *isa, int threads, kve_context **out)
{
    kve_backend b;
    kve_status st = kve_backend_from_name(backend, &b);
    if (st != KVE_OK)
        return kve_cli_fail("--backend", st);
    st = kve_context_create(b, out);
    if (st != KVE_OK)
        return kve_cli_fail("cannot create a context", st);
    if (isa) {
        kve_cpu_isa i;
        st = kve_cpu_isa_from_name(isa, &i);
        if (st == KVE_OK)
            st = kve_context_set_cpu_isa(*out, i);
    }
    if (st == KVE_OK && threads)
        st = kve_context_set_threads(*out, threads);
    if (st != KVE_OK) {
        kve_context_destroy(*out);
        *out = NULL;
        return kve_cli_fail(isa ? "--isa / --threads" : "--threads", st);
    }
    return 0;
}

kve_batch kve_cli_batch(const kve_cli_config *cfg, const kve_seq *seq, const int32_t *slot_pos)
{
    kve_batch b;
    memset(&b, 0, sizeof b);
    b.seed = cfg->seed;
    b.flags = cfg->flags;
    b.n_seqs = 1;
    b.seqs = seq;
    b.n_layers = cfg->layers;
    b.n_heads = cfg->heads;
    b.layer_offset = cfg->layer_offset;
    b.head_offset = cfg->head_offset;
    b.n_slots = cfg->n_slots;
    b.budget = cfg->budget;
    b.window = cfg->window;
    b.slot_pos = slot_pos;
    b.slot_pos_stride = cfg->n_slots;
    return b;
}

void kve_cli_result_free(kve_cli_result *r)
{
    free(r->evicted);
    free(r->kept);
    free(r->n_evicted);
    free(r->n_kept);
    free(r->head_flags);
    memset(r, 0, sizeof *r);
}

/* Backend buffers for one call: inputs copied in, outputs copied back. */
kve_status kve_cli_evict(kve_context *ctx, const kve_cli_config *cfg, kve_cli_result *r)
{
    size_t heads = (size_t)cfg->layers * cfg->heads;
    memset(r, 0, sizeof *r);
    r->evicted_stride = cfg->n_slots > cfg->budget ? cfg->n_slots - cfg->budget : 1;
    r->kept_stride = cfg->n_slots ? cfg->n_slots : 1;
    size_t sizes[6] = {sizeof(kve_seq), heads * r->kept_stride * 4, heads * r->evicted_stride * 4,
                       heads * r->kept_stride * 4, heads * 4, heads * 4};
    size_t flag_bytes = heads;
    r->evicted = (int32_t *)kve_cli_malloc("the evicted lists", sizes[2], 1);
    r->kept = r->evicted ? (int32_t *)kve_cli_malloc("the kept lists", sizes[3], 1) : NULL;
    r->n_evicted = r->kept ? (uint32_t *)kve_cli_malloc("the evicted counts", sizes[4], 1) : NULL;
    r->n_kept = r->n_evicted ? (uint32_t *)kve_cli_malloc("the kept counts", sizes[5], 1) : NULL;
    r->head_flags = r->n_kept ? (uint8_t *)kve_cli_malloc("the head flags", flag_bytes, 1) : NULL;
    if (!r->head_flags) {
        kve_cli_result_free(r);
        return KVE_ERR_NOMEM;
    }
    kve_seq seq = {cfg->seq_id, cfg->prompt, cfg->round};
    void *dev[7] = {0};
    size_t dsize[7] = {sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], flag_bytes};
    kve_status st = KVE_OK;
    for (int i = 0; i < 7 && st == KVE_OK; i++)
        st = kve_alloc(ctx, dsize[i], &dev[i]);
    if (st == KVE_OK)
        st = kve_copy(ctx, dev[0], &seq, sizeof seq, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_copy(ctx, dev[1], cfg->slot_pos, heads * cfg->n_slots * 4,
                      KVE_COPY_HOST_TO_BACKEND);
    kve_batch b = kve_cli_batch(cfg, (const kve_seq *)dev[0], (const int32_t *)dev[1]);
    kve_evict_out o = {.evicted = (int32_t *)dev[2], .evicted_stride = r->evicted_stride,
                       .n_evicted = (uint32_t *)dev[4], .n_kept = (uint32_t *)dev[5],
                       .head_flags = (uint8_t *)dev[6], .kept = (int32_t *)dev[3],
                       .kept_stride = r->kept_stride};
    if (st == KVE_OK)
        st = kve_evict(ctx, &b, &o, NULL, 0);
    if (st == KVE_OK)
        st = kve_context_synchronize(ctx);
    void *host[5] = {r->evicted, r->kept, r->n_evicted, r->n_kept, r->head_flags};
    for (int i = 0; i < 5 && st == KVE_OK; i++)
        st = kve_copy(ctx, host[i], dev[i + 2], dsize[i + 2], KVE_COPY_BACKEND_TO_HOST);
    for (int i = 0; i < 7; i++)
        kve_free(ctx, dev[i]);
    if (st != KVE_OK)
        kve_cli_result_free(r);
    return st;
}

kve_status kve_cli_keys(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                        size_t n, uint64_t *keys)
{
    void *dc = NULL, *dk = NULL;
    kve_status st = kve_alloc(ctx, n * sizeof *coords, &dc);
    if (st == KVE_OK)
        st = kve_alloc(ctx, n * sizeof *keys, &dk);
    if (st == KVE_OK)
        st = kve_copy(ctx, dc, coords, n * sizeof *coords, KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_keys(ctx, seed, flags, (const kve_coord *)dc, n, (uint64_t *)dk);
    if (st == KVE_OK)
        st = kve_copy(ctx, keys, dk, n * sizeof *keys, KVE_COPY_BACKEND_TO_HOST);
    kve_free(ctx, dc);
    kve_free(ctx, dk);
    return st;
}

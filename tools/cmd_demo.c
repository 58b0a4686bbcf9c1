/*
 * cmd_demo.c — `kvevict demo`: a simulated long-reasoning decode under the
 * paper's schedule (docs/SPEC.md "Schedule") on real K/V buffers: each step
 * writes one token's entries for every head; when the heads are full, one
 * eviction round (kve_evict) and an in-place compaction (kve_compact).
 * Every entry carries its position and head, so the end can prove that
 * compaction moved the right bytes.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char kve_demo_usage[] =
    "usage: kvevict demo [options]\n"
    "Simulated decode with the paper's schedule on the default backend (G1 geometry:\n"
    "Qwen3-4B-like, 36 layers x 8 KV heads, bf16 x 128 entries, P=1024, B=2048,\n"
    "W=r=64), doing the real eviction and compaction on real K/V buffers.\n"
    "  --steps N        tokens to generate (default 4096)\n"
    "  --layers L       layers (default 36)      --heads H     KV heads (default 8)\n"
    "  --prompt P       prompt tokens (default 1024)\n"
    "  --budget B       kept tokens per head (default 2048)\n"
    "  --window W       protected recent tokens (default 64)\n"
    "  --interval R     tokens between evictions (default 64)\n"
    "  --entry-bytes E  bytes per K or V entry (default 256 = 128 x bf16; >= 8)\n"
    "  --seed S         seed (default 1)\n"
    "  --persistent     persistent keys   --shared-heads  one keep-set per layer\n"
    "  --backend NAME   auto, cpu, cuda, hip (default auto)\n"
    "  --threads N      CPU threads (default: OpenMP's)\n"
    "  --no-progress    no progress bar even on a terminal\n";

static double kve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    uint32_t layers, heads, prompt, budget, window, interval, steps;
    uint64_t entry, seed;
    uint32_t flags;
    int threads, progress;
    const char *backend;
} kve_demo_opts;

static int kve_demo_parse(int argc, char **argv, kve_demo_opts *o)
{
    static const struct option opts[] = {
        {"steps", required_argument, 0, 0},   {"layers", required_argument, 0, 0},
        {"heads", required_argument, 0, 0},   {"prompt", required_argument, 0, 0},
        {"budget", required_argument, 0, 0},  {"window", required_argument, 0, 0},
        {"interval", required_argument, 0, 0}, {"entry-bytes", required_argument, 0, 0},
        {"seed", required_argument, 0, 0},    {"threads", required_argument, 0, 0},
        {"backend", required_argument, 0, 0}, {"persistent", no_argument, 0, 0},
        {"shared-heads", no_argument, 0, 0},  {"no-progress", no_argument, 0, 0},
        {"help", no_argument, 0, 0},          {0, 0, 0, 0}};
    *o = (kve_demo_opts){36, 8, 1024, 2048, 64, 64, 4096, 256, 1, 0, 0, 1, "auto"};
    uint32_t *u32[] = {&o->steps, &o->layers, &o->heads, &o->prompt, &o->budget, &o->window,
                       &o->interval};
    static const uint64_t max32[] = {1u << 24, 4096, 4096, 1u << 24, 1u << 24, 1u << 24, 1u << 24};
    int idx, c;
    uint64_t v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != 0) {
            fputs(kve_demo_usage, stderr);
            return 2;
        }
        int rc = 0;
        if (idx < 7) {
            rc = kve_cli_parse_u64(opts[idx].name, optarg, max32[idx], &v);
            *u32[idx] = (uint32_t)v;
        } else if (idx == 7) {
            rc = kve_cli_parse_u64("entry-bytes", optarg, 1 << 16, &o->entry);
        } else if (idx == 8) {
            rc = kve_cli_parse_u64("seed", optarg, UINT64_MAX, &o->seed);
        } else if (idx == 9) {
            rc = kve_cli_parse_u64("threads", optarg, 1024, &v);
            o->threads = (int)v;
        } else if (idx == 10) {
            o->backend = optarg;
        } else if (idx == 11) {
            o->flags |= KVE_PERSISTENT;
        } else if (idx == 12) {
            o->flags |= KVE_SHARED_HEADS;
        } else if (idx == 13) {
            o->progress = 0;
        } else {
            fputs(kve_demo_usage, stdout);
            return -1;
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return kve_cli_usage_error("demo: unexpected argument \"%s\"", argv[optind]);
    if (o->entry < 8)
        return kve_cli_usage_error("demo: --entry-bytes %llu: at least 8 (the entry's tag)",
                                   (unsigned long long)o->entry);
    if (o->interval == 0 || o->layers == 0 || o->heads == 0)
        return kve_cli_usage_error("demo: --interval, --layers and --heads must be >= 1");
    return 0;
}

static uint64_t kve_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One token's entries for every head: tag (position, head), then noise. */
static void kve_fill_row(unsigned char *row, size_t heads, size_t entry, uint32_t pos,
                         uint64_t *rng)
{
    for (size_t h = 0; h < heads; h++) {
        unsigned char *e = row + h * entry;
        uint32_t tag[2] = {pos, (uint32_t)h};
        memcpy(e, tag, 8);
        for (size_t b = 8; b + 8 <= entry; b += 8) {
            uint64_t r = kve_xorshift(rng);
            memcpy(e + b, &r, 8);
        }
    }
}

int kve_cmd_demo(int argc, char **argv)
{
    kve_demo_opts o;
    int rc = kve_demo_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    kve_context *ctx = NULL;
    if ((rc = kve_cli_context(o.backend, NULL, o.threads, &ctx)))
        return rc;
    uint32_t protect = o.prompt + o.window;
    uint32_t n_slots = (o.budget > protect ? o.budget : protect) + o.interval;
    /* heads <= 2^24, entry <= 2^16 and n_slots < 2^26: row_bytes and the
     * slot tables fit in size_t, a whole cache need not (kve_cli_malloc
     * checks that product before any buffer is used). */
    size_t heads = (size_t)o.layers * o.heads, row_bytes = heads * o.entry;
    uint64_t full_slots = (uint64_t)o.prompt + o.steps;

    int32_t *slot_pos = (int32_t *)kve_cli_malloc("the slot tables", heads * n_slots, sizeof *slot_pos);
    unsigned char *row = slot_pos ? (unsigned char *)kve_cli_malloc("one token's K/V row", row_bytes, 1)
                                  : NULL;
    unsigned char *check =
        row ? (unsigned char *)kve_cli_malloc("a host copy of the K cache", row_bytes, n_slots) : NULL;
    size_t cache_bytes = check ? row_bytes * n_slots : 0;
    void *dev[8] = {0}; /* K, V, slot_pos, seq, evicted, n_evicted, n_kept, flags */
    size_t ev_stride = n_slots > o.budget ? n_slots - o.budget : 1;
    size_t sizes[8] = {cache_bytes, cache_bytes, heads * n_slots * 4, sizeof(kve_seq),
                       heads * ev_stride * 4, heads * 4, heads * 4, heads};
    kve_status st = check ? KVE_OK : KVE_ERR_NOMEM;
    for (int i = 0; i < 8 && st == KVE_OK; i++)
        st = kve_alloc(ctx, sizes[i], &dev[i]);
    kve_seq seq = {o.seed ^ 0x5eedULL, o.prompt, 0};
    uint64_t rng = o.seed * 0x9E3779B97F4A7C15ULL + 1;
    uint32_t count = 0;
    /* Token-row layout [slot][layer][head][entry]: one copy writes a token. */
    kve_cache_view view = {NULL, 0, (size_t)o.heads * o.entry, o.entry, row_bytes};
    for (uint32_t p = 0; st == KVE_OK && p < o.prompt && count < n_slots; p++, count++)
        for (int kv = 0; kv < 2 && st == KVE_OK; kv++) {
            kve_fill_row(row, heads, o.entry, p, &rng);
            st = kve_copy(ctx, (char *)dev[kv] + (size_t)count * row_bytes, row, row_bytes,
                          KVE_COPY_HOST_TO_BACKEND);
        }
    for (size_t i = 0; st == KVE_OK && i < heads * n_slots; i++)
        slot_pos[i] = (i % n_slots) < count ? (int32_t)(i % n_slots) : -1;

    kve_batch b = {o.seed, o.flags, 1, (const kve_seq *)dev[3], o.layers, o.heads, 0, 0,
                   n_slots, o.budget, o.window, (const int32_t *)dev[2], n_slots, NULL, 0};
    kve_evict_out out = {.evicted = (int32_t *)dev[4], .evicted_stride = ev_stride,
                         .n_evicted = (uint32_t *)dev[5], .n_kept = (uint32_t *)dev[6],
                         .head_flags = (uint8_t *)dev[7]};
    size_t ws_bytes = 0;
    void *ws = NULL;
    if (st == KVE_OK)
        st = kve_evict_workspace_size(ctx, &b, &ws_bytes);
    if (st == KVE_OK && ws_bytes)
        st = kve_alloc(ctx, ws_bytes, &ws);
    double t_evict = 0, t_compact = 0, t0 = kve_now();
    uint32_t rounds = 0, over_rounds = 0;
    int tty = o.progress && isatty(STDERR_FILENO);
    for (uint32_t step = 0; st == KVE_OK && step < o.steps; step++) {
        if (count == n_slots) { /* heads full: one eviction round */
            seq.round = rounds;
            st = kve_copy(ctx, dev[3], &seq, sizeof seq, KVE_COPY_HOST_TO_BACKEND);
            if (st == KVE_OK)
                st = kve_copy(ctx, dev[2], slot_pos, sizes[2], KVE_COPY_HOST_TO_BACKEND);
            double a = kve_now();
            if (st == KVE_OK)
                st = kve_evict(ctx, &b, &out, ws, ws_bytes);
            if (st == KVE_OK)
                st = kve_context_synchronize(ctx);
            double m = kve_now();
            kve_compact_desc cd;
            memset(&cd, 0, sizeof cd);
            cd.n_seqs = 1;
            cd.n_layers = o.layers;
            cd.n_heads = o.heads;
            cd.n_slots = n_slots;
            cd.slot_pos = (int32_t *)dev[2];
            cd.slot_pos_stride = n_slots;
            cd.evicted = out.evicted;
            cd.evicted_stride = ev_stride;
            cd.n_evicted = out.n_evicted;
            cd.entry_bytes = o.entry;
            cd.n_caches = 2;
            cd.src[0] = view;
            cd.src[0].base = dev[0];
            cd.src[1] = view;
            cd.src[1].base = dev[1];
            if (st == KVE_OK)
                st = kve_compact(ctx, &cd);
            if (st == KVE_OK)
                st = kve_context_synchronize(ctx);
            t_evict += m - a;
            t_compact += kve_now() - m;
            uint32_t kept = 0;
            uint8_t flag = 0;
            if (st == KVE_OK)
                st = kve_copy(ctx, slot_pos, dev[2], sizes[2], KVE_COPY_BACKEND_TO_HOST);
            if (st == KVE_OK)
                st = kve_copy(ctx, &kept, dev[6], 4, KVE_COPY_BACKEND_TO_HOST);
            if (st == KVE_OK)
                st = kve_copy(ctx, &flag, dev[7], 1, KVE_COPY_BACKEND_TO_HOST);
            count = kept; /* every head keeps the same count (SPEC "Schedule") */
            over_rounds += (flag & KVE_HEAD_OVER_BUDGET) != 0;
            rounds++;
            if (count >= n_slots && st == KVE_OK) {
                fprintf(stderr, "kvevict: demo: eviction freed no slot (budget %u >= %u slots)\n",
                        o.budget, n_slots);
                rc = 1;
                break;
            }
        }
        uint32_t pos = o.prompt + step;
        for (int kv = 0; kv < 2 && st == KVE_OK; kv++) {
            kve_fill_row(row, heads, o.entry, pos, &rng);
            st = kve_copy(ctx, (char *)dev[kv] + (size_t)count * row_bytes, row, row_bytes,
                          KVE_COPY_HOST_TO_BACKEND);
        }
        for (size_t h = 0; h < heads; h++)
            slot_pos[h * n_slots + count] = (int32_t)pos;
        count++;
        if (tty && (step % 64 == 0 || step + 1 == o.steps)) {
            int filled = (int)(40.0 * (step + 1) / o.steps);
            fprintf(stderr, "\r[%.*s%*s] %u/%u tokens, %u rounds", filled,
                    "########################################", 40 - filled, "", step + 1,
                    o.steps, rounds);
        }
    }
    if (tty)
        fputc('\n', stderr);
    double elapsed = kve_now() - t0;

    /* Every valid slot must hold the entry tagged with its position and head. */
    uint64_t bad = 0, digest = 0;
    for (int kv = 0; kv < 2 && st == KVE_OK && !rc; kv++) {
        st = kve_copy(ctx, check, dev[kv], cache_bytes, KVE_COPY_BACKEND_TO_HOST);
        for (size_t h = 0; st == KVE_OK && h < heads; h++)
            for (uint32_t t = 0; t < n_slots; t++) {
                int32_t p = slot_pos[h * n_slots + t];
                uint32_t tag[2];
                memcpy(tag, check + (size_t)t * row_bytes + h * o.entry, 8);
                bad += p >= 0 && (tag[0] != (uint32_t)p || tag[1] != h);
            }
    }
    if (st == KVE_OK && !rc) {
        kve_batch hb = b;
        hb.seqs = &seq;
        hb.slot_pos = slot_pos;
        kve_context *host = NULL;
        st = kve_context_create(KVE_BACKEND_CPU, &host);
        if (st == KVE_OK)
            st = kve_digest(host, &hb, NULL, &digest);
        kve_context_destroy(host);
    }
    if (st != KVE_OK) {
        rc = kve_cli_fail("demo", st);
    } else if (!rc) {
        kve_backend be;
        kve_cpu_isa isa;
        int threads;
        kve_context_get_backend(ctx, &be);
        kve_context_get_cpu_isa(ctx, &isa);
        kve_context_get_threads(ctx, &threads);
        printf("kvevict demo: %u layers x %u KV heads, %llu-byte K and V entries, P=%u B=%u "
               "W=%u r=%u\n",
               o.layers, o.heads, (unsigned long long)o.entry, o.prompt, o.budget, o.window,
               o.interval);
        if (be == KVE_BACKEND_CPU)
            printf("backend: cpu (%s, %d threads)\n", kve_cpu_isa_name(isa), threads);
        else
            printf("backend: %s\n", kve_backend_name(be));
        printf("  %-26s %u\n", "tokens generated", o.steps);
        printf("  %-26s %u (full cache: %llu; %.1f%% of K/V memory saved)\n",
               "cache slots per head", n_slots, (unsigned long long)full_slots,
               full_slots > n_slots ? 100.0 * (double)(full_slots - n_slots) / full_slots : 0.0);
        printf("  %-26s %u%s\n", "eviction rounds", rounds,
               over_rounds ? " (protected tokens exceeded the budget in some)" : "");
        if (rounds)
            printf("  %-26s %.3f ms evict + %.3f ms compact\n", "time per eviction round",
                   1e3 * t_evict / rounds, 1e3 * t_compact / rounds);
        printf("  %-26s %.2f s\n", "wall time", elapsed);
        printf("  %-26s %s\n", "cache contents",
               bad ? "CORRUPT (entries not where slot_pos says)" : "verified: every kept entry in its slot");
        printf("  %-26s 0x%016llx\n", "digest", (unsigned long long)digest);
        rc = bad ? 1 : 0;
    }
    for (int i = 0; i < 8; i++)
        kve_free(ctx, dev[i]);
    kve_free(ctx, ws);
    kve_context_destroy(ctx);
    free(slot_pos);
    free(row);
    free(check);
    return rc;
}

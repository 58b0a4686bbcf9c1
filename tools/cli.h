/* cli.h — shared pieces of the kvevict command line. */
#ifndef KVE_CLI_H
#define KVE_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "kvevict.h"

/* One configuration of `select` and `digest` (one sequence). */
typedef struct kve_cli_config {
    uint64_t seed, seq_id;
    uint32_t layers, heads, layer_offset, head_offset;
    uint32_t prompt, window, budget, round, cached;
    uint32_t flags;
    const char *backend; /* name, or "all" for digest */
    const char *require; /* digest: comma-separated backends that must run */
    const char *isa;     /* NULL = auto */
    int threads;         /* 0 = default */
    int slots_stdin;
    /* host slot tables, heads rows of n_slots */
    int32_t *slot_pos;
    uint32_t n_slots;
} kve_cli_config;

/* Host results of one eviction. */
typedef struct kve_cli_result {
    int32_t *evicted, *kept;
    uint32_t *n_evicted, *n_kept;
    uint8_t *head_flags;
    size_t evicted_stride, kept_stride;
} kve_cli_result;

/* malloc(count * size) (at least 1 byte); NULL when it overflows or fails,
 * and then kve_cli_fail(..., KVE_ERR_NOMEM) says what and how many bytes. */
void *kve_cli_malloc(const char *item, size_t count, size_t size);

/* Prints "kvevict: <what>: <status>: <message>" to stderr and returns 2. */
int kve_cli_fail(const char *what, kve_status st);
int kve_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The defaults of select and digest: G1 (docs/GPU.md), 36 layers x 8 KV
 * heads of 2112 slots (slot i holds position i), P=1024, B=2048, W=64. */
enum {
    KVE_CLI_G1_SEED = 2609, KVE_CLI_G1_LAYERS = 36, KVE_CLI_G1_HEADS = 8,
    KVE_CLI_G1_PROMPT = 1024, KVE_CLI_G1_WINDOW = 64, KVE_CLI_G1_BUDGET = 2048,
    KVE_CLI_G1_CACHED = 2112
};

/* The long options a command has seen, to refuse one given twice. */
typedef struct kve_cli_seen {
    const char *names[48];
    int n;
} kve_cli_seen;
/* 0 the first time @p name is given to @p cmd; else a usage error, 2. */
int kve_cli_once(const char *cmd, const char *name, kve_cli_seen *seen);

/* --threads: 1 to 1024 (0 is refused: leave the option out for OpenMP's
 * default); 0 or an exit code. */
int kve_cli_parse_threads(const char *text, int *out);

/* The one parser of every comma-separated list option (--pos, --require,
 * --arms): @p item(arg, text) for each item in order, NUL-terminated; an
 * empty item anywhere ("", ",", "1,,2", "1,", ",1") is a usage error naming
 * the option and value. 0, 2, or the first nonzero @p item return. */
int kve_cli_parse_list(const char *cmd, const char *opt, const char *text,
                       int (*item)(void *arg, const char *item), void *arg);

/* Parses an unsigned integer (decimal or 0x-hex) within [0, max]. */
int kve_cli_parse_u64(const char *opt, const char *text, uint64_t max, uint64_t *out);

/* Parses the options shared by select and digest; returns 0 or an exit code.
 * The config's slot tables are built (from --cached or stdin). */
/* Where the engine options every command shares land. */
typedef struct kve_cli_engine {
    uint32_t *flags;      /* --persistent, --shared-heads, --shared-layers */
    const char **backend; /* --backend */
    const char **isa;     /* --isa */
    int *threads;         /* --threads */
} kve_cli_engine;
/* Long option @p name with argument @p arg when it is one of the engine
 * options (returns 1, *rc = 0 or an exit code); 0 otherwise. */
int kve_cli_engine_option(const char *name, const char *arg, const kve_cli_engine *e, int *rc);

int kve_cli_parse_config(int argc, char **argv, const char *cmd, const char *usage,
                         const char *default_backend, kve_cli_config *cfg);
void kve_cli_config_free(kve_cli_config *cfg);

/* Creates a context for a backend name and optional ISA / thread count. */
int kve_cli_context(const char *backend, const char *isa, int threads, kve_context **out);

/* Runs kve_evict on ctx with host inputs, copying through backend memory. */
kve_status kve_cli_evict(kve_context *ctx, const kve_cli_config *cfg, kve_cli_result *res);
void kve_cli_result_free(kve_cli_result *res);

/* kve_keys on ctx with host coordinates and keys, through backend memory. */
kve_status kve_cli_keys(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                        size_t n, uint64_t *keys);

/* The batch a config describes, over host (or given) slot tables and seqs. */
kve_batch kve_cli_batch(const kve_cli_config *cfg, const kve_seq *seq, const int32_t *slot_pos);

int kve_cmd_select(int argc, char **argv);
int kve_cmd_key(int argc, char **argv);
int kve_cmd_digest(int argc, char **argv);
int kve_cmd_vectors(int argc, char **argv);
int kve_cmd_demo(int argc, char **argv);
int kve_cmd_replay(int argc, char **argv);
int kve_cmd_diff(int argc, char **argv);

#endif

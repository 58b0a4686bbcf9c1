/* demo.h — `kvevict demo`: the A/B arms of one decode through the engine
 * path (cmd_demo.c: options, the table; demo_run.c: one arm through a cache
 * state, its slot mapping, moves and cache writes; demo_report.c: the JSON
 * and the HTML report with its figures). */
#ifndef KVE_DEMO_H
#define KVE_DEMO_H

#include <stdint.h>
#include <stdio.h>

#include "kvevict.h"

/* The arms, in the order they run and are reported. */
typedef enum kve_arm_kind {
    KVE_ARM_FULL = 0,    /* no compression: a budget the run never reaches */
    KVE_ARM_TRI,         /* TriAttention's scores select (KVE_SCORED) */
    KVE_ARM_KNORM,       /* K-norm scores select (KVE_SCORED) */
    KVE_ARM_RANDOM,      /* random, the prompt pinned */
    KVE_ARM_RANDOM_P0,   /* random, prompt length 0 at admission: nothing pinned */
    KVE_N_ARMS
} kve_arm_kind;

#define KVE_DEMO_BINS 64  /* position bins of the survival curve and keep map */
#define KVE_DEMO_SNAPS 16 /* keep-map snapshots over the decode */
#define KVE_DEMO_MAP_HEADS_MAX 8

typedef struct kve_demo_opts {
    uint32_t layers, heads, prompt, budget, window, interval, steps, map_heads;
    uint64_t entry, seed;
    uint32_t flags; /* KVE_PERSISTENT | KVE_SHARED_HEADS */
    int threads, progress, arms[KVE_N_ARMS], arms_given;
    const char *backend, *report, *json;
} kve_demo_opts;

/* What one arm did; arrays owned by the arm (kve_demo_arm_free). */
typedef struct kve_demo_arm {
    kve_arm_kind kind;
    const char *name;
    uint32_t prompt_len; /* passed to kve_state_admit: P, or 0 */
    uint32_t budget, flags, capacity, rounds;
    double choose_s;     /* scoring + the appends that ran a round */
    double write_s;      /* every kve_cache_write (moves and new rows) */
    double wall_s;
    double *round_ms;    /* [rounds]: each round's choosing time */
    uint32_t *held;      /* [steps + 1]: n_valid after the prompt, then after each token */
    uint32_t held_peak;
    uint64_t digest;     /* docs/SPEC.md "Digest" of the final keep-sets */
    uint64_t run_digest; /* kve_state_read_digest: docs/SPEC.md section 11 */
    uint64_t bad;        /* valid cache entries that do not hold their token's bytes */
    /* keep map: after KVE_DEMO_SNAPS tokens counts, per mapped head and bin,
     * the positions its table holds */
    uint32_t snap_tokens[KVE_DEMO_SNAPS], snap_round[KVE_DEMO_SNAPS];
    uint32_t *map_kept;  /* [KVE_DEMO_SNAPS][map_heads][KVE_DEMO_BINS] */
    uint64_t surv_kept[KVE_DEMO_BINS]; /* final (head, position) pairs kept, per bin */
    double expected[KVE_DEMO_BINS];    /* uniform expectation (random arms), else -1 */
} kve_demo_arm;

/* Position bin b covers [bin_lo(b), bin_lo(b + 1)) of n positions. */
uint32_t kve_demo_bin_lo(uint32_t n, uint32_t b);

/* Runs one arm (prompt, then opts->steps one-token steps) on ctx; returns 0
 * or the CLI's exit code (message printed). */
int kve_demo_run_arm(kve_context *ctx, const kve_demo_opts *o, kve_arm_kind kind,
                     kve_demo_arm *arm, int arm_index, int n_arms);
void kve_demo_arm_free(kve_demo_arm *arm);

/* The survival the spec's uniform selection gives each position bin at the
 * end of the run (fresh or persistent keys), into arm->expected. */
void kve_demo_expected_survival(const kve_demo_opts *o, kve_demo_arm *arm);

/* Mean choosing time of a round, ms (0 without rounds). */
double kve_demo_ms_per_round(const kve_demo_arm *arm);
/* The end table (cmd_demo.c), on stdout and in the report. */
void kve_demo_print_table(FILE *f, const kve_demo_opts *o, const kve_demo_arm *arms, int n_arms);

/* The run as JSON (the --json file, and embedded in the report). */
void kve_demo_write_json(FILE *f, const kve_demo_opts *o, const char *backend,
                         const kve_demo_arm *arms, int n_arms);
/* The HTML report: the table, the four figures, the JSON. */
int kve_demo_write_report(const char *path, const kve_demo_opts *o, const char *backend,
                          const kve_demo_arm *arms, int n_arms);

#endif

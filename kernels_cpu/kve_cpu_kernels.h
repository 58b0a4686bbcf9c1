/*
 * kve_cpu_kernels.h — the fixed prototypes every CPU ISA implements, and
 * the table of them per ISA (BLIS-style: reference first, faster kernels
 * override). The driver (backends/cpu.c) owns the context and the table of
 * operations; kernels own one head, and the whole-call kernels at the end
 * take plain data (common/kve_jobs.h), never a context.
 */
#ifndef KVE_CPU_KERNELS_H
#define KVE_CPU_KERNELS_H

#include "kve_check_rows.h"
#include "kvevict.h"

/* Bytes ahead of the source a streaming copy prefetches (copy_runs_stream,
 * and the token-row walk's entries in kernels_cpu/compact_cpu.c): on the Zen 4
 * measured, per-head rows' runs (4 KiB each, moving down by up to 16 KiB)
 * copied fastest at 4 KiB, 2 to 6 KiB alike, streaming without it barely
 * faster than plain stores; token-row entries, 0.63-0.71x a memmove
 * without, 0.75-0.80x at 4 KiB, 0.66x at 2 KiB, 0.73x at 8 and 16 KiB. */
#define KVE_STREAM_AHEAD 4096

/* A run of in-place compaction that moves down by at most this many bytes
 * moves "near" (backends/kve_cpu_isa.h, kve_cpu_near_moves_plain). */
#define KVE_NEAR_MOVE_BYTES ((size_t)64 << 10) /* G1's per-head runs: 16 KiB at most */

/* What a SIMD kernel learnt from the previous head on the same thread:
 * guesses only (every one is verified), so results never depend on it.
 * The driver zeroes it at the start of each thread's run of heads. */
typedef struct kve_head_hint {
    int valid;
    uint64_t seed, seq_id, seq_seed;
    uint32_t prompt, window, budget, n_slots;
    uint32_t n_valid, n_gen; /* counts of the previous head */
    uint32_t win_lo;         /* its window: generated positions >= win_lo */
} kve_head_hint;

/* Content checks a kernel with fused_checks runs in its own pass over a
 * head's table (kve_head_job.check): values >= -1, and no position twice. */
enum { KVE_JOB_CHECK_RANGE = 1, KVE_JOB_CHECK_DUPS = 2 };

/* What came of a job's fused checks (kve_head_job.check_result). */
enum {
    KVE_JOB_UNCHECKED = 0, /* the kernel cannot fuse them for this head: it
                              wrote nothing; check, then run it with check 0 */
    KVE_JOB_CLEAN = 1,     /* checked, no problem, outputs complete */
    KVE_JOB_SUSPECT = 2    /* maybe a problem: outputs complete, correct if the
                              exact search (kve_row_check) finds none */
};

/* Bytes of the presence map a fused duplicate check uses: one per value of
 * a position's low 16 bits; all zero before and after each job. */
#define KVE_FUSED_MAP_BYTES 65536

/* One head's eviction: inputs, then outputs the kernel fills. */
typedef struct kve_head_job {
    /* [n_slots]: >= -1 and unique, or unchecked when check != 0 */
    const int32_t *slot_pos;
    uint32_t n_slots;
    uint32_t prompt, window, budget;
    uint64_t seed, seq_id;
    uint32_t key_flags; /* KVE_KEY_FLAGS bits only */
    uint32_t layer, head, round; /* global coordinates */
    kve_head_hint *hint;         /* NULL, or the thread's hint (kernels may ignore it) */
    /* KVE_SCORED: the head's scores [n_slots] (checked: no NaN at a
     * candidate), read at candidates only; NULL: keys. */
    const float *scores;
    int32_t *evicted; /* room for max(0, n_slots - budget) */
    int32_t *kept;    /* NULL, or room for n_slots */
    uint32_t n_evicted, n_kept; /* out */
    int over_budget;            /* out */
    /* KVE_JOB_CHECK_* bits (only for a table with fused_checks), and the
     * zeroed map (KVE_FUSED_MAP_BYTES) KVE_JOB_CHECK_DUPS marks and zeroes
     * again; check_result: out, KVE_JOB_*, written by the SIMD kernels and read
 * only when check != 0. */
    uint32_t check;
    unsigned char *check_map;
    int check_result;
} kve_head_job;

typedef struct kve_cpu_kernels {
    kve_cpu_isa isa;
    /* Scratch one evict_head call needs for n_slots slots (64-byte aligned). */
    size_t (*evict_scratch_bytes)(uint32_t n_slots);
    void (*evict_head)(kve_head_job *job, void *scratch);
    void (*keys)(uint64_t seed, uint32_t flags, const kve_coord *coords, size_t n, uint64_t *keys);
    /* Keys of n positions of one head, nothing else: the hash-only floor the
     * benchmarks hold eviction against, and the running digest's elements
     * (job: coordinates only). keys[0..n) holds the n keys, those of each
     * whole block of 16 positions in an order of the kernel's own (the floor
     * reads none, the digest sums them). */
    void (*head_keys)(const kve_head_job *job, const int32_t *pos, uint32_t n, uint64_t *keys);
    /* dst[i] = src[i] for bytes[i] bytes, i = 0 .. count - 1 in order, each
     * copy forward: a source may overlap its own destination only when the
     * destination lies below it (compaction's runs); no other overlaps. */
    void (*copy_runs)(char *const *dst, const char *const *src, const size_t *bytes,
                      uint32_t count);
    /* copy_runs for copies too large to stay cached: the same bytes, stored
     * around the caches where the ISA can (non-temporal stores), each of
     * the call's stores visible to every thread when it returns. */
    void (*copy_runs_stream)(char *const *dst, const char *const *src, const size_t *bytes,
                             uint32_t count);
    /* The content checks' passes over one slot_pos row (kve_check_rows.h;
     * kve_check_row drives them): its facts, the length of its leading
     * in-order run, and whether its valid positions (in [lo, lo + span))
     * are distinct, with a presence map of row_map_bytes per position. */
    void (*row_facts)(const int32_t *row, uint32_t n, kve_row_facts *out);
    uint32_t (*row_run)(const int32_t *row, uint32_t n);
    int (*row_distinct)(const int32_t *row, uint32_t n, int32_t lo, size_t span, uint32_t valid,
                        void *map);
    size_t row_map_bytes;
    /* 1: evict_head runs kve_head_job.check in its own pass; 0: it ignores
     * check, so the driver checks every head first. */
    int fused_checks;
    /* The SIMD eviction's boundary on the keys' high halves (NULL in the
     * scalar table; table entry so that tests reach it): given m > 0 values
     * k[0..m), every one in [lo, top], a t with exactly want of them >= t;
     * 0 when there is none (equal values at the boundary). tmp: 32 values
     * of scratch. */
    int (*boundary32)(const uint32_t *k, uint32_t m, uint32_t want, uint32_t lo, uint32_t top,
                      uint32_t *tmp, uint64_t *t);
} kve_cpu_kernels;

extern const kve_cpu_kernels kve_cpu_kernels_scalar;
extern const kve_cpu_kernels kve_cpu_kernels_avx2;
extern const kve_cpu_kernels kve_cpu_kernels_avx512;

/* The table for a resolved ISA (never NULL for an ISA resolve accepted). */
const kve_cpu_kernels *kve_cpu_kernels_get(kve_cpu_isa isa);

/* kve_score's per-slot kernels (kernels_cpu/score_cpu.c drives them). The
 * scalar ones compute exactly as common/score_body.h (f ascending,
 * one accumulator), the device's order; vector ones split the sums. */
typedef struct kve_score_kernels {
    kve_cpu_isa isa;
    /* key[0 .. dim) of type dtype (F32, F16, BF16) to floats */
    void (*load)(const unsigned char *key, uint32_t dtype, uint32_t dim, float *out);
    /* raw[j] for j < group: sum over f < nf of re_j[f] k[f] + im_j[f]
     * k[f+nf] + b_j[f] |k_f|, re_j = coef + j * 3 * nf, im_j = re_j + nf,
     * b_j = im_j + nf; mag is scratch of nf floats */
    void (*group)(const float *coef, const float *key, float *mag, uint32_t nf, uint32_t group,
                  float *raw);
    /* -||key|| */
    float (*knorm)(const float *key, uint32_t dim);
    /* The streaming pass over a table's candidates, n keys at keys[c] + off:
     * raw[c * stride] = knorm(load(key)) (knorm_keys), raw[c * stride + j] =
     * group(coef, load(key))[j] (group_keys), bit for bit as the per-key
     * kernels above; key (2 * nf floats) and mag (nf) are scratch. NULL: the
     * driver composes the per-key kernels. */
    void (*knorm_keys)(const unsigned char *const *keys, size_t off, uint32_t n, uint32_t dtype,
                       uint32_t dim, float *raw, uint32_t stride);
    void (*group_keys)(const float *coef, const unsigned char *const *keys, size_t off, uint32_t n,
                       uint32_t dtype, uint32_t nf, uint32_t group, float *key, float *mag,
                       float *raw, uint32_t stride);
    /* kve_score_window_cands, or the ISA's own (the same answer) */
    uint32_t (*cands)(const int32_t *tab, const kve_score_row *r, uint32_t *gen_pos,
                      uint32_t *cand, uint32_t *tmp);
} kve_score_kernels;

extern const kve_score_kernels kve_score_kernels_scalar;
extern const kve_score_kernels kve_score_kernels_avx2;
extern const kve_score_kernels kve_score_kernels_avx512;

/* The score kernels of a resolved ISA (scalar where this build has none). */
const kve_score_kernels *kve_score_kernels_get(kve_cpu_isa isa);

/* A table's candidate slots for kve_score (kernels_cpu/score_window.c):
 * into cand[0..n), ascending, the slots of @p tab that SPEC section 3 makes
 * candidates of row @p r (common/score_body.h's kve_score_candidate
 * with kve_score_bound_seq's bound); returns n. gen_pos, cand and tmp hold
 * r->n_slots + 16 values each (vector stores run past the count). */
uint32_t kve_score_window_cands(const int32_t *tab, const kve_score_row *r, uint32_t *gen_pos,
                                uint32_t *cand, uint32_t *tmp);
/* The window's bound from the n > window generated positions gen_pos[0..n)
 * of a table, all in [lo, hi]: the (window + 1)-th largest, plus one. */
uint32_t kve_score_window_bound(const uint32_t *gen_pos, uint32_t n, uint32_t window, uint32_t lo,
                                uint32_t hi, uint32_t *tmp);

/* The whole-call kernels behind the CPU backend's operations (backends/cpu.c
 * wraps each in its kve_backend_ops): the ISA a context resolved and at most
 * @p threads threads (kve_cpu_parallel), arguments validated. */
struct kve_state_update;
struct kve_score_call;
/* A state's jobs (state_jobs_cpu.c); KVE_ERR_INTERNAL when a job's table
 * does not fit (never for the state's own jobs). */
kve_status kve_cpu_state_jobs(const struct kve_state_update *u, int threads);
/* A cache write and its moves (cache_write_cpu.c). */
void kve_cpu_cache_write_run(const kve_cache_write_desc *d, kve_cpu_isa isa, int threads);
/* One call of the scorers (score_cpu.c), allocating nothing: each thread's
 * buffers lie in @p scratch (any alignment), so at most scratch_bytes /
 * kve_cpu_score_call_bytes(call) threads run (after 64 bytes of alignment);
 * KVE_ERR_INTERNAL when not one fits. */
kve_status kve_cpu_score_run(const struct kve_score_call *call, kve_cpu_isa isa, int threads,
                             void *scratch, size_t scratch_bytes);
/* The scratch one thread of the scorers needs for a table of @p nq query
 * heads and @p nf frequencies (head_dim / 2) on rows of up to @p max_slots
 * slots (SIZE_MAX: past the address space), and for the call @p call. */
size_t kve_cpu_score_thread_bytes(uint32_t nq, uint32_t nf, uint32_t max_slots);
size_t kve_cpu_score_call_bytes(const struct kve_score_call *call);
/* The compaction (compact_cpu.c); near_plain: copy runs that move a short
 * way down in place with plain stores (the CPU's rule, backends/cpu_isa.c). */
void kve_cpu_compact_run(const kve_compact_desc *d, kve_cpu_isa isa, int threads, int near_plain);

#endif

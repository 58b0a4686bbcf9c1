/*
 * kve_cases.h — random eviction, compaction and cache-write problems,
 * shared by the emulated-kernel tests (tests/emu) and the device tests
 * (tests/gpu). Cache-write cases are made in kve_engine_cases.c.
 *
 * A case owns host "master" buffers. bind() builds the public structs over
 * any copy of those buffers (host copies for the CPU and the emulator,
 * device copies for a GPU), so every backend sees the same bytes at the
 * same offsets (hence the same alignment).
 */
#ifndef KVE_CASES_H
#define KVE_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "kve_test_base.h"
#include "kvevict.h"

#define KVE_CASE_MAX_BUFS (5 + 2 * KVE_MAX_CACHES)

typedef struct kve_case_bufs {
    unsigned char *p[KVE_CASE_MAX_BUFS];
} kve_case_bufs;

typedef struct kve_case {
    int n_bufs;
    size_t bytes[KVE_CASE_MAX_BUFS];
    unsigned char *master[KVE_CASE_MAX_BUFS]; /* 256-byte aligned host memory */
    size_t heads;
    /* eviction: buffers seqs, slot_pos, evicted, n_evicted, n_kept, then the
     * optional head_flags and kept */
    kve_batch batch; /* pointers are offsets from 0 until bound */
    kve_evict_out out;
    /* compaction: slot_pos, evicted, n_evicted, src caches, dst caches */
    kve_compact_desc desc;
    int is_compact;
    /* cache write: src caches, dst caches, slots, token_row, then the page
     * table's arrays; pointers are offsets from 0 until bound */
    kve_cache_write_desc cw;
    int is_cache_write;
    int cw_pair;     /* cache write: dst[1] lies in dst[0]'s buffer (one K/V tensor) */
    char label[640]; /* the parameters, for failure messages */
} kve_case;

typedef struct kve_case_limits {
    uint32_t max_slots; /* slots per head: up to this (a few cases go there) */
    uint32_t max_dim;   /* n_seqs, n_layers, n_heads: 1..max_dim each */
    int errors;         /* 1: break some slot tables (kve_evict must reject them) */
} kve_case_limits;

/* The draws, from tests/lib/kve_test_base.h's kve_splitmix64: below @p bound
 * (0 when 0). */
uint32_t kve_rand_below(uint64_t *state, uint32_t bound);
/* Percent chance. */
int kve_chance(uint64_t *state, uint32_t percent);
/* a[0..n) = a random permutation of 0..n-1. */
void kve_rand_perm(uint64_t *state, uint32_t *a, uint32_t n);

/* Append a master buffer of @p bytes (filled with 0xee); 0, or -1. */
int kve_case_add(kve_case *c, size_t bytes);

/* A random eviction problem; 0, or -1 when out of memory. */
int kve_case_evict(kve_case *c, uint64_t *rng, const kve_case_limits *lim);

/*
 * A random compaction problem after @p evict: its slot tables, the
 * evicted lists of @p reference (a CPU context, host memory), random cache
 * layouts, in place or not; with lim->errors, some lists are broken.
 */
int kve_case_compact(kve_case *c, const kve_case *evict, kve_context *reference, uint64_t *rng,
                     const kve_case_limits *lim);

void kve_case_free(kve_case *c);

/* Fresh host copies of the master buffers (outputs filled with 0xee). */
int kve_case_host_copy(const kve_case *c, kve_case_bufs *out);
void kve_case_host_free(const kve_case *c, kve_case_bufs *bufs);

/* The case's structs over @p bufs. */
void kve_case_bind_evict(const kve_case *c, const kve_case_bufs *bufs, kve_batch *b,
                         kve_evict_out *o);
void kve_case_bind_compact(const kve_case *c, const kve_case_bufs *bufs, kve_compact_desc *d);

/* 0 when the outputs in @p x and @p y (host copies) agree; else 1 with the
 * first difference described in @p why. */
int kve_case_compare(const kve_case *c, const kve_case_bufs *x, const kve_case_bufs *y, char *why,
                     size_t why_bytes);

/* Run the case (kve_evict, kve_compact or kve_cache_write) on @p ctx over @p bufs; the
 * eviction gets @p workspace (NULL: the library allocates). */
kve_status kve_case_run(kve_context *ctx, const kve_case *c, const kve_case_bufs *bufs,
                        void *workspace, size_t workspace_bytes);

/* Whether two runs of a case agree: the same status; for an error the same
 * head (cache write: token, when both name one) in the message
 * (kve_last_error() style), else the same outputs.
 * 0 when they do; else 1 with the difference in @p why. */
int kve_case_verdict(const kve_case *c, kve_status st_a, const char *msg_a,
                     const kve_case_bufs *a, kve_status st_b, const char *msg_b,
                     const kve_case_bufs *b, char *why, size_t why_bytes);

#endif

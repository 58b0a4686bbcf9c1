/*
 * kve_engine_cases.h — random kve_cache_write problems (kve_case with
 * is_cache_write) for the emulated and device tests: every layout (NHD
 * through a block table, HND through indptr / indices / last_page_len,
 * contiguous), any entry size, padded and dense strides, shared-head
 * slots, misaligned bases; with lim->errors, some rows, slots, page ids or
 * indptr entries broken.
 */
#ifndef KVE_ENGINE_CASES_H
#define KVE_ENGINE_CASES_H

#include "kve_cases.h"

typedef struct kve_cw_limits {
    uint32_t max_tokens; /* 1..max_tokens tokens */
    uint32_t max_heads;  /* 1..max_heads heads (at most 8) */
    int errors;          /* 1: break the contents the host checks */
} kve_cw_limits;

/* A random cache write; 0, or -1 when out of memory. */
int kve_case_cache_write(kve_case *c, uint64_t *rng, const kve_cw_limits *lim);

void kve_case_bind_cache_write(const kve_case *c, const kve_case_bufs *bufs,
                               kve_cache_write_desc *d);

/* The token a cache-write error message names ("[token N]" or
 * "token_row[N]"), or -1. */
long long kve_message_token(const char *msg);

/*
 * Whether the (token, head) a device error message names is the one the
 * host checks (frontend/cache_write.c) would name first: @p cpu (a CPU
 * context) accepts the tokens before it, rejects that entry alone, and
 * accepts the heads before it. 0 when so; else 1 with the reason in @p why.
 */
int kve_cw_check_blame(kve_context *cpu, const kve_case *c, const char *msg, char *why,
                       size_t why_bytes);

#endif

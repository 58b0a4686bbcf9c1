/*
 * kve_backend.h — the contract between the front end (frontend/api.c and the
 * other public entry points in frontend/) and a backend (backends/<name>: one
 * driver per backend, exporting one table of operations):
 *
 *   1. struct kve_context, which every public call receives;
 *   2. kve_backend_ops, the table a backend fills (designated initializers),
 *      whose operations take the plain data of common/kve_jobs.h (jobs,
 *      plans, scorer calls) that the kernels read without a context.
 *
 * The front end validates every argument before it calls an operation; a
 * backend never re-validates. The CPU backend (backends/cpu.c) is linked
 * into the library; the GPU backends (backends/gpu.cu, built by
 * kernels_cuda/ and kernels_hip/) are shared objects loaded at run time
 * (frontend/registry.c), exporting KVE_BACKEND_ENTRY_SYMBOL; the front end
 * checks the ABI version of the table they return before using it.
 */
#ifndef KVE_BACKEND_H
#define KVE_BACKEND_H

#include "kve_handle.h"
#include "kve_jobs.h"
#include "kvevict.h"

/* 5: one score op (kve_score_call); rounds in state_update. 6: state_evict
 * folded into evict (kve_evict_call); kve_score_call.scratch_bytes; the
 * context's score_spans. */
#define KVE_BACKEND_ABI_VERSION 6u
#define KVE_BACKEND_ENTRY_SYMBOL "kve_backend_entry_v1"

/* ---- The context ---------------------------------------------------------- */
struct kve_context {
    kve_backend backend;
    const struct kve_backend_ops *ops;
    int threads;     /* resolved, >= 1 */
    kve_cpu_isa isa; /* resolved, never AUTO */
    int device;
    void *stream;
    void *impl; /* the backend's own state */
    kve_handle handle; /* live or destroyed, and the ring of its states (kve_handle.h) */
    /* The front end's: room for score_spans_room output spans of kve_score's
     * checks (frontend/score.c), grown by calls and by each state's creation
     * (its calls' largest), so a state's scoring call allocates nothing. */
    void *score_spans;
    size_t score_spans_room;
};

/* ---- The operations ------------------------------------------------------- */
typedef struct kve_backend_ops {
    uint32_t abi_version;
    kve_backend kind;
    const char *name;
    /* 1 when backend memory is host memory (lets the front end read contents). */
    int host_memory;

    kve_status (*probe)(int *out_available);
    kve_status (*context_init)(kve_context *ctx);
    void (*context_fini)(kve_context *ctx);
    kve_status (*set_device)(kve_context *ctx, int device);

    kve_status (*alloc)(kve_context *ctx, size_t bytes, void **out);
    kve_status (*free)(kve_context *ctx, void *ptr);
    kve_status (*copy)(kve_context *ctx, void *dst, const void *src, size_t bytes,
                       kve_copy_kind kind);
    kve_status (*synchronize)(kve_context *ctx);

    kve_status (*keys)(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                       size_t n, uint64_t *keys);
    kve_status (*evict_workspace_size)(kve_context *ctx, const kve_batch *batch,
                                       size_t *out_bytes);
    /* Arguments validated; the tables' contents (positions >= -1, no
     * repeat unless KVE_TRUSTED_SLOTS, no NaN score at a candidate) are the
     * backend's to check, in the pass that reads them, naming the lowest
     * bad head. A call over rows (kve_evict_call.rows) is an append's
     * wave: one launch over the call's rows. */
    kve_status (*evict)(kve_context *ctx, const kve_evict_call *call);
    kve_status (*compact)(kve_context *ctx, const kve_compact_desc *desc);

    /* Engine integration (the jobs above). NULL: the public call returns
     * KVE_ERR_UNAVAILABLE. state_update runs a list of independent jobs on a
     * cache state's tables (a wave's eviction is evict over rows);
     * cache_write gets a desc with dense strides resolved. */
    kve_status (*state_update)(kve_context *ctx, const kve_state_update *update);
    kve_status (*cache_write)(kve_context *ctx, const kve_cache_write_desc *desc);
    /* Host to backend memory in stream order, without waiting for the
     * stream (copy waits): @p src may be reused once it returns (a GPU's
     * driver stages pageable memory before returning). The state's jobs. */
    kve_status (*upload)(kve_context *ctx, void *dst, const void *src, size_t bytes);
    /* The scorers (kve_score_call above), one launch. NULL:
     * KVE_ERR_UNAVAILABLE. */
    kve_status (*score)(kve_context *ctx, const kve_score_call *call);
    /* One wave's plan of an append (kve_state_plan above), one launch of
     * one block; a refusal is raised on the device (host memory: returned,
     * with its message). */
    kve_status (*state_plan)(kve_context *ctx, const kve_state_plan *plan);
} kve_backend_ops;

/* Services the core lends a backend loaded at run time. */
typedef struct kve_host_services {
    uint32_t abi_version;
    kve_status (*set_error)(kve_status status, const char *fmt, ...);
} kve_host_services;

typedef const kve_backend_ops *(*kve_backend_entry_fn)(const kve_host_services *host);

/* The CPU backend's table (backends/cpu.c), linked into the library, and
 * its planner op (backends/cpu_state.c). */
const kve_backend_ops *kve_cpu_backend_ops(void);
kve_status kve_cpu_state_plan(kve_context *ctx, const kve_state_plan *p);

#endif

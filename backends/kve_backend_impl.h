/*
 * kve_backend_impl.h — what a backend implements: one table of operations,
 * reached only through the dispatch in backends/api.c, which validates
 * every argument first (a backend never re-validates).
 *
 * GPU backends live in their own shared objects (libkvevict_cuda.so,
 * libkvevict_hip.so) exporting KVE_BACKEND_ENTRY_SYMBOL; the core checks
 * the ABI version of the table they return before using it.
 */
#ifndef KVE_BACKEND_IMPL_H
#define KVE_BACKEND_IMPL_H

#include "kvevict.h"
#include "kve_state.h"

#define KVE_BACKEND_ABI_VERSION 2u /* 2: state_evict, upload */
#define KVE_BACKEND_ENTRY_SYMBOL "kve_backend_entry_v1"

struct kve_context {
    kve_backend backend;
    const struct kve_backend_ops *ops;
    int threads;     /* resolved, >= 1 */
    kve_cpu_isa isa; /* resolved, never AUTO */
    int device;
    void *stream;
    void *impl; /* the backend's own state */
};

typedef struct kve_backend_ops {
    uint32_t abi_version;
    kve_backend kind;
    const char *name;
    /* 1 when backend memory is host memory (lets common/ check contents). */
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
    kve_status (*evict)(kve_context *ctx, const kve_batch *batch, const kve_evict_out *out,
                        void *workspace, size_t workspace_bytes);
    kve_status (*compact)(kve_context *ctx, const kve_compact_desc *desc);

    /* Engine integration (common/kve_state.h). NULL: the public call returns
     * KVE_ERR_UNAVAILABLE. state_update runs a list of independent jobs on a
     * cache state's tables; state_evict the eviction of an append's wave
     * (one launch over the call's rows); cache_write gets a desc with dense
     * strides resolved. */
    kve_status (*state_update)(kve_context *ctx, const kve_state_update *update);
    kve_status (*cache_write)(kve_context *ctx, const kve_cache_write_desc *desc);
    kve_status (*state_evict)(kve_context *ctx, const kve_state_evict *evict);
    /* Host to backend memory in stream order, without waiting for the
     * stream (copy waits): @p src may be reused once it returns (a GPU's
     * driver stages pageable memory before returning). The state's jobs. */
    kve_status (*upload)(kve_context *ctx, void *dst, const void *src, size_t bytes);
    /* kve_score (common/device/score_body.h): desc validated, key strides
     * resolved, rows in host memory. NULL: KVE_ERR_UNAVAILABLE. */
    kve_status (*score)(kve_context *ctx, const kve_score_desc *desc);
} kve_backend_ops;

/* Services the core lends a backend loaded at run time. */
typedef struct kve_host_services {
    uint32_t abi_version;
    kve_status (*set_error)(kve_status status, const char *fmt, ...);
} kve_host_services;

typedef const kve_backend_ops *(*kve_backend_entry_fn)(const kve_host_services *host);

/* The registry (backends/registry.c). */
const kve_backend_ops *kve_cpu_backend_ops(void); /* kernels_cpu/cpu_backend.c */
kve_status kve_cpu_score(kve_context *ctx, const kve_score_desc *desc); /* kernels_cpu/score_cpu.c */
/* The table of @p backend (not AUTO) or NULL when it cannot be loaded here. */
const kve_backend_ops *kve_registry_get(kve_backend backend);
/* Why kve_registry_get(@p backend) is NULL ("" when it is not): which
 * library, runtime, driver or device is missing. */
const char *kve_registry_reason(kve_backend backend);
/* Resolve AUTO ($KVE_BACKEND, then the first available). */
kve_status kve_registry_resolve(kve_backend requested, kve_backend *out);

#endif

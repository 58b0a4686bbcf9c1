/*
 * api.c — the public entry points: validate once (validate.c), then call the
 * context's backend through its table of operations.
 */
#include <stdlib.h>
#include <string.h>

#include "kve_backend.h"
#include "kve_check.h"
#include "kve_registry.h"
#include "kve_cpu_isa.h"
#include "kve_digest.h"
#include "kve_error.h"
#include "kve_util.h"
#include "kve_validate.h"

/* The body of a context getter: both pointers checked, then the field. */
#define KVE_CONTEXT_GET(ctx, out, field)                                                         \
    do {                                                                                         \
        KVE_CHECK_CTX(ctx);                                                                      \
        KVE_CHECK_OUT(out);                                                                      \
        *(out) = (ctx)->field;                                                                   \
        return KVE_OK;                                                                           \
    } while (0)

kve_status kve_context_create(kve_backend backend, kve_context **out)
{
    KVE_CHECK_OUT(out);
    *out = NULL;
    KVE_RETURN_ERROR_IF(backend < KVE_BACKEND_AUTO || backend > KVE_BACKEND_HIP, KVE_ERR_INVALID,
                        "backend = %d: not a kve_backend value", (int)backend);
    kve_backend resolved;
    KVE_TRY(kve_registry_resolve(backend, &resolved));
    const kve_backend_ops *ops = kve_registry_get(resolved);
    KVE_RETURN_ERROR_IF(!ops, KVE_ERR_UNAVAILABLE, "backend = %s: not available here: %s",
                        kve_backend_name(resolved), kve_registry_reason(resolved));
    kve_context *ctx = (kve_context *)calloc(1, sizeof *ctx);
    KVE_RETURN_ERROR_IF(!ctx, KVE_ERR_NOMEM, "cannot allocate a context (%zu bytes)",
                        sizeof *ctx);
    ctx->backend = resolved;
    ctx->ops = ops;
    ctx->threads = kve_cpu_default_threads();
    kve_status st = kve_cpu_isa_resolve(KVE_CPU_ISA_AUTO, &ctx->isa);
    if (st == KVE_OK)
        st = ops->context_init(ctx);
    if (st != KVE_OK) {
        free(ctx);
        return st;
    }
    if (st == KVE_OK)
        st = kve_handle_open(&ctx->handle, KVE_HANDLE_CONTEXT, ctx);
    if (st != KVE_OK) {
        ops->context_fini(ctx);
        free(ctx);
        return st;
    }
    kve_error_clear();
    *out = ctx;
    return KVE_OK;
}

kve_status kve_context_destroy(kve_context *ctx)
{
    if (!ctx)
        return KVE_OK;
    KVE_CHECK_CTX(ctx);
    kve_state *s;
    while ((s = (kve_state *)kve_handle_first(&ctx->handle))) /* its states first */
        kve_state_destroy(s);
    void *buf;
    if ((buf = kve_handle_take_owned(ctx)) != NULL) { /* its kve_alloc buffers, after its work */
        (void)ctx->ops->synchronize(ctx);
        do
            (void)ctx->ops->free(ctx, buf);
        while ((buf = kve_handle_take_owned(ctx)) != NULL);
    }
    ctx->ops->context_fini(ctx);
    free(ctx->score_spans);
    ctx->score_spans = NULL;
    kve_handle_retire(&ctx->handle, ctx);
    return KVE_OK;
}

kve_status kve_context_get_backend(const kve_context *ctx, kve_backend *out)
{
    KVE_CONTEXT_GET(ctx, out, backend);
}

kve_status kve_context_set_threads(kve_context *ctx, int threads)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(threads < 0 || threads > 1024, KVE_ERR_RANGE,
                        "threads = %d: must be 0 (OpenMP's default) or 1..1024", threads);
    ctx->threads = threads ? threads : kve_cpu_default_threads();
    return KVE_OK;
}

kve_status kve_context_get_threads(const kve_context *ctx, int *out)
{
    KVE_CONTEXT_GET(ctx, out, threads);
}

kve_status kve_context_set_cpu_isa(kve_context *ctx, kve_cpu_isa isa)
{
    KVE_CHECK_CTX(ctx);
    return kve_cpu_isa_resolve(isa, &ctx->isa);
}

kve_status kve_context_get_cpu_isa(const kve_context *ctx, kve_cpu_isa *out)
{
    KVE_CONTEXT_GET(ctx, out, isa);
}

kve_status kve_context_set_device(kve_context *ctx, int device)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(device < 0, KVE_ERR_RANGE, "device = %d: must be >= 0", device);
    KVE_TRY(ctx->ops->set_device(ctx, device));
    ctx->device = device;
    return KVE_OK;
}

kve_status kve_context_get_device(const kve_context *ctx, int *out)
{
    KVE_CONTEXT_GET(ctx, out, device);
}

kve_status kve_context_set_stream(kve_context *ctx, void *stream)
{
    KVE_CHECK_CTX(ctx);
    ctx->stream = stream;
    return KVE_OK;
}

kve_status kve_context_get_stream(const kve_context *ctx, void **out)
{
    KVE_CONTEXT_GET(ctx, out, stream);
}

kve_status kve_keys(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                    size_t n, uint64_t *keys)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(flags & ~(uint32_t)KVE_KEY_FLAGS, KVE_ERR_INVALID,
                        "flags = 0x%x: kve_keys takes only KVE_PERSISTENT, KVE_SHARED_HEADS, "
                        "KVE_SHARED_LAYERS (KVE_SCORED and KVE_TRUSTED_SLOTS are not key flags)",
                        flags);
    if (n == 0)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!coords, KVE_ERR_NULL, "coords is NULL (n = %zu)", n);
    KVE_RETURN_ERROR_IF(!keys, KVE_ERR_NULL, "keys is NULL (n = %zu)", n);
    KVE_RETURN_ERROR_IF(n > SIZE_MAX / sizeof(kve_coord), KVE_ERR_OVERFLOW,
                        "n = %zu coordinates overflow", n);
    return ctx->ops->keys(ctx, seed, flags, coords, n, keys);
}

kve_status kve_evict_workspace_size(kve_context *ctx, const kve_batch *batch, size_t *out_bytes)
{
    KVE_CHECK_CTX(ctx);
    KVE_CHECK_OUT(out_bytes);
    size_t heads;
    KVE_TRY(kve_validate_batch(batch, &heads));
    return ctx->ops->evict_workspace_size(ctx, batch, out_bytes);
}

kve_status kve_evict(kve_context *ctx, const kve_batch *batch, const kve_evict_out *out,
                     void *workspace, size_t workspace_bytes)
{
    KVE_CHECK_CTX(ctx);
    size_t heads, need;
    KVE_TRY(kve_validate_batch(batch, &heads));
    KVE_TRY(kve_validate_evict_out(batch, heads, out));
    KVE_RETURN_ERROR_IF(!workspace && workspace_bytes, KVE_ERR_NULL,
                        "workspace is NULL but workspace_bytes = %zu", workspace_bytes);
    if (heads == 0)
        return KVE_OK;
    /* The tables' contents are the backend's to check, in the pass that
     * evicts (the CPU: each head while it is in L1; a GPU: on the device). */
    KVE_TRY(ctx->ops->evict_workspace_size(ctx, batch, &need));
    void *owned = NULL;
    if (!workspace && need) {
        KVE_TRY(ctx->ops->alloc(ctx, need, &owned));
        workspace = owned;
        workspace_bytes = need;
    }
    KVE_RETURN_ERROR_IF(workspace_bytes < need, KVE_ERR_WORKSPACE,
                        "workspace_bytes = %zu: kve_evict_workspace_size says %zu", workspace_bytes,
                        need);
    kve_evict_call call = {batch, out, workspace, workspace_bytes, NULL};
    kve_status st = ctx->ops->evict(ctx, &call);
    if (owned) {
        /* The GPU work must finish before its workspace is released. */
        kve_status sync = ctx->ops->synchronize(ctx);
        ctx->ops->free(ctx, owned);
        if (st == KVE_OK)
            st = sync;
    }
    return st;
}

kve_status kve_compact(kve_context *ctx, const kve_compact_desc *desc)
{
    KVE_CHECK_CTX(ctx);
    size_t heads;
    KVE_TRY(kve_validate_compact(desc, &heads));
    if (heads == 0 || desc->n_slots == 0)
        return KVE_OK;
    if (ctx->ops->host_memory)
        KVE_TRY(kve_validate_compact_contents(desc, heads));
    return ctx->ops->compact(ctx, desc);
}

/* Host copy of @p bytes of backend memory (or the pointer itself on the CPU). */
static kve_status kve_host_view(kve_context *ctx, const void *src, size_t bytes, void **owned,
                                const void **view)
{
    *owned = NULL;
    if (ctx->ops->host_memory || !src || !bytes) {
        *view = src;
        return KVE_OK;
    }
    *owned = malloc(bytes);
    KVE_RETURN_ERROR_IF(!*owned, KVE_ERR_NOMEM,
                        "cannot allocate %zu bytes of host memory to read backend memory", bytes);
    kve_status st = ctx->ops->copy(ctx, *owned, src, bytes, KVE_COPY_BACKEND_TO_HOST);
    *view = *owned;
    return st;
}

kve_status kve_digest(kve_context *ctx, const kve_batch *batch, const kve_evict_out *evicted,
                      uint64_t *out_digest)
{
    KVE_CHECK_CTX(ctx);
    KVE_CHECK_OUT(out_digest);
    size_t heads;
    KVE_TRY(kve_validate_batch(batch, &heads));
    if (evicted) {
        KVE_RETURN_ERROR_IF(heads && (!evicted->evicted || !evicted->n_evicted), KVE_ERR_NULL,
                            "evicted.evicted or evicted.n_evicted is NULL");
        KVE_RETURN_ERROR_IF(heads && evicted->evicted_stride == 0, KVE_ERR_RANGE,
                            "evicted.evicted_stride = 0: must be >= 1");
    }
    size_t rows = 0; /* kve_validate_batch bounded it */
    kve_rows_span(heads, batch->slot_pos_stride, batch->n_slots, 4, &rows);
    void *own[4] = {NULL, NULL, NULL, NULL};
    const void *seqs = NULL, *slots = NULL, *ev = NULL, *nev = NULL;
    kve_status st = kve_host_view(ctx, batch->seqs, batch->n_seqs * sizeof(kve_seq), &own[0], &seqs);
    if (st == KVE_OK)
        st = kve_host_view(ctx, batch->slot_pos, rows * 4, &own[1], &slots);
    if (st == KVE_OK && evicted)
        st = kve_host_view(ctx, evicted->n_evicted, heads * 4, &own[3], &nev);
    /* The evicted lists are read up to the last listed slot: kve_evict's rows
     * may be shorter than the stride, and need no room at all when nothing
     * can be evicted (so any stride is valid there). Counts past the row are
     * kve_digest_host's error. */
    size_t ev_rows = 0;
    for (size_t i = 0; st == KVE_OK && evicted && i < heads; i++) {
        uint32_t ne = ((const uint32_t *)nev)[i];
        size_t end;
        if (ne == 0 || ne > batch->n_slots || ne > evicted->evicted_stride)
            continue;
        if (kve_rows_span(i + 1, evicted->evicted_stride, ne, 4, &end))
            st = kve_error_set(KVE_ERR_OVERFLOW, "evicted.evicted_stride = %zu overflows at head %zu",
                               evicted->evicted_stride, i);
        else if (end > ev_rows)
            ev_rows = end;
    }
    if (st == KVE_OK && evicted)
        st = kve_host_view(ctx, evicted->evicted, ev_rows * 4, &own[2], &ev);
    if (st == KVE_OK)
        st = kve_digest_host(batch, (const kve_seq *)seqs, (const int32_t *)slots,
                             (const int32_t *)ev, evicted ? evicted->evicted_stride : 0,
                             (const uint32_t *)nev, out_digest);
    for (int i = 0; i < 4; i++)
        free(own[i]);
    return st;
}

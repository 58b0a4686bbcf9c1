/*
 * memory.c — a context's backend memory and stream order: the public
 * entry points kve_alloc, kve_free, kve_copy and kve_context_synchronize,
 * checked here, then the backend's table. The cache state (state.c,
 * state_pool.c) and the entry points of api.c call them.
 */
#include <stdint.h>

#include "kve_backend.h"
#include "kve_check.h"
#include "kve_error.h"
#include "kve_util.h"

kve_status kve_context_synchronize(kve_context *ctx)
{
    KVE_CHECK_CTX(ctx);
    return ctx->ops->synchronize(ctx);
}

kve_status kve_alloc(kve_context *ctx, size_t bytes, void **out)
{
    KVE_CHECK_CTX(ctx);
    KVE_CHECK_OUT(out);
    *out = NULL;
    KVE_RETURN_ERROR_IF(bytes == 0, KVE_ERR_RANGE, "bytes = 0: must be > 0");
    /* Every backend rounds a request up to its 256-byte alignment; that
     * rounding must not wrap to a tiny buffer. */
    KVE_RETURN_ERROR_IF(bytes > SIZE_MAX - (KVE_ALLOC_ALIGN - 1), KVE_ERR_OVERFLOW,
                        "bytes = %zu: rounding up to a multiple of %d overflows size_t", bytes,
                        KVE_ALLOC_ALIGN);
    KVE_TRY(ctx->ops->alloc(ctx, bytes, out));
    kve_status st = kve_handle_track(*out, ctx); /* the context frees it at its destroy */
    if (st != KVE_OK) {
        ctx->ops->free(ctx, *out);
        *out = NULL;
    }
    return st;
}

kve_status kve_free(kve_context *ctx, void *ptr)
{
    KVE_CHECK_CTX(ctx);
    if (!ptr)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!kve_handle_untrack(ptr, ctx), KVE_ERR_INVALID,
                        "ptr (%p): not a buffer kve_alloc gave this context (freed already, "
                        "another context's, or never allocated by kve_alloc)",
                        ptr);
    kve_status st = ctx->ops->free(ctx, ptr);
    if (st != KVE_OK) /* refused (a capturing stream): still this context's */
        (void)kve_handle_track(ptr, ctx);
    return st;
}

kve_status kve_copy(kve_context *ctx, void *dst, const void *src, size_t bytes, kve_copy_kind kind)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(kind < KVE_COPY_HOST_TO_BACKEND || kind > KVE_COPY_BACKEND_TO_BACKEND,
                        KVE_ERR_INVALID, "kind = %d: not a kve_copy_kind value", (int)kind);
    if (bytes == 0)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!dst, KVE_ERR_NULL, "dst is NULL");
    KVE_RETURN_ERROR_IF(!src, KVE_ERR_NULL, "src is NULL");
    const char *d = (const char *)dst, *s = (const char *)src;
    KVE_RETURN_ERROR_IF(kind == KVE_COPY_BACKEND_TO_BACKEND && d < s + bytes && s < d + bytes,
                        KVE_ERR_ALIAS, "dst %p and src %p overlap over %zu bytes", dst, src,
                        bytes);
    return ctx->ops->copy(ctx, dst, src, bytes, kind);
}

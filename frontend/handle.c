/* handle.c — live contexts and states (kve_handle.h): the check on entry,
 * each context's ring of states, and the quarantine of destroyed ones. */
#include <pthread.h>
#include <stdlib.h>

#include "kve_handle.h"

static pthread_mutex_t kve_handle_lock = PTHREAD_MUTEX_INITIALIZER;
static void *kve_quarantine[KVE_HANDLE_QUARANTINE];
static unsigned kve_quarantine_next;

kve_status kve_handle_check(const void *p, const kve_handle *h, uint32_t kind, const char *name)
{
    KVE_RETURN_ERROR_IF(!h, KVE_ERR_NULL, "%s is NULL", name);
    if (h->magic == kind)
        return KVE_OK;
    const char *what = kind == KVE_HANDLE_STATE ? "state" : "context";
    KVE_RETURN_ERROR_IF(h->magic == KVE_HANDLE_DEAD && h->kind == kind, KVE_ERR_INVALID,
                        "%s (%p): this %s was destroyed (%s)", name, p, what,
                        kind == KVE_HANDLE_STATE
                            ? "by kve_state_destroy, or with its context by kve_context_destroy"
                            : "by kve_context_destroy");
    return kve_error_set(KVE_ERR_INVALID,
                         "%s (%p): not a live %s (not made by kve_%s_create, or destroyed long "
                         "ago)",
                         name, p, what, what);
}

void kve_handle_open(kve_handle *h, uint32_t kind, void *self)
{
    h->magic = kind;
    h->kind = kind;
    h->self = self;
    h->next = h->prev = h;
}

void kve_handle_attach(kve_handle *ctx, kve_handle *s)
{
    pthread_mutex_lock(&kve_handle_lock);
    s->next = ctx->next;
    s->prev = ctx;
    ctx->next->prev = s;
    ctx->next = s;
    pthread_mutex_unlock(&kve_handle_lock);
}

void *kve_handle_first(kve_handle *ctx)
{
    pthread_mutex_lock(&kve_handle_lock);
    void *first = ctx->next != ctx ? ctx->next->self : NULL;
    pthread_mutex_unlock(&kve_handle_lock);
    return first;
}

void kve_handle_retire(kve_handle *h, void *block)
{
    pthread_mutex_lock(&kve_handle_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->next = h->prev = h;
    h->magic = KVE_HANDLE_DEAD;
    void *oldest = kve_quarantine[kve_quarantine_next];
    kve_quarantine[kve_quarantine_next] = block;
    kve_quarantine_next = (kve_quarantine_next + 1) % KVE_HANDLE_QUARANTINE;
    pthread_mutex_unlock(&kve_handle_lock);
    free(oldest);
}

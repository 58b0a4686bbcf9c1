/* kve_handle.h — contexts and states know whether they are live (issues 47,
 * 60). Every handle made is in one registry, found by its address under a
 * lock: the check on entry of every public function that takes one
 * (KVE_CHECK_CTX, KVE_CHECK_STATE) looks the caller's pointer up there and
 * never reads through it, so a destroyed handle, a handle of the other kind
 * (a context passed as a state) or any other pointer is refused with
 * KVE_ERR_INVALID. A destroyed handle's struct is not freed at once: each
 * thread keeps the last KVE_HANDLE_QUARANTINE handles it destroyed (until
 * it exits), reported as destroyed, and no new handle takes their address
 * for that long, whatever other threads create and destroy. After that its
 * address may hold a new handle, which the check accepts.
 * A context lists its live states; kve_context_destroy destroys them. */
#ifndef KVE_HANDLE_H
#define KVE_HANDLE_H

#include <stdint.h>

#include "kve_error.h"

#define KVE_HANDLE_QUARANTINE 64

enum kve_handle_kind {
    KVE_HANDLE_CONTEXT = 0x6b766543u, /* "Cevk" */
    KVE_HANDLE_STATE = 0x6b766553u,   /* "Sevk" */
    KVE_HANDLE_DEAD = 0x64616544u,    /* "Dead": destroyed, quarantined */
    KVE_HANDLE_MEMORY = 0x6b76654du   /* "Mevk": a kve_alloc buffer (registry only) */
};

typedef struct kve_handle {
    uint32_t magic;
    uint32_t kind; /* what it was: kept after destroy, for the message */
    void *self;    /* the context or state that holds it */
    /* A context: the ring of its live states (itself when none); a state:
     * its place in its context's ring. */
    struct kve_handle *next, *prev;
} kve_handle;

/* KVE_OK when @p p, the caller's pointer, is a live handle of @p kind;
 * else KVE_ERR_NULL or KVE_ERR_INVALID naming @p name and @p p (destroyed,
 * of the other kind, or unknown). Reads nothing through @p p. */
kve_status kve_handle_check(const void *p, uint32_t kind, const char *name);
/* Marks @p h live, of @p kind, held by @p self (the allocation holding
 * it), registered; an empty ring. KVE_ERR_NOMEM: not registered. */
kve_status kve_handle_open(kve_handle *h, uint32_t kind, void *self);
/* Adds state @p s to context @p ctx's ring. */
void kve_handle_attach(kve_handle *ctx, kve_handle *s);
/* The first live state of context @p ctx's ring, or NULL. */
void *kve_handle_first(kve_handle *ctx);
/* Marks @p h destroyed (taken off its ring), and quarantines @p block, the
 * allocation holding it (its self), in the calling thread's quarantine,
 * freeing the oldest one there. */
void kve_handle_retire(kve_handle *h, void *block);

/* kve_alloc's buffer @p ptr registered as context @p owner's (KVE_ERR_NOMEM
 * when it cannot be). */
kve_status kve_handle_track(const void *ptr, const void *owner);
/* 1 when @p ptr is a buffer of context @p owner, no longer registered. */
int kve_handle_untrack(const void *ptr, const void *owner);
/* One buffer still registered to context @p owner, unregistered; NULL when
 * none is left (kve_context_destroy frees them). */
void *kve_handle_take_owned(const void *owner);

#define KVE_CHECK_CTX(ctx)                                                                       \
    KVE_TRY(kve_handle_check((const void *)(ctx), KVE_HANDLE_CONTEXT, "ctx"))
#define KVE_CHECK_STATE(s)                                                                       \
    KVE_TRY(kve_handle_check((const void *)(s), KVE_HANDLE_STATE, "state"))

#endif

/* handle.c — live contexts and states (kve_handle.h): a registry of every
 * handle made and not yet freed, found by its address under one lock, so
 * the check never reads through the caller's pointer; each context's ring
 * of states; each thread's quarantine of the handles it destroyed. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kve_handle.h"

/* One registered handle: live, or destroyed and quarantined (dead); or a
 * kve_alloc buffer (KVE_HANDLE_MEMORY) of its context @p owner. */
typedef struct kve_reg_entry {
    const void *p; /* NULL: an empty place */
    uint32_t kind, dead;
    const void *owner;
} kve_reg_entry;

/* A thread's last KVE_HANDLE_QUARANTINE destroyed handles, oldest at next;
 * every ring is on one list, so the blocks stay reachable. */
typedef struct kve_ring {
    void *block[KVE_HANDLE_QUARANTINE];
    unsigned next;
    struct kve_ring *prev, *after;
} kve_ring;

static pthread_mutex_t kve_handle_lock = PTHREAD_MUTEX_INITIALIZER;
static kve_reg_entry *kve_reg; /* open addressing, linear probing; a power of 2 */
static size_t kve_reg_cap, kve_reg_used;
static kve_ring *kve_rings;
static pthread_key_t kve_ring_key;
static pthread_once_t kve_ring_once = PTHREAD_ONCE_INIT;
static _Thread_local kve_ring *kve_my_ring;

static size_t kve_reg_home(const void *p)
{
    return (size_t)(((uint64_t)(uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (kve_reg_cap - 1);
}

/* Under the lock: @p p's entry, or NULL. */
static kve_reg_entry *kve_reg_find(const void *p)
{
    for (size_t i = kve_reg_cap ? kve_reg_home(p) : 0; kve_reg_cap && kve_reg[i].p;
         i = (i + 1) & (kve_reg_cap - 1))
        if (kve_reg[i].p == p)
            return &kve_reg[i];
    return NULL;
}

/* Under the lock: @p p registered live, of @p kind; 0 when out of memory. */
static int kve_reg_add(const void *p, uint32_t kind, const void *owner)
{
    if ((kve_reg_used + 1) * 2 > kve_reg_cap) {
        size_t old = kve_reg_cap, cap = old ? 2 * old : 64;
        kve_reg_entry *was = kve_reg, *t = (kve_reg_entry *)calloc(cap, sizeof *t);
        if (!t)
            return 0;
        kve_reg = t;
        kve_reg_cap = cap;
        for (size_t i = 0; i < old; i++)
            if (was[i].p) {
                size_t j = kve_reg_home(was[i].p);
                while (kve_reg[j].p)
                    j = (j + 1) & (cap - 1);
                kve_reg[j] = was[i];
            }
        free(was);
    }
    size_t i = kve_reg_home(p);
    while (kve_reg[i].p)
        i = (i + 1) & (kve_reg_cap - 1);
    kve_reg[i] = (kve_reg_entry){p, kind, 0, owner};
    kve_reg_used++;
    return 1;
}

/* Under the lock: @p p's entry removed (backward-shift deletion). */
static void kve_reg_remove(const void *p)
{
    kve_reg_entry *e = kve_reg_find(p);
    if (!e)
        return;
    size_t mask = kve_reg_cap - 1, i = (size_t)(e - kve_reg), j = i;
    kve_reg[i].p = NULL;
    kve_reg_used--;
    for (;;) {
        j = (j + 1) & mask;
        if (!kve_reg[j].p)
            return;
        size_t k = kve_reg_home(kve_reg[j].p);
        /* entry j stays when its home lies cyclically in (i, j] */
        if ((i < j && i < k && k <= j) || (j < i && (i < k || k <= j)))
            continue;
        kve_reg[i] = kve_reg[j];
        kve_reg[j].p = NULL;
        i = j;
    }
}

/* A thread's exit: its quarantined handles freed, its ring gone. */
static void kve_ring_exit(void *arg)
{
    kve_ring *r = (kve_ring *)arg;
    kve_my_ring = NULL; /* a destroy in a later destructor starts a new ring */
    pthread_mutex_lock(&kve_handle_lock);
    for (unsigned i = 0; i < KVE_HANDLE_QUARANTINE; i++)
        if (r->block[i])
            kve_reg_remove(r->block[i]);
    if (r->prev)
        r->prev->after = r->after;
    else
        kve_rings = r->after;
    if (r->after)
        r->after->prev = r->prev;
    pthread_mutex_unlock(&kve_handle_lock);
    for (unsigned i = 0; i < KVE_HANDLE_QUARANTINE; i++)
        free(r->block[i]);
    free(r);
}

static void kve_ring_key_make(void) { (void)pthread_key_create(&kve_ring_key, kve_ring_exit); }

kve_status kve_handle_check(const void *p, uint32_t kind, const char *name)
{
    KVE_RETURN_ERROR_IF(!p, KVE_ERR_NULL, "%s is NULL", name);
    pthread_mutex_lock(&kve_handle_lock);
    const kve_reg_entry *e = kve_reg_find(p);
    uint32_t found = e ? e->kind : 0, dead = e ? e->dead : 0;
    pthread_mutex_unlock(&kve_handle_lock);
    if (found == kind && !dead)
        return KVE_OK;
    const char *what = kind == KVE_HANDLE_STATE ? "state" : "context";
    KVE_RETURN_ERROR_IF(found == kind, KVE_ERR_INVALID, "%s (%p): this %s was destroyed (%s)",
                        name, p, what,
                        kind == KVE_HANDLE_STATE
                            ? "by kve_state_destroy, or with its context by kve_context_destroy"
                            : "by kve_context_destroy");
    KVE_RETURN_ERROR_IF(found, KVE_ERR_INVALID, "%s (%p): a %s%s, not a %s", name, p,
                        dead ? "destroyed " : "",
                        found == KVE_HANDLE_STATE     ? "kve_state"
                        : found == KVE_HANDLE_CONTEXT ? "kve_context"
                                                      : "buffer of kve_alloc",
                        what);
    return kve_error_set(KVE_ERR_INVALID,
                         "%s (%p): not a live %s (not made by kve_%s_create, or destroyed long "
                         "ago)",
                         name, p, what, what);
}

kve_status kve_handle_open(kve_handle *h, uint32_t kind, void *self)
{
    h->magic = kind;
    h->kind = kind;
    h->self = self;
    h->next = h->prev = h;
    pthread_mutex_lock(&kve_handle_lock);
    int ok = kve_reg_add(self, kind, NULL);
    pthread_mutex_unlock(&kve_handle_lock);
    KVE_RETURN_ERROR_IF(!ok, KVE_ERR_NOMEM, "cannot allocate the registry of live handles");
    return KVE_OK;
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
    (void)pthread_once(&kve_ring_once, kve_ring_key_make);
    kve_ring *r = kve_my_ring;
    if (!r && (r = (kve_ring *)calloc(1, sizeof *r)) != NULL &&
        pthread_setspecific(kve_ring_key, r) != 0) {
        free(r);
        r = NULL;
    }
    pthread_mutex_lock(&kve_handle_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->next = h->prev = h;
    h->magic = KVE_HANDLE_DEAD;
    void *oldest = block; /* no ring (out of memory): freed now, the check reads none of it */
    if (r) {
        if (!kve_my_ring) { /* the thread's first destroy: its ring on the list */
            r->after = kve_rings;
            if (kve_rings)
                kve_rings->prev = r;
            kve_rings = r;
            kve_my_ring = r;
        }
        kve_reg_entry *e = kve_reg_find(h->self);
        if (e)
            e->dead = 1;
        oldest = r->block[r->next];
        r->block[r->next] = block;
        r->next = (r->next + 1) % KVE_HANDLE_QUARANTINE;
    }
    if (oldest)
        kve_reg_remove(oldest);
    pthread_mutex_unlock(&kve_handle_lock);
    free(oldest);
}

kve_status kve_handle_track(const void *ptr, const void *owner)
{
    pthread_mutex_lock(&kve_handle_lock);
    int ok = kve_reg_add(ptr, KVE_HANDLE_MEMORY, owner);
    pthread_mutex_unlock(&kve_handle_lock);
    KVE_RETURN_ERROR_IF(!ok, KVE_ERR_NOMEM, "cannot allocate the registry of kve_alloc buffers");
    return KVE_OK;
}

int kve_handle_untrack(const void *ptr, const void *owner)
{
    pthread_mutex_lock(&kve_handle_lock);
    const kve_reg_entry *e = kve_reg_find(ptr);
    int mine = e && e->kind == KVE_HANDLE_MEMORY && e->owner == owner;
    if (mine)
        kve_reg_remove(ptr);
    pthread_mutex_unlock(&kve_handle_lock);
    return mine;
}

void *kve_handle_take_owned(const void *owner)
{
    void *p = NULL;
    pthread_mutex_lock(&kve_handle_lock);
    for (size_t i = 0; i < kve_reg_cap && !p; i++)
        if (kve_reg[i].p && kve_reg[i].kind == KVE_HANDLE_MEMORY && kve_reg[i].owner == owner)
            p = (void *)(uintptr_t)kve_reg[i].p;
    if (p)
        kve_reg_remove(p);
    pthread_mutex_unlock(&kve_handle_lock);
    return p;
}

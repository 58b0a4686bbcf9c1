/* emu_harness.c — pthreads and barriers standing in for a GPU block. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "emu_harness.h"

struct kve_emu_block {
    pthread_barrier_t bar; /* the block's threads: kve_sync() */
    uint64_t *xbuf[2];     /* shuffle exchange, double-buffered */
};

typedef struct kve_emu_thread {
    kve_emu_pool *pool;
    kve_tc tc;
    pthread_t th;
} kve_emu_thread;

struct kve_emu_pool {
    struct kve_emu_block block;
    pthread_barrier_t gate; /* the block's threads and the launcher */
    kve_emu_thread *threads;
    uint32_t nt, started;
    /* the current launch */
    int quit;
    uint32_t grid;
    unsigned char *smem;
    size_t smem_bytes;
    kve_emu_body body;
    void *arg;
};

void kve_emu_sync(kve_tc *tc) { pthread_barrier_wait(&tc->emu->bar); }

/* One barrier per shuffle: a buffer is written again only two shuffles
 * later, after everyone has passed the barrier that follows its reads. */
uint64_t kve_emu_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    uint64_t *buf = tc->emu->xbuf[tc->xturn];
    tc->xturn ^= 1;
    buf[tc->tid] = v;
    pthread_barrier_wait(&tc->emu->bar);
    return tc->tid % tc->ws >= d ? buf[tc->tid - d] : v;
}

static void *kve_emu_worker(void *p)
{
    kve_emu_thread *me = (kve_emu_thread *)p;
    kve_emu_pool *pool = me->pool;
    for (;;) {
        pthread_barrier_wait(&pool->gate);
        if (pool->quit)
            return NULL;
        me->tc.nb = pool->grid;
        for (uint32_t b = 0; b < pool->grid; b++) {
            /* GPU shared memory starts undefined: make reliance on zeros fail. */
            if (me->tc.tid == 0)
                memset(pool->smem, 0xa5, pool->smem_bytes);
            kve_emu_sync(&me->tc);
            me->tc.bid = b;
            pool->body(&me->tc, pool->smem, pool->arg);
            kve_emu_sync(&me->tc);
        }
        pthread_barrier_wait(&pool->gate);
    }
}

kve_emu_pool *kve_emu_pool_create(uint32_t nt, uint32_t ws)
{
    if (nt == 0 || ws == 0 || nt % ws || nt / ws > KVE_MAX_WARPS)
        return NULL;
    kve_emu_pool *p = (kve_emu_pool *)calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->nt = nt;
    p->threads = (kve_emu_thread *)calloc(nt, sizeof *p->threads);
    p->block.xbuf[0] = (uint64_t *)calloc(nt, sizeof(uint64_t));
    p->block.xbuf[1] = (uint64_t *)calloc(nt, sizeof(uint64_t));
    if (!p->threads || !p->block.xbuf[0] || !p->block.xbuf[1] ||
        pthread_barrier_init(&p->block.bar, NULL, nt) ||
        pthread_barrier_init(&p->gate, NULL, nt + 1)) {
        free(p->threads);
        free(p->block.xbuf[0]);
        free(p->block.xbuf[1]);
        free(p);
        return NULL;
    }
    for (uint32_t i = 0; i < nt; i++) {
        kve_emu_thread *t = &p->threads[i];
        t->pool = p;
        t->tc.tid = i;
        t->tc.nt = nt;
        t->tc.ws = ws;
        t->tc.emu = &p->block;
        t->tc.xturn = 0;
        if (pthread_create(&t->th, NULL, kve_emu_worker, t))
            abort(); /* a test harness: no way to run without its threads */
        p->started++;
    }
    return p;
}

int kve_emu_launch(kve_emu_pool *pool, uint32_t grid, size_t smem_bytes, kve_emu_body body,
                   void *arg)
{
    unsigned char *smem = (unsigned char *)aligned_alloc(64, (smem_bytes + 64) & ~(size_t)63);
    if (!smem)
        return -1;
    pool->grid = grid;
    pool->smem = smem;
    pool->smem_bytes = smem_bytes;
    pool->body = body;
    pool->arg = arg;
    pthread_barrier_wait(&pool->gate); /* go */
    pthread_barrier_wait(&pool->gate); /* done */
    free(smem);
    return 0;
}

void kve_emu_pool_destroy(kve_emu_pool *pool)
{
    if (!pool)
        return;
    pool->quit = 1;
    pthread_barrier_wait(&pool->gate);
    for (uint32_t i = 0; i < pool->started; i++)
        pthread_join(pool->threads[i].th, NULL);
    pthread_barrier_destroy(&pool->gate);
    pthread_barrier_destroy(&pool->block.bar);
    free(pool->threads);
    free(pool->block.xbuf[0]);
    free(pool->block.xbuf[1]);
    free(pool);
}

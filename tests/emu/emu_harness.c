/* emu_harness.c — pthreads and barriers standing in for a GPU block. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_harness.h"
#include "kve_cases.h" /* kve_rand_perm */

struct kve_emu_block {
    pthread_barrier_t bar; /* the block's threads: kve_sync() */
    uint64_t *xbuf[2];     /* shuffle exchange, double-buffered */
    int serial;            /* a serial pool: no barrier can be met */
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
    uint32_t nt, ws, started;
    uint64_t rng; /* a serial pool's orders */
    /* the current launch */
    int quit;
    uint32_t grid;
    unsigned char *smem;
    size_t smem_bytes;
    kve_emu_body body;
    void *arg;
};

/* A body that synchronizes cannot run serially: stop the test loudly. */
static void kve_emu_no_serial(const kve_tc *tc, const char *what)
{
    if (tc->emu->serial) {
        fprintf(stderr, "emu: %s in a body run on a serial pool\n", what);
        abort();
    }
}

void kve_emu_sync(kve_tc *tc)
{
    kve_emu_no_serial(tc, "kve_sync");
    pthread_barrier_wait(&tc->emu->bar);
}

/* One barrier per shuffle: a buffer is written again only two shuffles
 * later, after everyone has passed the barrier that follows its reads. */
uint64_t kve_emu_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    kve_emu_no_serial(tc, "a shuffle");
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

/* A pool of shape (nt, ws), nothing started; NULL for a bad shape. */
static kve_emu_pool *kve_emu_pool_new(uint32_t nt, uint32_t ws)
{
    if (nt == 0 || ws == 0 || nt % ws || nt / ws > KVE_MAX_WARPS)
        return NULL;
    kve_emu_pool *p = (kve_emu_pool *)calloc(1, sizeof *p);
    if (p) {
        p->nt = nt;
        p->ws = ws;
    }
    return p;
}

kve_emu_pool *kve_emu_pool_create(uint32_t nt, uint32_t ws)
{
    kve_emu_pool *p = kve_emu_pool_new(nt, ws);
    if (!p)
        return NULL;
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

kve_emu_pool *kve_emu_pool_create_serial(uint32_t nt, uint32_t ws, uint64_t seed)
{
    kve_emu_pool *p = kve_emu_pool_new(nt, ws);
    if (p) {
        p->rng = seed;
        p->block.serial = 1;
    }
    return p;
}

void kve_emu_pool_shape(const kve_emu_pool *pool, uint32_t *nt, uint32_t *ws)
{
    *nt = pool->nt;
    *ws = pool->ws;
}

static int kve_emu_launch_serial(kve_emu_pool *pool, uint32_t grid, unsigned char *smem,
                                 kve_emu_body body, void *arg)
{
    uint32_t *blocks = (uint32_t *)malloc(((size_t)grid + pool->nt) * sizeof *blocks);
    if (!blocks)
        return -1;
    uint32_t *threads = blocks + grid;
    kve_rand_perm(&pool->rng, blocks, grid);
    for (uint32_t b = 0; b < grid; b++) {
        memset(smem, 0xa5, pool->smem_bytes);
        kve_rand_perm(&pool->rng, threads, pool->nt);
        for (uint32_t i = 0; i < pool->nt; i++) {
            kve_tc tc = {threads[i], pool->nt, pool->ws, blocks[b], grid, &pool->block, 0};
            body(&tc, smem, arg);
        }
    }
    free(blocks);
    return 0;
}

int kve_emu_launch(kve_emu_pool *pool, uint32_t grid, size_t smem_bytes, kve_emu_body body,
                   void *arg)
{
    unsigned char *smem = (unsigned char *)aligned_alloc(64, (smem_bytes + 64) & ~(size_t)63);
    if (!smem)
        return -1;
    if (pool->block.serial) {
        pool->smem_bytes = smem_bytes;
        int rc = kve_emu_launch_serial(pool, grid, smem, body, arg);
        free(smem);
        return rc;
    }
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
    if (pool->block.serial) {
        free(pool);
        return;
    }
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

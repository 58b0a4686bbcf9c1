/*
 * emu_harness.c — a GPU block as fibers on the calling thread.
 *
 * Each thread of a block is a fiber with its own stack, created with
 * makecontext() and started once with setcontext(); it then runs the body
 * for every block of every launch on its pool. After the first start the
 * switches are _setjmp/_longjmp: swapcontext() saves and restores the signal
 * mask with a system call each time (about 1 us here, 70 times a jump), and
 * the bodies switch at every barrier.
 *
 * A block runs in phases. In a phase every thread that has not returned
 * runs, one after another in an order drawn anew from the pool's generator,
 * up to its next barrier (kve_sync or a shuffle) or to the end of the body.
 * A phase ends where a barrier would release, so everything a thread wrote
 * before a barrier is seen by all after it, and a read of another thread's
 * write that no barrier orders meets a different order in every phase. If
 * after a phase some threads have returned and others wait at a barrier, the
 * threads disagree about the barriers: a GPU block would hang, the harness
 * says so and aborts.
 *
 * Under ASan every switch is announced (__sanitizer_start_switch_fiber and
 * _finish_), so ASan knows which stack it is on, and the jump is libc's own
 * (kve_emu_find_longjmp): the frames a switch leaves keep their redzones.
 * A stack ends in a guard page: an overflow faults.
 */
/* Jumps between stacks are the point: glibc's fortified _longjmp refuses
 * any that lands below the current stack pointer. */
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu_harness.h"
#include "kve_cases.h" /* kve_rand_perm */

#if defined(__SANITIZE_ADDRESS__)
#define KVE_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVE_EMU_ASAN 1
#endif
#endif
#ifdef KVE_EMU_ASAN
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* Room for the bodies and the calls they make, with ASan's redzones. */
#define KVE_EMU_STACK_BYTES ((size_t)256 << 10)

typedef struct kve_emu_fiber {
    kve_tc tc;
    kve_emu_pool *pool;
    unsigned char *map, *stack; /* a guard page, then the stack */
    size_t map_bytes;
    ucontext_t start;   /* its first entry (kve_emu_resume) */
    jmp_buf at;         /* where the fiber waits */
    void *asan_fake;    /* ASan's fake stack of the fiber while it waits */
    int started, done;  /* done: returned from the body of this block */
} kve_emu_fiber;

struct kve_emu_block {
    kve_emu_pool *pool;
    uint64_t *xbuf[2]; /* shuffle exchange, double-buffered */
    int serial;        /* a serial pool: no barrier can be met */
};

struct kve_emu_pool {
    struct kve_emu_block block;
    kve_emu_fiber *fibers;
    uint32_t *order; /* [nt]: the order of a phase */
    uint32_t nt, ws;
    uint64_t rng; /* every order of the pool */
    kve_emu_order mode, flip_mode; /* kve_emu_pool_order */
    uint32_t flip_phase, phases;   /* phases: the most of a block in the launch */
    /* the current launch */
    int quit;
    jmp_buf sched;             /* the launcher, while a fiber runs */
    const void *sched_stack;   /* the launcher's stack, for ASan */
    size_t sched_stack_bytes;
    kve_emu_fiber *cur;
    unsigned char *smem;
    size_t smem_bytes;
    kve_emu_body body;
    void *arg;
};

#ifdef KVE_EMU_ASAN
#define KVE_EMU_SWITCH_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define KVE_EMU_SWITCH_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#define KVE_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
/* libc's own _longjmp, called as a function that returns: ASan's wrapper
 * of it, and the code ASan puts before a call that does not return, would
 * unpoison the frames a switch leaves (a sigaltstack system call each time,
 * most of a sanitized run's time), yet these frames live on and resume. */
static void (*kve_emu_libc_longjmp)(jmp_buf, int);
#define KVE_EMU_JUMP(to) kve_emu_libc_longjmp(to, 1)
static void kve_emu_find_longjmp(void)
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void *real = libc ? dlsym(libc, "_longjmp") : NULL;
    kve_emu_libc_longjmp = real ? (void (*)(jmp_buf, int))real : _longjmp;
}
#else
#define KVE_EMU_JUMP(to) _longjmp(to, 1)
#define KVE_EMU_SWITCH_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define KVE_EMU_SWITCH_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define KVE_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The fiber a first entry starts: one thread, one start at a time. */
static _Thread_local kve_emu_fiber *kve_emu_starting;

/* From the running fiber @p f back to the launcher, until resumed. */
static void kve_emu_yield(kve_emu_fiber *f)
{
    kve_emu_pool *p = f->pool;
    KVE_EMU_SWITCH_START(&f->asan_fake, p->sched_stack, p->sched_stack_bytes);
    if (!_setjmp(f->at))
        KVE_EMU_JUMP(p->sched);
    KVE_EMU_SWITCH_FINISH(f->asan_fake, &p->sched_stack, &p->sched_stack_bytes);
}

static void kve_emu_fiber_main(void)
{
    kve_emu_fiber *f = kve_emu_starting;
    kve_emu_pool *p = f->pool;
    KVE_EMU_SWITCH_FINISH(NULL, &p->sched_stack, &p->sched_stack_bytes);
    while (!p->quit) {
        p->body(&f->tc, p->smem, p->arg);
        f->done = 1;
        kve_emu_yield(f);
    }
    /* For good: a NULL save lets ASan free the fiber's fake stack. */
    KVE_EMU_SWITCH_START(NULL, p->sched_stack, p->sched_stack_bytes);
    KVE_EMU_JUMP(p->sched);
    abort(); /* not reached */
}

/* The first entry into @p f: getcontext saves the signal mask that
 * setcontext sets again, so the thread's mask stays what it was. */
static void kve_emu_start(kve_emu_fiber *f)
{
    if (getcontext(&f->start))
        abort();
    f->start.uc_stack.ss_sp = f->stack;
    f->start.uc_stack.ss_size = KVE_EMU_STACK_BYTES;
    f->start.uc_link = NULL; /* the entry never returns */
    makecontext(&f->start, kve_emu_fiber_main, 0);
    f->started = 1;
    kve_emu_starting = f;
    setcontext(&f->start);
    abort(); /* setcontext returns only when it fails */
}

/* From the launcher into @p f, until it waits at a barrier or is done. */
static void kve_emu_resume(kve_emu_pool *p, kve_emu_fiber *f)
{
    void *fake = NULL;
    p->cur = f;
    KVE_EMU_SWITCH_START(&fake, f->stack, KVE_EMU_STACK_BYTES);
    if (!_setjmp(p->sched)) {
        if (f->started)
            KVE_EMU_JUMP(f->at);
        else
            kve_emu_start(f);
    }
    KVE_EMU_SWITCH_FINISH(fake, NULL, NULL);
}

/* A body that synchronizes cannot run serially: stop the test loudly. */
static void kve_emu_no_serial(const kve_tc *tc, const char *what)
{
    if (tc->emu->serial) {
        fprintf(stderr, "emu: %s in a body run on a serial pool\n", what);
        abort();
    }
}

/* The running thread reaches a barrier: it waits there for the next phase. */
void kve_emu_sync(kve_tc *tc)
{
    kve_emu_no_serial(tc, "kve_sync");
    kve_emu_yield(tc->emu->pool->cur);
}

/* One barrier per shuffle: a buffer is written again only two shuffles
 * later, after everyone has passed the barrier that follows its reads. */
uint64_t kve_emu_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    kve_emu_no_serial(tc, "a shuffle");
    uint64_t *buf = tc->emu->xbuf[tc->xturn];
    tc->xturn ^= 1;
    buf[tc->tid] = v;
    kve_emu_yield(tc->emu->pool->cur);
    return tc->tid % tc->ws >= d ? buf[tc->tid - d] : v;
}

/* The order of phase @p phase: @p n entries of @p out. */
static void kve_emu_order_fill(kve_emu_pool *p, uint32_t phase, uint32_t *out, uint32_t n)
{
    kve_emu_order m = phase == p->flip_phase ? p->flip_mode : p->mode;
    if (m == KVE_EMU_ORDER_RANDOM) {
        kve_rand_perm(&p->rng, out, n);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        out[i] = m == KVE_EMU_ORDER_FORWARD ? i : n - 1 - i;
}

void kve_emu_pool_order(kve_emu_pool *pool, kve_emu_order mode, uint32_t flip_phase,
                        kve_emu_order flip_mode)
{
    pool->mode = mode;
    pool->flip_phase = flip_phase;
    pool->flip_mode = flip_mode;
}

uint32_t kve_emu_pool_phases(const kve_emu_pool *pool) { return pool->phases; }

/* Block @p b of @p grid, phase after phase, until all its threads return. */
static void kve_emu_run_block(kve_emu_pool *p, uint32_t b, uint32_t grid)
{
    /* GPU shared memory starts undefined: make reliance on zeros fail. */
    memset(p->smem, 0xa5, p->smem_bytes);
    for (uint32_t i = 0; i < p->nt; i++) {
        p->fibers[i].done = 0;
        p->fibers[i].tc.bid = b;
        p->fibers[i].tc.nb = grid;
    }
    for (uint32_t phase = 0;; phase++) {
        uint32_t done = 0;
        kve_emu_order_fill(p, phase, p->order, p->nt);
        if (phase + 1 > p->phases)
            p->phases = phase + 1;
        for (uint32_t i = 0; i < p->nt; i++) {
            kve_emu_resume(p, &p->fibers[p->order[i]]);
            done += (uint32_t)p->fibers[p->order[i]].done;
        }
        if (done == p->nt)
            return;
        if (done) {
            fprintf(stderr,
                    "emu: threads of a block disagree at a barrier (block %u of %u: %u of %u "
                    "threads returned, the others wait at barrier %u)\n",
                    b, grid, done, p->nt, phase + 1);
            abort();
        }
    }
}

/* Fiber @p i of @p p: its stack, behind a guard page; 0 or -1. */
static int kve_emu_fiber_init(kve_emu_pool *p, uint32_t i)
{
    kve_emu_fiber *f = &p->fibers[i];
    size_t guard = (size_t)sysconf(_SC_PAGESIZE);
    f->pool = p;
    f->tc.tid = i;
    f->tc.nt = p->nt;
    f->tc.ws = p->ws;
    f->tc.emu = &p->block;
    f->map_bytes = guard + KVE_EMU_STACK_BYTES;
    void *m = mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    f->map = (unsigned char *)m;
    f->stack = f->map + guard;
    return mprotect(f->map, guard, PROT_NONE) ? -1 : 0;
}

/* A pool of shape (nt, ws), no fibers; NULL for a bad shape. */
static kve_emu_pool *kve_emu_pool_new(uint32_t nt, uint32_t ws)
{
    if (nt == 0 || ws == 0 || nt % ws || nt / ws > KVE_MAX_WARPS)
        return NULL;
    kve_emu_pool *p = (kve_emu_pool *)calloc(1, sizeof *p);
    if (p) {
        p->nt = nt;
        p->ws = ws;
        p->block.pool = p;
        p->mode = p->flip_mode = KVE_EMU_ORDER_RANDOM;
        p->flip_phase = KVE_EMU_NO_PHASE;
    }
    return p;
}

kve_emu_pool *kve_emu_pool_create(uint32_t nt, uint32_t ws)
{
    kve_emu_pool *p = kve_emu_pool_new(nt, ws);
    if (!p)
        return NULL;
#ifdef KVE_EMU_ASAN
    kve_emu_find_longjmp();
#endif
    /* Each shape its own orders, the same in every run. */
    p->rng = 0x5eed0000u ^ ((uint64_t)nt << 32) ^ ws;
    p->fibers = (kve_emu_fiber *)calloc(nt, sizeof *p->fibers);
    p->order = (uint32_t *)calloc(nt, sizeof *p->order);
    p->block.xbuf[0] = (uint64_t *)calloc(nt, sizeof(uint64_t));
    p->block.xbuf[1] = (uint64_t *)calloc(nt, sizeof(uint64_t));
    int bad = !p->fibers || !p->order || !p->block.xbuf[0] || !p->block.xbuf[1];
    for (uint32_t i = 0; i < nt && !bad; i++)
        bad = kve_emu_fiber_init(p, i);
    if (bad) {
        kve_emu_pool_destroy(p);
        return NULL;
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
    kve_emu_order_fill(pool, 0, blocks, grid);
    pool->phases = 1;
    for (uint32_t b = 0; b < grid; b++) {
        memset(smem, 0xa5, pool->smem_bytes);
        kve_emu_order_fill(pool, 0, threads, pool->nt);
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
    pool->smem = smem;
    pool->smem_bytes = smem_bytes;
    if (pool->block.serial) {
        int rc = kve_emu_launch_serial(pool, grid, smem, body, arg);
        free(smem);
        return rc;
    }
    pool->body = body;
    pool->arg = arg;
    pool->phases = 0;
    for (uint32_t b = 0; b < grid; b++)
        kve_emu_run_block(pool, b, grid);
    pool->smem = NULL;
    free(smem);
    return 0;
}

void kve_emu_pool_destroy(kve_emu_pool *pool)
{
    if (!pool)
        return;
    pool->quit = 1;
    for (uint32_t i = 0; pool->fibers && i < pool->nt; i++) {
        kve_emu_fiber *f = &pool->fibers[i];
        if (f->started)
            kve_emu_resume(pool, f); /* it leaves its loop and switches back for good */
        if (f->map) {
            KVE_EMU_UNPOISON(f->map, f->map_bytes); /* the next mapping here starts clean */
            munmap(f->map, f->map_bytes);
        }
    }
    free(pool->fibers);
    free(pool->order);
    free(pool->block.xbuf[0]);
    free(pool->block.xbuf[1]);
    free(pool);
}

/*
 * test_emu_uniform.c — the compaction kernels' barriers are reached by all
 * of a block's threads even when the threads disagree about what they read
 * from the caller's memory.
 *
 * On a GPU, a value a kernel reads from global memory while another agent
 * writes it can differ between the threads of one block. When such a value
 * decides whether a thread returns before a barrier, the block hangs. The
 * emulator's threads all read the same host memory, so an ordinary run
 * cannot show this: here each thread gets its own copy of the kernel's
 * arguments, and the copies differ in where n_evicted points (odd threads
 * see a count too large for the head, even threads a valid one). The body
 * must take the count from one thread (thread 0) for the whole block: the
 * block then finishes, and the result is exactly thread 0's view — the
 * compaction of the valid list, or the head skipped with the "n_evicted"
 * error record. A body that read the count per thread would hang a GPU
 * block; the emulator aborts it with a message (its threads disagree at a
 * barrier), and the watchdog turns any other hang into a failure naming
 * the kernel.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_kernels.h"
#include "kve_launch.h"
#include "kve_expect.h"

#define N_SLOTS 200u /* several tiles of the 64-thread blocks below */
#define ENTRY 16u

static const char *volatile kve_running = "nothing";


static void kve_watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: a block hung at a barrier (threads disagreed): ";
    ssize_t w = write(2, msg, sizeof msg - 1);
    w += write(2, kve_running, strlen(kve_running));
    w += write(2, "\n", 1);
    (void)w;
    _exit(1);
}

/* Each thread runs the body on its own copy of the arguments. */
typedef struct kve_per_thread {
    const kve_compact_args *args; /* [threads] */
    int slots_kernel;
} kve_per_thread;

static void kve_uniform_body(kve_tc *tc, unsigned char *smem, void *arg)
{
    const kve_per_thread *p = (const kve_per_thread *)arg;
    if (p->slots_kernel)
        kve_compact_slots_grid(tc, (kve_compact_smem *)smem, &p->args[tc->tid]);
    else
        kve_compact_move_grid(tc, (kve_compact_smem *)smem, &p->args[tc->tid]);
}

/* One head of N_SLOTS slots (slot t holds position t, entry t holds bytes
 * t & 0xff), in place; evicted = a valid ascending list. */
typedef struct kve_head_bufs {
    int32_t slot_pos[N_SLOTS];
    int32_t evicted[N_SLOTS];
    unsigned char cache[N_SLOTS * ENTRY];
} kve_head_bufs;

static const uint32_t kve_good_ne = 5;

static void kve_head_init(kve_head_bufs *h, kve_compact_desc *d)
{
    static const int32_t ev[5] = {3, 10, 64, 130, 199};
    for (uint32_t t = 0; t < N_SLOTS; t++) {
        h->slot_pos[t] = (int32_t)t;
        memset(h->cache + t * ENTRY, (int)(t & 0xff), ENTRY);
    }
    memset(h->evicted, 0, sizeof h->evicted);
    memcpy(h->evicted, ev, sizeof ev);
    memset(d, 0, sizeof *d);
    d->n_seqs = d->n_layers = d->n_heads = 1;
    d->n_slots = N_SLOTS;
    d->slot_pos = h->slot_pos;
    d->slot_pos_stride = N_SLOTS;
    d->evicted = h->evicted;
    d->evicted_stride = N_SLOTS;
    d->entry_bytes = ENTRY;
    d->n_caches = 1;
    d->src[0].base = h->cache;
    d->src[0].stride_slot = ENTRY;
}

/* Both kernels with thread t reading n_evicted from views[t % 2]. */
static void kve_run_split(kve_emu_pool *pool, uint32_t nt, kve_head_bufs *h,
                          const uint32_t *views[2], kve_emu_errors *e)
{
    kve_compact_desc d;
    kve_head_init(h, &d);
    kve_emu_errors_reset(e);
    kve_compact_args base, *args = (kve_compact_args *)calloc(nt, sizeof *args);
    d.n_evicted = views[0];
    if (!args || kve_compact_args_make(&d, e->rec, NULL, &base) != KVE_OK) {
        fprintf(stderr, "FAIL: cannot set up the arguments\n");
        exit(1);
    }
    for (uint32_t t = 0; t < nt; t++) {
        args[t] = base;
        args[t].d.n_evicted = views[t % 2];
    }
    kve_per_thread p = {args, 0};
    kve_running = "kve_compact_move_grid";
    KVE_EXPECT(kve_emu_launch(pool, 1, sizeof(kve_compact_smem), kve_uniform_body, &p) == 0,
               "launch");
    p.slots_kernel = 1;
    kve_running = "kve_compact_slots_grid";
    KVE_EXPECT(kve_emu_launch(pool, 1, sizeof(kve_compact_smem), kve_uniform_body, &p) == 0,
               "launch");
    kve_running = "nothing";
    free(args);
}

int main(void)
{
    signal(SIGALRM, kve_watchdog);
    alarm(120);
    const uint32_t good = kve_good_ne, bad = N_SLOTS + 1;
    static const uint32_t shapes[][2] = {{64, 32}, {64, 64}, {128, 32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        uint32_t nt = shapes[s][0], ws = shapes[s][1];
        kve_emu_pool *pool = kve_emu_pool_create(nt, ws);
        if (!pool) {
            fprintf(stderr, "FAIL: no pool of %u threads\n", nt);
            return 1;
        }
        static kve_head_bufs h;
        kve_emu_errors e;
        char msg[512];

        /* Thread 0 sees the valid count: the head is compacted. */
        const uint32_t *good_first[2] = {&good, &bad};
        kve_run_split(pool, nt, &h, good_first, &e);
        KVE_EXPECT(kve_emu_errors_status(&e, msg, sizeof msg) == KVE_OK,
                   "%u threads: an error was raised: %s", nt, msg);
        uint32_t j = 0;
        for (uint32_t t = 0; t < N_SLOTS; t++) {
            int evicted = t == 3 || t == 10 || t == 64 || t == 130 || t == 199;
            if (evicted)
                continue;
            KVE_EXPECT(h.slot_pos[j] == (int32_t)t, "%u threads: slot_pos[%u] = %d, expected %u",
                       nt, j, h.slot_pos[j], t);
            KVE_EXPECT(h.cache[j * ENTRY] == (unsigned char)t &&
                           h.cache[j * ENTRY + ENTRY - 1] == (unsigned char)t,
                       "%u threads: entry %u holds %u, expected slot %u's", nt, j,
                       h.cache[j * ENTRY], t);
            j++;
        }
        KVE_EXPECT(j == N_SLOTS - good, "kept %u", j);
        for (uint32_t t = j; t < N_SLOTS; t++)
            KVE_EXPECT(h.slot_pos[t] == -1, "%u threads: slot_pos[%u] = %d after the kept ones",
                       nt, t, h.slot_pos[t]);

        /* Thread 0 sees the count too large: the head is skipped, as a whole. */
        const uint32_t *bad_first[2] = {&bad, &good};
        kve_run_split(pool, nt, &h, bad_first, &e);
        kve_status st = kve_emu_errors_status(&e, msg, sizeof msg);
        KVE_EXPECT(st == KVE_ERR_RANGE && strstr(msg, "n_evicted") != NULL,
                   "%u threads: status %s, message \"%s\"", nt, kve_status_string(st), msg);
        for (uint32_t t = 0; t < N_SLOTS; t++)
            KVE_EXPECT(h.slot_pos[t] == (int32_t)t && h.cache[t * ENTRY] == (unsigned char)t,
                       "%u threads: a skipped head's slot %u changed", nt, t);
        kve_emu_pool_destroy(pool);
    }
    if (!kve_failures)
        printf("compaction barriers: uniform under per-thread disagreement (3 block shapes)\n");
    return kve_failures ? 1 : 0;
}

/*
 * emu_backend.h — a context that behaves like a GPU context with the
 * emulator as its device: a CPU context whose table of operations runs
 * state_update, state_round (on a threaded pool), cache_write and kve_score
 * (and, when asked, kve_evict and a state's eviction) through
 * kernels_cuda/'s bodies on an emulator pool,
 * planned by the GPU driver's launch plan (kve_launch.h: grids, and
 * eviction's scratch in shared memory or the workspace); the block size is
 * the pool's (the bodies run on any). It says its memory is not host memory, so the core
 * skips the content checks it skips for a GPU, and kve_context_synchronize()
 * reports (and clears) the emulated device's error records as the GPU glue
 * does. The whole public API then runs against the bodies, as on a device.
 *
 * Its memory (kve_alloc) is exactly the bytes asked, 256-byte aligned and
 * filled with garbage, as a GPU's: under ASan a read past an allocation
 * faults as compute-sanitizer's memcheck reports it on a device. Every
 * allocation and the error records are tracked for the order check
 * (kve_emu_order_check).
 */
#ifndef KVE_EMU_BACKEND_H
#define KVE_EMU_BACKEND_H

#include "emu_kernels.h"

/* A new emulated context (destroy it with kve_context_destroy); NULL on
 * failure. One at a time: the settings below are global. */
kve_context *kve_emu_context_create(void);

/* Where the next calls run: @p pool (serial or threaded) with grids of at
 * most @p max_grid blocks; kve_evict on @p evict_pool (threaded), or on the
 * CPU when NULL. */
void kve_emu_context_use(kve_emu_pool *pool, uint32_t max_grid, kve_emu_pool *evict_pool);

/* The device's own launch plan: every kernel on blocks of the thread count
 * the GPU driver launches it with (kve_launch.h: state, cache write and
 * scorer 256 threads, the round kernel 128, eviction its plan's 64 to 512),
 * warps of @p warp (32 or 64), grids and shared memory planned with an
 * H200's limits (132 multiprocessors, 227 KiB of shared memory a block);
 * kve_evict and a state's eviction run on the emulator too. 0 goes back to the pools of
 * kve_emu_context_use. The pools live until the context is destroyed. */
void kve_emu_context_device_plan(uint32_t warp);

/* The emulated device's eviction limits (kve_launch.h): @p evict_smem_max
 * bytes of dynamic shared memory a block's scratch may take (a larger
 * scratch goes to the workspace), grids of at most @p max_grid_workspace
 * blocks then. kve_emu_context_create sets "any scratch fits";
 * kve_emu_context_use sets the workspace grid cap to its max_grid. */
void kve_emu_context_evict_limits(size_t evict_smem_max, uint32_t max_grid_workspace);

/* The limits the next calls are planned with. */
kve_launch_limits kve_emu_context_limits(void);

/* The copy unit of the last cache write (16, 8, 4, 2 or 1 bytes). */
uint32_t kve_emu_context_last_unit(void);

/* The message of the last error kve_context_synchronize() reported (the
 * core's kve_last_error() does not see the emulator's). */
const char *kve_emu_context_message(void);

/* A failure the emulated device injects into the next operation it fits
 * (one shot), to show each surfacing at kve_context_synchronize() as its
 * status, with a message, and the next call on the context working. */
typedef enum {
    KVE_EMU_FAULT_NONE = 0,
    KVE_EMU_FAULT_LAUNCH, /* the next launch (evict, state, cache write) does not run: KVE_ERR_DEVICE */
    KVE_EMU_FAULT_SLOT,   /* the next device kve_evict sees slot_pos[index] = value, under
                             KVE_TRUSTED_SLOTS (the caller's table is left alone) */
    KVE_EMU_FAULT_PAGE    /* the next paged kve_cache_write sees block_table[index] (or
                             indices[index]) = value */
} kve_emu_fault_kind;

typedef struct {
    kve_emu_fault_kind kind;
    size_t index;
    int32_t value;
} kve_emu_fault;

void kve_emu_inject(const kve_emu_fault *fault);

/* What the emulated device was asked to run, in order: a launch (kernel
 * name, grid in blocks, shared-memory scratch bytes per block; a cache
 * write's one launch: its items, writes and moves, and block size), a
 * copy (direction, bytes; to or from the host it waits for the stream on
 * a GPU) or an upload (the state's jobs: bytes; no wait). An eviction launch also records its plan's block size and workspace bytes
 * per block (0: scratch in shared memory); other records hold 0 there. */
typedef struct kve_emu_launch_rec {
    char what[40];
    uint64_t grid, bytes;
    uint32_t threads;
    size_t scratch_stride;
} kve_emu_launch_rec;

/* Record every launch and copy from now on into @p buf (at most @p cap). */
void kve_emu_log_start(kve_emu_launch_rec *buf, uint32_t cap);
/* Stop recording; returns how many there were (more than cap: some lost). */
uint32_t kve_emu_log_stop(void);
/* Graph capture as CUDA's stream capture in its global mode: between
 * kve_emu_capture_begin_stream(stream) and kve_emu_capture_end, what the
 * emulated context queues on that stream (its kve_context_set_stream) is
 * recorded instead of run: every launch (its arguments copied) and every
 * backend-to-backend copy. Refused (KVE_ERR_DEVICE), breaking the capture,
 * is what CUDA refuses: on the capturing stream a copy to or from host
 * memory (pageable: the emulator has no pinned memory) and a synchronize;
 * on any stream an allocation and a free. Work queued on another stream
 * runs at once and is not in the graph (streams are modeled as torch's,
 * non-blocking: no implicit synchronization). kve_emu_capture_begin()
 * captures the default stream (NULL). kve_emu_graph_replay runs the
 * recorded nodes again, in order, as a replayed graph does. */
typedef struct kve_emu_graph kve_emu_graph;
kve_emu_graph *kve_emu_capture_begin_stream(void *stream);
kve_emu_graph *kve_emu_capture_begin(void);
/* Ends the capture: the nodes recorded in *@p n_nodes; returns NULL, or
 * the first operation the capture refused (the graph cannot replay), or
 * else the first work queued on another stream (missing from the graph,
 * which replays without it). */
const char *kve_emu_capture_end(kve_emu_graph *g, uint32_t *n_nodes);
kve_status kve_emu_graph_replay(kve_context *ctx, const kve_emu_graph *g);
void kve_emu_graph_destroy(kve_emu_graph *g);

/* Whether an injected fault is still waiting for its operation. */
int kve_emu_fault_pending(void);

#endif

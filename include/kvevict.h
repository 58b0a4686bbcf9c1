/*
 * kvevict.h — random per-head KV-cache eviction with bit-identical keep-sets
 * on every backend (CPU, CUDA, HIP). The one public header.
 *
 * The keep-set is defined by docs/SPEC.md (keep-set v2). Every entry point
 * returns a kve_status; on failure kve_last_error() holds a message naming
 * the argument and the offending value. Nothing here aborts or prints.
 *
 * Memory: pointers marked "backend memory" are host memory for the CPU
 * backend and device memory for CUDA/HIP (allocate it with kve_alloc() or
 * the vendor runtime). GPU calls are ordered on the context's stream.
 *
 * Sections, by use: 0 basics, 1 one-shot eviction, 2 the engine's cache
 * state, 3 cache writes, 4 scorers, 5 audit: the stable API, to which
 * semantic versioning applies (a minor release only adds to it). 6, the
 * experimental API, is declared only when KVE_EXPERIMENTAL is defined and
 * may change or go in any minor release (docs/INTEGRATION.md "Stable and
 * experimental API"). A comment gives a call's contract; the docs it names,
 * the rest.
 */
#ifndef KVEVICT_H
#define KVEVICT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVE_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVE_API __attribute__((visibility("default")))
#else
#define KVE_API
#endif

/** This header's version (kve_version() gives the running library's). */
#define KVE_VERSION_MAJOR 2
#define KVE_VERSION_MINOR 4
#define KVE_VERSION_PATCH 0
/** Version of the keep-set specification this library implements. */
#define KVE_SPEC_VERSION 2
/** Version of the running digest (docs/SPEC.md section 11). */
#define KVE_RUN_DIGEST_VERSION 2
/** XORed into the seed for the running digest's elements ("kve-run1"). */
#define KVE_RUN_DIGEST_TWEAK 0x6b76652d72756e31ull
/** Version of the cache state's slot placement (docs/SPEC.md "Placement"). */
#define KVE_PLACEMENT_VERSION 1

/* ================================================================== */
/* 0. Basics: status and version, backends and contexts, memory        */
/* ================================================================== */
/*
 * What every caller needs first: the status each call returns and the
 * message behind it, the library's version, a context (a backend with its
 * threads, ISA, device and stream), and the helpers that allocate and copy
 * the backend memory the other sections take.
 */

/** Status codes. Numeric values are stable across releases. */
typedef enum kve_status {
    KVE_OK = 0,
    KVE_ERR_NULL = 1,        /**< a required pointer argument is NULL */
    KVE_ERR_RANGE = 2,       /**< a count, size or index is out of range */
    KVE_ERR_OVERFLOW = 3,    /**< sizes overflow size_t / int32 / uint32 */
    KVE_ERR_ALIAS = 4,       /**< strides make rows or buffers overlap */
    KVE_ERR_DUPLICATE = 5,   /**< a head's slot_pos holds one position twice */
    KVE_ERR_INVALID = 6,     /**< an invalid value (unknown flag, enum, name) */
    KVE_ERR_UNAVAILABLE = 7, /**< backend or ISA not available on this machine */
    KVE_ERR_NOMEM = 8,       /**< an allocation failed */
    KVE_ERR_WORKSPACE = 9,   /**< the workspace given is smaller than queried */
    KVE_ERR_DEVICE = 10,     /**< the GPU runtime reported an error */
    KVE_ERR_ENV = 11,        /**< an environment variable holds a bad value */
    KVE_ERR_INTERNAL = 12    /**< a bug in kvevict; please report it */
} kve_status;

/** Stable name of a status, e.g. "KVE_ERR_RANGE". Never NULL. */
KVE_API const char *kve_status_string(kve_status status);

/**
 * The message of the last failed call on this thread ("" when none), naming
 * the argument and the value that failed. Valid until the next call on this
 * thread. Never NULL.
 */
KVE_API const char *kve_last_error(void);

/** Library version as MAJOR*10000 + MINOR*100 + PATCH. Always KVE_OK. */
KVE_API kve_status kve_version(uint32_t *out_version);

/** Where a context runs. */
typedef enum kve_backend {
    KVE_BACKEND_AUTO = 0, /**< $KVE_BACKEND if set, else CUDA, HIP, CPU: first available */
    KVE_BACKEND_CPU = 1,
    KVE_BACKEND_CUDA = 2,
    KVE_BACKEND_HIP = 3
} kve_backend;

/** Lower-case name ("auto", "cpu", "cuda", "hip"); "?" for an unknown value. */
KVE_API const char *kve_backend_name(kve_backend backend);

/**
 * Parse a backend name (case-insensitive "auto", "cpu", "cuda", "hip").
 * @return KVE_OK, KVE_ERR_NULL, or KVE_ERR_INVALID for an unknown name.
 */
KVE_API kve_status kve_backend_from_name(const char *name, kve_backend *out);

/**
 * Whether @p backend can run here: for GPU backends, its shared library
 * loads, its ABI matches and a device is present. *out_available is 0 or 1.
 * AUTO is always available (it resolves to the CPU at worst).
 * @return KVE_OK, KVE_ERR_NULL or KVE_ERR_INVALID (unknown enum value).
 */
KVE_API kve_status kve_backend_available(kve_backend backend, int *out_available);

/** CPU instruction sets the CPU backend can use. */
typedef enum kve_cpu_isa {
    KVE_CPU_ISA_AUTO = 0, /**< $KVE_CPU_ISA if set, else the best this CPU runs */
    KVE_CPU_ISA_SCALAR = 1,
    KVE_CPU_ISA_AVX2 = 2,
    KVE_CPU_ISA_AVX512 = 3
} kve_cpu_isa;

/** Lower-case name ("auto", "scalar", "avx2", "avx512"); "?" if unknown. */
KVE_API const char *kve_cpu_isa_name(kve_cpu_isa isa);

/** Parse an ISA name. @return KVE_OK, KVE_ERR_NULL or KVE_ERR_INVALID. */
KVE_API kve_status kve_cpu_isa_from_name(const char *name, kve_cpu_isa *out);

/** Whether this CPU and OS run @p isa (cpuid + xgetbv); *out is 0 or 1. */
KVE_API kve_status kve_cpu_isa_available(kve_cpu_isa isa, int *out_available);

/** Opaque context: a backend, its settings and its state. One per thread.
 *  Every call looks its context (and state) up among the live handles,
 *  reading nothing through the pointer: a destroyed one, one of the other
 *  kind or an unknown pointer is KVE_ERR_INVALID. A handle stays detected
 *  as destroyed while among the last 64 its thread destroyed, whatever
 *  other threads do; after that a new handle may take its address. */
typedef struct kve_context kve_context;

/**
 * Create a context on @p backend. AUTO honours $KVE_BACKEND (a bad value is
 * KVE_ERR_ENV, not a fallback), then picks the first available of CUDA, HIP,
 * CPU. The CPU ISA starts as AUTO (honouring $KVE_CPU_ISA), threads as 0
 * (OpenMP's default), device 0 and the default stream. @pre out != NULL.
 * @return KVE_OK; KVE_ERR_UNAVAILABLE when the backend cannot run here;
 *         KVE_ERR_ENV, KVE_ERR_INVALID, KVE_ERR_NOMEM, KVE_ERR_DEVICE.
 */
KVE_API kve_status kve_context_create(kve_backend backend, kve_context **out);

/** Destroy a context and the states still on it (kve_state_destroy of
 *  each: later calls on them are KVE_ERR_INVALID); NULL is accepted and
 *  does nothing. @return KVE_OK; KVE_ERR_INVALID when already destroyed. */
KVE_API kve_status kve_context_destroy(kve_context *ctx);

/** The backend this context runs on (never AUTO). */
KVE_API kve_status kve_context_get_backend(const kve_context *ctx, kve_backend *out);

/** CPU threads for this context: 0 = OpenMP's default, else 1..1024. The most
 *  a call uses: kve_evict gives each thread at least 32768 slots of work (a
 *  layer of a few heads runs on the caller's thread alone), and one thread
 *  runs on the caller's thread without entering OpenMP. Results never depend
 *  on the thread count. */
KVE_API kve_status kve_context_set_threads(kve_context *ctx, int threads);
/** The thread count in effect (resolved: never 0). */
KVE_API kve_status kve_context_get_threads(const kve_context *ctx, int *out);

/**
 * Select the CPU ISA. AUTO re-resolves ($KVE_CPU_ISA, then the best). The
 * ISA runs the CPU kernels and kve_evict's checks of slot_pos alike (every
 * ISA's checks report the same first problem).
 * @return KVE_ERR_UNAVAILABLE when this CPU cannot run @p isa.
 */
KVE_API kve_status kve_context_set_cpu_isa(kve_context *ctx, kve_cpu_isa isa);
/** The ISA in use (resolved: never AUTO). */
KVE_API kve_status kve_context_get_cpu_isa(const kve_context *ctx, kve_cpu_isa *out);

/**
 * GPU device index (GPU backends; the CPU backend accepts only 0). A stream
 * set on the context that is not one of the new device's is replaced by
 * the default stream: set a stream of the new device after this call.
 */
KVE_API kve_status kve_context_set_device(kve_context *ctx, int device);
/** The device index in use. */
KVE_API kve_status kve_context_get_device(const kve_context *ctx, int *out);

/** Stream (cudaStream_t / hipStream_t; NULL = default). Ignored on the CPU. */
KVE_API kve_status kve_context_set_stream(kve_context *ctx, void *stream);
/** The stream set (NULL: the default stream). */
KVE_API kve_status kve_context_get_stream(const kve_context *ctx, void **out);

/** Wait until all work queued on the context's stream has finished. */
KVE_API kve_status kve_context_synchronize(kve_context *ctx);

/** kve_copy's direction. The memory helpers below are not for hot paths:
 *  they may allocate or synchronize. */
typedef enum kve_copy_kind {
    KVE_COPY_HOST_TO_BACKEND = 0,
    KVE_COPY_BACKEND_TO_HOST = 1,
    KVE_COPY_BACKEND_TO_BACKEND = 2
} kve_copy_kind;

/** Allocate @p bytes of backend memory (bytes > 0), 256-byte aligned. It
 *  belongs to @p ctx: kve_context_destroy frees what is still allocated
 *  (after the context's work), so it must not be used after that.
 *  @return KVE_ERR_OVERFLOW when @p bytes rounded up to 256 exceeds SIZE_MAX;
 *          KVE_ERR_NOMEM (the message gives the bytes) when it cannot. */
KVE_API kve_status kve_alloc(kve_context *ctx, size_t bytes, void **out);
/** Free backend memory kve_alloc() gave @p ctx; NULL is accepted. Another
 *  pointer (freed already, another context's) is KVE_ERR_INVALID. */
KVE_API kve_status kve_free(kve_context *ctx, void *ptr);
/** Copy @p bytes. To or from the host: then wait for the copy to finish;
 *  backend to backend: stream-ordered, no wait (a CUDA graph captures it). */
KVE_API kve_status kve_copy(kve_context *ctx, void *dst, const void *src, size_t bytes,
                            kve_copy_kind kind);

/* ================================================================== */
/* 1. One-shot eviction: keys, kve_evict, compaction                   */
/* ================================================================== */
/*
 * Evict a batch of slot tables in one call, keeping nothing between calls:
 * keys (kve_keys), every head's keep-set (kve_evict), kept entries moved to
 * the front (kve_compact), for engines that compact their caches
 * (docs/INTEGRATION.md "HF transformers (compaction)").
 */

/** Mode switches (docs/SPEC.md "Key"). */
enum {
    KVE_PERSISTENT = 1u << 0,    /**< round replaced by 0xFFFFFFFF: one key per token for life */
    KVE_SHARED_HEADS = 1u << 1,  /**< head replaced by 0xFFFFFFFF: one keep-set per layer */
    KVE_SHARED_LAYERS = 1u << 2, /**< layer replaced by 0xFFFFFFFF */
    /** kve_evict only: the caller vouches that no head's slot_pos holds a
     *  position twice, which skips the O(slots) duplicate check. A violated
     *  promise yields an unspecified (but memory-safe) keep-set. */
    KVE_TRUSTED_SLOTS = 1u << 3,
    /** kve_evict and kve_schedule: select by caller-supplied scores instead
     *  of keys (docs/SPEC.md "Scored selection"): keep the highest-scored
     *  candidates, equal scores keeping the smaller position. Not a key flag
     *  (kve_keys rejects it); refused together with KVE_PERSISTENT. */
    KVE_SCORED = 1u << 4
};
/** The flags kve_keys takes. */
#define KVE_KEY_FLAGS (KVE_PERSISTENT | KVE_SHARED_HEADS | KVE_SHARED_LAYERS)

/** The logical coordinates of one random draw. */
typedef struct kve_coord {
    uint64_t seq_id;
    uint32_t layer; /**< global layer index */
    uint32_t head;  /**< global KV-head index */
    uint32_t pos;   /**< absolute 0-based position in the sequence */
    uint32_t round; /**< evictions this sequence has had */
} kve_coord;

/**
 * The spec's key for each of @p n coordinates.
 * @param flags  only KVE_PERSISTENT, KVE_SHARED_HEADS, KVE_SHARED_LAYERS.
 * @param coords [n] backend memory; @param keys [n] backend memory.
 * @return KVE_OK, KVE_ERR_NULL (when n > 0), KVE_ERR_INVALID (flags).
 */
KVE_API kve_status kve_keys(kve_context *ctx, uint64_t seed, uint32_t flags,
                            const kve_coord *coords, size_t n, uint64_t *keys);

/** One sequence of a batch. */
typedef struct kve_seq {
    uint64_t seq_id;     /**< the caller's request id */
    uint32_t prompt_len; /**< P: positions < P are never evicted */
    uint32_t round;      /**< evictions this sequence has had before this one */
} kve_seq;

/**
 * A batch of heads: n_seqs × n_layers × n_heads slot tables. Head i =
 * (s * n_layers + l) * n_heads + h has its slot table at
 * slot_pos + i * slot_pos_stride; its global coordinates are
 * (layer_offset + l, head_offset + h).
 */
typedef struct kve_batch {
    uint64_t seed;
    uint32_t flags;        /**< KVE_PERSISTENT | KVE_SHARED_HEADS | KVE_SHARED_LAYERS | KVE_TRUSTED_SLOTS | KVE_SCORED */
    uint32_t n_seqs;
    const kve_seq *seqs;   /**< [n_seqs], backend memory */
    uint32_t n_layers;     /**< layers in this call */
    uint32_t n_heads;      /**< KV heads per layer in this call */
    uint32_t layer_offset; /**< global index of this call's layer 0 */
    uint32_t head_offset;  /**< global index of this call's head 0 */
    uint32_t n_slots;      /**< slots per head, 0..2^31-1 */
    uint32_t budget;       /**< B, tokens kept per head (prompt included), 0..2^31-1 */
    uint32_t window;       /**< W, most recent generated tokens never evicted */
    const int32_t *slot_pos; /**< position held by each slot, -1 = empty; backend memory */
    size_t slot_pos_stride;  /**< elements between heads' rows, >= n_slots */
    /** KVE_SCORED only (else ignored): float scores, backend memory; head i's
     *  score of slot t at scores[i * scores_stride + t], read only at the
     *  candidates of heads that evict; a NaN there is KVE_ERR_INVALID naming
     *  head and slot (docs/SPEC.md "Scored selection": inf, -0.0). */
    const float *scores;
    size_t scores_stride;    /**< elements between heads' score rows, >= n_slots */
} kve_batch;

/** Per-head flags written by kve_evict(). */
enum {
    /** prompt + window alone exceeded the budget: all of them were kept */
    KVE_HEAD_OVER_BUDGET = 1u << 0
};

/**
 * Outputs of kve_evict(), one row or element per head (backend memory).
 * A head evicts at most max(0, n_slots - budget) slots (SPEC §One head).
 */
typedef struct kve_evict_out {
    int32_t *evicted;        /**< required: evicted slots, ascending, row i at evicted + i*evicted_stride */
    size_t evicted_stride;   /**< >= max(1, n_slots - budget) */
    uint32_t *n_evicted;     /**< required: [heads] */
    uint32_t *n_kept;        /**< required: [heads] valid slots kept */
    uint8_t *head_flags;     /**< optional: [heads] KVE_HEAD_* bits */
    int32_t *kept;           /**< optional: kept slots, ascending, row i at kept + i*kept_stride */
    size_t kept_stride;      /**< >= n_slots when kept != NULL */
    /** optional: [heads] each head's part of the round digest (SPEC §11):
     *  the wrapping sum of the elements of the tokens it evicted, weight 1,
     *  0 when it evicted none */
    uint64_t *round_digest;
    /** optional: [n_seqs] running digests (SPEC §11): the call adds, wrapping,
     *  run_digest_weight x the round digests of each sequence's heads to its
     *  element — the cache state's per-row digest, with its table weight */
    uint64_t *run_digest;
    uint64_t run_digest_weight; /**< 0 counts as 1 */
} kve_evict_out;

/**
 * Workspace bytes kve_evict() needs for @p batch on @p ctx (depends on the
 * context's backend and thread count). May be 0.
 */
KVE_API kve_status kve_evict_workspace_size(kve_context *ctx, const kve_batch *batch,
                                            size_t *out_bytes);

/**
 * Evict, for every head of @p batch, per docs/SPEC.md "One head's eviction"
 * (with KVE_SCORED, "Scored selection"). slot_pos and scores are only read.
 * Arguments are checked first; table contents (positions < -1, duplicates,
 * NaN scores) head by head, on a GPU at kve_context_synchronize()
 * (docs/INTEGRATION.md "kve_evict").
 * @param workspace backend memory of kve_evict_workspace_size() bytes, or NULL
 *        with workspace_bytes == 0 to let the library allocate (not hot-path).
 * @return KVE_OK (read head_flags for over-budget heads), or an error, the
 *         lowest head's: then the outputs are unspecified.
 */
KVE_API kve_status kve_evict(kve_context *ctx, const kve_batch *batch, const kve_evict_out *out,
                             void *workspace, size_t workspace_bytes);

/**
 * A strided cache: the entry of (sequence s, layer l, head h, slot t) starts
 * at base + s*stride_seq + l*stride_layer + h*stride_head + t*stride_slot
 * (bytes). Fits HF [B,H,T,D], token-row [T,H,D] and NHD/HND pages.
 */
typedef struct kve_cache_view {
    void *base; /**< backend memory */
    size_t stride_seq, stride_layer, stride_head, stride_slot;
} kve_cache_view;

/** Most caches one kve_compact() or kve_cache_write() call moves (K and V, or more). */
#define KVE_MAX_CACHES 8

/**
 * Compaction of a batch after kve_evict(): in every head, the valid slots
 * that were not evicted move, in slot order, to slots 0..n_kept-1.
 */
typedef struct kve_compact_desc {
    uint32_t n_seqs, n_layers, n_heads, n_slots; /**< as the kve_batch */
    int32_t *slot_pos;          /**< updated in place: kept positions to the front, -1 after */
    size_t slot_pos_stride;
    const int32_t *evicted;     /**< kve_evict_out.evicted */
    size_t evicted_stride;
    const uint32_t *n_evicted;  /**< kve_evict_out.n_evicted */
    size_t entry_bytes;         /**< bytes per (head, slot) entry, e.g. head_dim*2 */
    uint32_t n_caches;          /**< 1..KVE_MAX_CACHES */
    kve_cache_view src[KVE_MAX_CACHES];
    /** NULL bases (all of them) = in place; else out of place into dst,
     *  which must not overlap any src. */
    kve_cache_view dst[KVE_MAX_CACHES];
} kve_compact_desc;

/**
 * Move kept entries to the front of each head's rows (see kve_compact_desc).
 * Checks that no two entries of one cache overlap (strides), that in-place
 * and out-of-place buffers are consistent, and that evicted lists are
 * ascending, in range and hold valid slots.
 */
KVE_API kve_status kve_compact(kve_context *ctx, const kve_compact_desc *desc);

/* ================================================================== */
/* 2. The engine's cache state                                         */
/* ================================================================== */
/*
 * A cache state runs docs/SPEC.md "Schedule" and "Placement" for rows of
 * sequences, its slot tables in backend memory: each step maps every head's
 * new tokens to slots and lists a round's moves, so attention over slots
 * 0 .. n_valid - 1 sees exactly the keep-set (docs/INTEGRATION.md "The model").
 */

/** When and how a cache state evicts (docs/SPEC.md "Schedule"). */
typedef struct kve_schedule {
    uint64_t seed;
    /** KVE_PERSISTENT | KVE_SHARED_HEADS | KVE_SHARED_LAYERS | KVE_SCORED.
     *  KVE_SCORED: every round is scored, with scores the engine supplies
     *  in kve_step_buffers (see kve_state_append); not with KVE_PERSISTENT. */
    uint32_t flags;
    uint32_t budget;   /**< B: tokens a head keeps at an eviction, prompt included */
    uint32_t window;   /**< W: most recent generated tokens never evicted */
    uint32_t interval; /**< r >= 1: slots each eviction frees (tokens between rounds) */
} kve_schedule;

/**
 * Slots per head a sequence with @p prompt_len prompt tokens uses under
 * @p schedule: max(B, P + W) + r. The prompt is always admitted whole: the
 * capacity grows with it, so protected tokens are never lost.
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_INVALID (flags); KVE_ERR_RANGE
 *         (interval 0, budget or window > 2^31-1); KVE_ERR_OVERFLOW when the
 *         capacity exceeds 2^31-1.
 */
KVE_API kve_status kve_schedule_capacity(const kve_schedule *schedule, uint32_t prompt_len,
                                         uint32_t *out_slots);

/** Shape of a cache state. */
typedef struct kve_state_desc {
    kve_schedule schedule;
    uint32_t max_seqs;     /**< rows: sequences held at once, >= 1 */
    uint32_t n_layers;     /**< layers covered (a pipeline shard's), >= 1 */
    uint32_t n_heads;      /**< KV heads per layer (a tensor shard's), >= 1 */
    uint32_t layer_offset; /**< global index of layer 0 */
    uint32_t head_offset;  /**< global index of head 0 */
    /** Slots per head of the largest row. A sequence is admitted when its
     *  capacity (kve_schedule_capacity) fits; >= the capacity of an empty
     *  prompt. */
    uint32_t max_slots;
    /** Slots per table shared by all rows, each taking its capacity at
     *  admission and giving it back at retirement (docs/INTEGRATION.md "The
     *  model"). 0: max_seqs x max_slots (every row fits at any time); else
     *  >= max_slots. */
    uint64_t pool_slots;
    /** D: the most draft tokens a row may carry in a speculative step
     *  (experimental kve_state_draft; docs/SPEC.md "Speculative steps"); 0 =
     *  none. A row's draft token i lives at slot capacity + i of every head,
     *  outside its tables. max_slots + D <= 2^31-1. */
    uint32_t max_draft;
    /** The largest query-head group (TriAttention's tri.group; 1 for the
     *  other scorers) the state's scorer scratch is sized for at creation:
     *  the experimental kve_state_score_device refuses more, and
     *  kve_state_score scores more in the context's scratch. 0 = 1 for a
     *  KVE_SCORED state, else none. score_group x the KV heads a table
     *  holds must be <= 256 (a scoring call's most), else KVE_ERR_RANGE. */
    uint32_t score_group;
} kve_state_desc;

/** Opaque cache state: one per thread, like its context. */
typedef struct kve_state kve_state;

/**
 * Backend memory a state with @p desc needs on @p ctx: its pool of slot
 * tables and of freed-slot lists (2 x tables x pool_slots int32, tables =
 * table_layers x table_heads), one kve_seq per row, the eviction
 * workspace and the scorer's scratch: on a GPU max_seqs x table_heads x
 * query heads a table (score_group x heads_per_table) x max_slots floats,
 * and max_seqs kve_score_row; on the CPU, per thread of @p ctx (its threads
 * now), about (query heads a table + 5) x max_slots x 4 bytes and 48 KiB.
 */
KVE_API kve_status kve_state_memory_size(kve_context *ctx, const kve_state_desc *desc,
                                         size_t *out_bytes);

/**
 * Create a state on @p ctx with every row free (kve_context_destroy
 * destroys it, if still there).
 * @param memory backend memory of kve_state_memory_size() bytes, 256-byte
 *        aligned (as kve_alloc returns it), kept by the state until
 *        destroyed; or NULL with memory_bytes == 0 to let the library allocate.
 * @return KVE_OK; KVE_ERR_NULL, KVE_ERR_RANGE, KVE_ERR_INVALID (desc, or
 *         memory not 256-byte aligned), KVE_ERR_OVERFLOW (desc),
 *         KVE_ERR_WORKSPACE (memory too small), KVE_ERR_NOMEM.
 */
KVE_API kve_status kve_state_create(kve_context *ctx, const kve_state_desc *desc, void *memory,
                                    size_t memory_bytes, kve_state **out);

/** Destroy a state (its memory, if the library allocated it); NULL is
 *  accepted. @return KVE_OK; KVE_ERR_INVALID when already destroyed (also
 *  with its context). */
KVE_API kve_status kve_state_destroy(kve_state *state);

/**
 * Admit sequence @p seq_id with a @p prompt_len-token prompt into free row
 * @p row, with no token yet: the prompt is appended like any token
 * (kve_state_append), and is never evicted.
 * @return KVE_OK; KVE_ERR_RANGE (row; or prompt_len, when its capacity
 *         exceeds max_slots, or no run of that many pool slots is free: the
 *         message names the sizes); KVE_ERR_INVALID when the row holds a
 *         sequence.
 */
KVE_API kve_status kve_state_admit(kve_state *state, uint32_t row, uint64_t seq_id,
                                   uint32_t prompt_len);

/** Free row @p row. @return KVE_ERR_INVALID when it holds no sequence. */
KVE_API kve_status kve_state_retire(kve_state *state, uint32_t row);

/**
 * Where kve_state_append writes its outputs: caller-owned backend memory,
 * sized once for the largest step (max_tokens, max_rows), so an engine
 * keeps these buffers for its whole run. Table layer tl of each output is
 * the slice an attention layer passes to kve_cache_write.
 */
typedef struct kve_step_buffers {
    /** int64 [table_layers][max_tokens][table_heads]: the slot, within the
     *  token's row (0 .. capacity-1), where each head writes each token of
     *  the call (numbered row by row in the call's order); -1 = skip, the
     *  token evicted again within the call (a step of more than W + 1
     *  tokens of a row across a round). NULL: no mapping. */
    int64_t *slot_mapping;
    uint32_t max_tokens; /**< tokens slot_mapping holds per table layer */
    /** int32 [table_layers][max_rows][table_heads][max_moves][2]: for call
     *  row i (rows[i]) and head, pairs (src, dst): the entry cached at slot
     *  src before the call moves to slot dst. NULL (with n_moves NULL): no
     *  move lists, for callers that keep no cache. */
    int32_t *moves;
    uint32_t *n_moves;  /**< uint32 [table_layers][max_rows][table_heads]: pairs per list */
    uint32_t max_rows;  /**< rows the move lists hold; >= n_rows */
    uint32_t max_moves; /**< pairs per list; >= kve_state_max_moves() of the call's largest n_new */
    /** INPUT, KVE_SCORED states only (else ignored): float backend memory,
     *  the score of slot t of call row i's table (tl, th), as the tables are
     *  BEFORE the call, at scores + i * scores_stride_row + (tl * table_heads
     *  + th) * scores_stride_table + t. Read only at the candidates of rows
     *  whose round runs; a NaN there: docs/SPEC.md "Scored selection". */
    const float *scores;
    size_t scores_stride_row;   /**< elements between call rows, >= tables x scores_stride_table */
    size_t scores_stride_table; /**< elements between a row's tables, >= the row's capacity */
} kve_step_buffers;

/**
 * Pairs one move list may need for a call that appends up to @p max_new
 * tokens to a row: r * ceil(max_new / r), at most r per round the call
 * runs (r for one-token steps and any step of up to r tokens).
 */
KVE_API kve_status kve_state_max_moves(const kve_state *state, uint32_t max_new,
                                       uint32_t *out_moves);

/**
 * Append tokens: row rows[i] receives n_new[i] tokens (its next positions),
 * numbered row by row in that order; a token that finds its row full first
 * evicts a round (docs/INTEGRATION.md "kve_state_append"). Stream-ordered,
 * no host synchronization, nothing allocated.
 * @param rows, n_new [n_rows], host memory; rows active and distinct;
 *        n_rows <= max_seqs (else KVE_ERR_RANGE).
 * @param out the mapping and move lists (and a KVE_SCORED state's scores),
 *        or NULL to advance the state alone (the caller keeps no cache).
 * @return KVE_OK, or an error with the state unchanged (OVERFLOW: out's spans).
 */
KVE_API kve_status kve_state_append(kve_state *state, uint32_t n_rows, const uint32_t *rows,
                                    const uint32_t *n_new, const kve_step_buffers *out);

/**
 * kve_state_append planned on the backend, for a step captured in a CUDA or
 * HIP graph: launches depend on n_rows, max_new and the state's shape
 * alone; nothing is read back, allocated or waited for (docs/INTEGRATION.md
 * "CUDA graphs"). Data checks (a scored NaN too) run on the device; a
 * refusal changes nothing, maps the shape to -1, empties the move lists.
 * @param rows, n_new [n_rows], backend memory; n_new[i] = 0 is padding.
 * @param max_new the most tokens a row may bring: out->max_moves >=
 *        kve_state_max_moves(max_new).
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_RANGE; KVE_ERR_OVERFLOW; KVE_ERR_INVALID.
 */
KVE_API kve_status kve_state_append_device(kve_state *state, uint32_t n_rows,
                                           const uint32_t *rows, const uint32_t *n_new,
                                           uint32_t max_new, const kve_step_buffers *out);

/**
 * Rounds each row would run in a kve_state_append of @p n_new tokens:
 * out_due[i] for row rows[i] (host memory, [n_rows]; rows active). Lets an
 * engine compute scores only for the rows whose round is due. Host
 * bookkeeping only: no backend access (but a read-back of the rows first
 * once a call was planned with kve_state_append_device).
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_RANGE (a row index);
 *         KVE_ERR_INVALID (a row holds no sequence).
 */
KVE_API kve_status kve_state_rounds_due(const kve_state *state, uint32_t n_rows,
                                        const uint32_t *rows, const uint32_t *n_new,
                                        uint32_t *out_due);

/**
 * Recompute row @p row (its old content dropped) from the ids alone: the
 * tables after kve_state_admit(seq_id, prompt_len) and appends of
 * @p steps[0 .. n_steps) tokens (NULL, 0: the prompt, then one token each),
 * summing to n_tokens (docs/INTEGRATION.md "Preemption and recovery").
 * @param slot_mapping optional (NULL, 0): int64 backend memory
 *        [table_layers][n_tokens][table_heads], each position's slot or -1.
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_RANGE; KVE_ERR_INVALID (also a
 *         KVE_SCORED row past its first round); KVE_ERR_NOMEM.
 */
KVE_API kve_status kve_state_rebuild(kve_state *state, uint32_t row, uint64_t seq_id,
                                     uint32_t prompt_len, uint32_t n_tokens,
                                     const uint32_t *steps, uint32_t n_steps,
                                     int64_t *slot_mapping, size_t mapping_len);

/** Where a state's slot tables are. */
typedef struct kve_state_layout {
    /** backend memory, read-only for the caller: the pool of tables. The
     *  table of (row, table layer tl, table head th) is slot_pos +
     *  table_offset + (tl * table_heads + th) * capacity, with the row's
     *  table_offset and capacity from kve_state_get_seq; slots 0 ..
     *  n_valid-1 valid, -1 after. */
    const int32_t *slot_pos;
    /** table_layers x table_heads x max_slots: elements kve_state_read_slots
     *  writes for a row */
    size_t row_elems;
    uint32_t table_layers; /**< 1 with KVE_SHARED_LAYERS, else n_layers */
    uint32_t table_heads;  /**< 1 with KVE_SHARED_HEADS, else n_heads */
    uint32_t max_slots;
    uint32_t max_seqs;
    uint64_t pool_slots; /**< as resolved: slots per table in the pool */
} kve_state_layout;

/** The state's layout. A row's tables may move within the pool at an
 *  admission: read its table_offset (kve_state_get_seq) anew after one. */
KVE_API kve_status kve_state_get_layout(const kve_state *state, kve_state_layout *out);

/* ================================================================== */
/* 3. Cache writes                                                     */
/* ================================================================== */
/*
 * Write a step's new K/V rows into the engine's own paged or contiguous
 * caches at the slots the state mapped, after running the round's moves:
 * the drop-in for vLLM's reshape_and_cache_flash and FlashInfer's
 * append_paged_kv_cache (docs/INTEGRATION.md "The engines' own write calls").
 */

/** Byte layout inside a page of a paged cache. */
typedef enum kve_cache_layout {
    KVE_LAYOUT_NHD = 0, /**< [pages][page_size][heads][entry]: vLLM's flash layout */
    KVE_LAYOUT_HND = 1  /**< [pages][heads][page_size][entry]: FlashInfer's HND */
} kve_cache_layout;

/** How a (row, slot) finds its page: kve_page_table.kind. */
typedef enum kve_page_kind {
    /** page = row, one page of page_size slots per sequence: with HND, the
     *  contiguous [seq][head][slot][entry] cache */
    KVE_PAGES_NONE = 0,
    /** vLLM: page = block_table[row * blocks_per_row + slot / page_size] */
    KVE_PAGES_BLOCK_TABLE = 1,
    /** FlashInfer: page = indices[indptr[row] + slot / page_size], and
     *  slot < (indptr[row+1] - indptr[row] - 1) * page_size + last_page_len[row]
     *  for every slot, the moves' included: describe each row's reserved
     *  pages, not attention's n_valid (docs/INTEGRATION.md "FlashInfer") */
    KVE_PAGES_INDPTR = 2,
    /** vLLM's reshape_and_cache_flash slot_mapping: slots are global, page =
     *  slot / page_size and slot % page_size the offset in it (0 ..
     *  n_pages * page_size - 1); token_row, n_rows and the tables are unused
     *  (token_row may be NULL) */
    KVE_PAGES_FLAT = 3
} kve_page_kind;

/**
 * A paged cache's page table, one type for kve_cache_write's destinations
 * and the scorers' kve_key_cache: slot s of row r lies in page
 * lookup(r, s) (by kind) at in-page slot s % page_size. Arrays are backend
 * memory; fields a kind does not read are ignored.
 */
typedef struct kve_page_table {
    kve_page_kind kind;
    uint32_t page_size;         /**< slots per page (vLLM's block_size) */
    uint32_t n_pages;           /**< pages in the cache */
    uint32_t n_rows;            /**< rows of the table (with NONE, <= n_pages; FLAT: unused) */
    const int32_t *block_table; /**< BLOCK_TABLE: [n_rows][blocks_per_row] */
    uint32_t blocks_per_row;
    /** INDPTR: [n_rows + 1], indptr[0] = 0 and non-decreasing: row r's
     *  pages are indices[indptr[r] .. indptr[r+1]) */
    const int32_t *indptr;
    /** INDPTR: page ids, [indptr[n_rows]] entries (read only through indptr) */
    const int32_t *indices;
    const int32_t *last_page_len; /**< INDPTR: [n_rows] */
} kve_page_table;

/** Element types of kve_cache_write's sources and caches. */
typedef enum kve_dtype {
    KVE_DTYPE_RAW = 0,      /**< untyped bytes, copied as they are (element = 1 byte) */
    KVE_DTYPE_F32 = 1,      /**< IEEE binary32 */
    KVE_DTYPE_F16 = 2,      /**< IEEE binary16 */
    KVE_DTYPE_BF16 = 3,     /**< bfloat16 */
    KVE_DTYPE_FP8_E4M3 = 4, /**< OCP E4M3 ("e4m3fn"): bias 7, max 448, no inf, NaN 0x7F/0xFF */
    KVE_DTYPE_FP8_E5M2 = 5  /**< OCP E5M2: bias 15, max 57344, inf 0x7C/0xFC */
} kve_dtype;

/**
 * One cache's own element types, entry size, strides and fp8 scale in a
 * kve_cache_write_desc; zeroed (the default), its cache takes the desc-wide
 * entry_bytes and strides and copies bytes. With convert = 1 every element
 * becomes convert(float(src) / scale), rounded to nearest even, saturating
 * fp8 as vLLM does (docs/INTEGRATION.md "Conversion").
 */
typedef struct kve_cache_part {
    kve_dtype src_dtype;    /**< element type of this cache's source */
    kve_dtype dst_dtype;    /**< element type of the cache */
    uint32_t convert;       /**< 0: types equal, bytes copied; 1: convert elements */
    /** Elements per entry (head_dim, or MLA's latent and rope parts as two
     *  caches); 0 = desc.entry_bytes / the size of dst_dtype. */
    uint32_t dim;
    /** This cache's byte strides; 0 takes the desc-wide one, and where that
     *  is 0 too, the dense value for this cache's entry size. src[c] and its
     *  strides must be multiples of src_dtype's size, dst[c] and its strides
     *  of dst_dtype's (elements are loaded whole): else KVE_ERR_INVALID. */
    size_t src_stride_token, src_stride_head;
    size_t dst_stride_page, dst_stride_slot, dst_stride_head;
    /** Bytes between an entry's consecutive elements in this cache; 0 = the
     *  element size (dense). vLLM's CPU cache keeps K transposed in a block:
     *  dst_stride_elem = block_size x element size, dst_stride_slot = the
     *  element size (docs/INTEGRATION.md "The engines' own write calls").
     *  Sources stay dense. Since 2.2. */
    size_t dst_stride_elem;
    /** fp8 destinations only, with convert = 1: float32 backend memory, one
     *  scale for the tensor (scale_per_head = 0) or one per head
     *  (scale_per_head = 1: scale[h]); NULL = no scaling. */
    const float *scale;
    uint32_t scale_per_head;
} kve_cache_part;

/**
 * New K/V rows and the caches they go into (all pointers backend memory).
 * Entry (token t, head h) of src[c], at src[c] + t * src_stride_token +
 * h * src_stride_head, goes to slot s = slots[t * slots_stride_token +
 * h * slots_stride_head] (skipped when -1) of row token_row[t] of dst[c],
 * at dst[c] + page * dst_stride_page + (s % page_size) * dst_stride_slot +
 * h * dst_stride_head. Byte strides of 0 take the layout's dense value.
 * Shared tensors, MLA, padding: docs/INTEGRATION.md "kve_cache_write".
 */
typedef struct kve_cache_write_desc {
    uint32_t n_tokens;          /**< may be 0 when there are moves */
    uint32_t n_heads;           /**< KV heads in the caches (a tensor shard's) */
    /** bytes per (token, head) cache entry, >= 1 (unless every part sets dim) */
    size_t entry_bytes;
    uint32_t n_caches;          /**< 1..KVE_MAX_CACHES: K and V = 2 */
    const void *src[KVE_MAX_CACHES];
    size_t src_stride_token, src_stride_head;
    void *dst[KVE_MAX_CACHES];
    kve_cache_layout layout;
    size_t dst_stride_page, dst_stride_slot, dst_stride_head;
    kve_page_table pages;       /**< every cache's page table (page = its page ids) */
    /** int64 slots; slots_stride_head = 0 gives every head the same slot
     *  (shared heads). Table layer tl of kve_state_append's mapping: slots =
     *  slot_mapping + tl * max_tokens * table_heads, slots_stride_token =
     *  table_heads, slots_stride_head = table_heads > 1. */
    const int64_t *slots;
    size_t slots_stride_token, slots_stride_head;
    /** [n_tokens]: each token's row, 0 .. pages.n_rows-1 (not FLAT) */
    const int32_t *token_row;
    /** Optional moves, run before any write (NULL = none): list (i, h) is
     *  L = i * moves_stride_row + h * moves_stride_head, its n_moves[L]
     *  pairs (src, dst) at moves + 2 * max_moves * L move the entry at slot
     *  src of page-table row move_row[i] (i when NULL) to slot dst, in every
     *  cache (docs/INTEGRATION.md "kve_cache_write": rules, state slices). */
    const int32_t *moves;
    const uint32_t *n_moves;    /**< pairs per list */
    uint32_t n_move_rows;       /**< move rows i of the call */
    /** pairs per list; 0 (kve_state_max_moves of a step without tokens):
     *  lists of no pair, every count 0 */
    uint32_t max_moves;
    size_t moves_stride_row, moves_stride_head; /**< in lists */
    /** [n_move_rows] or NULL; not read with KVE_PAGES_FLAT. A move row whose
     *  lists are all empty (a planned call's padding row) is not checked. */
    const int32_t *move_row;
    kve_cache_part part[KVE_MAX_CACHES]; /**< per cache; zeroed = desc-wide values, bytes */
    /** Optional (NULL = none), int64, shaped and strided as slots: entry
     *  (t, h) is copied, stored bytes as they are, from this slot of the
     *  same row instead of from src (-1: no write); the commit of the
     *  experimental kve_state_draft (docs/INTEGRATION.md "kve_cache_write"). */
    const int64_t *src_slots;
} kve_cache_write_desc;

/**
 * Run the moves, then write the new K/V rows of @p desc, stream-ordered (one
 * launch on a GPU, its grid set by the desc's shape). Checks shapes and
 * strides, and on backends with host memory every row, slot, page and
 * move, even when nothing is written (docs/INTEGRATION.md "kve_cache_write").
 * @pre no two (token, head) pairs target the same destination entry; with
 *      moves, no page shared by two rows where one's move meets the other's
 *      write.
 * @return KVE_OK; KVE_ERR_NULL, KVE_ERR_RANGE, KVE_ERR_INVALID, KVE_ERR_ALIAS,
 *         KVE_ERR_OVERFLOW; KVE_ERR_UNAVAILABLE when the backend lacks it.
 */
KVE_API kve_status kve_cache_write(kve_context *ctx, const kve_cache_write_desc *desc);

/* ================================================================== */
/* 4. Scorers (built-in scores for KVE_SCORED selection)               */
/* ================================================================== */
/*
 * A scorer reads post-RoPE keys from a K cache (described as kve_cache_write
 * describes its destination) and writes one float per slot of each slot
 * table: higher = more worth keeping (what scored selection keeps). One
 * layer per call; docs/SCORERS.md gives the formulas, file and tolerances.
 */

/** The built-in scorers: kve_score_desc.scorer. */
typedef enum kve_scorer {
    /** kvpress's KnormPress: score = -||k||_2 (the smallest norms are kept) */
    KVE_SCORER_KNORM = 1,
    /** TriAttention's trigonometric score from calibrated query statistics */
    KVE_SCORER_TRIATTENTION = 2
} kve_scorer;

/** kve_score_desc.flags */
enum {
    /** z-normalize each query head's scores over the table's candidates
     *  (mean, biased std clamped to >= 1e-6) before the max over the group */
    KVE_SCORE_ZNORM = 1u << 0,
    /** add weight x score to the output instead of storing it (mean over
     *  layers: weight 1/layers, one call per layer) */
    KVE_SCORE_ACCUMULATE = 1u << 1
};

/** Most RoPE frequencies (head_dim / 2) and offsets a scorer takes. A
 *  table's query heads (heads_per_table x group; K-norm: heads_per_table)
 *  are at most 256, and times head_dim / 2 at most 3072 (docs/SCORERS.md
 *  "Limits"). */
#define KVE_SCORE_MAX_FREQS 256
#define KVE_SCORE_MAX_OFFSETS 64

/**
 * A K cache of one layer, as kve_cache_write's destination: the key of
 * (page-table row r, slot s, head h) is head_dim elements of @p dtype at
 * base + page * stride_page + (s % page_size) * stride_slot + h * stride_head,
 * page found through the page table as kve_cache_write finds it (with
 * KVE_PAGES_FLAT, row r's slot s is the flat slot r * page_size + s).
 * Byte strides of 0 take the dense value of the layout.
 */
typedef struct kve_key_cache {
    const void *base;      /**< backend memory */
    kve_dtype dtype;       /**< KVE_DTYPE_F32, F16 or BF16 */
    uint32_t head_dim;     /**< elements per key, even, 2..2*KVE_SCORE_MAX_FREQS */
    uint32_t n_heads;      /**< KV heads in the cache (a shard's) */
    kve_cache_layout layout;
    size_t stride_page, stride_slot, stride_head;
    kve_page_table pages;  /**< as kve_cache_write's */
} kve_key_cache;

/** TriAttention's inputs for one layer (backend memory unless said). */
typedef struct kve_triattention_params {
    uint32_t group;          /**< query heads per KV head (GQA), >= 1 */
    /** float [n_heads * group][head_dim / 2][2]: mean pre-RoPE query q_f
     *  (re, im) of each query head, pairing x[f] with x[f + head_dim/2];
     *  query head q belongs to KV head q / group */
    const float *q_mean;
    const float *q_abs_mean; /**< float [n_heads * group][head_dim / 2]: mean |q_f| */
    /** float [head_dim / 2]: RoPE angle per position of each frequency, or
     *  NULL: omega_f = rope_theta^(-2f / head_dim) */
    const float *omega;
    double rope_theta;       /**< > 1, used when omega is NULL */
    const float *freq_scale_sq; /**< float [head_dim / 2]: s_f^2, or NULL: all 1 */
    /** float [n_offsets], finite: the future offsets delta averaged over;
     *  NULL with n_offsets 0: 1, 2, 4, ..., 65536 (17 offsets) */
    const float *offsets;
    uint32_t n_offsets;      /**< 0..KVE_SCORE_MAX_OFFSETS */
} kve_triattention_params;

/**
 * One row of a kve_score call (host memory): where its slot tables and
 * output rows are and what its candidates are (docs/SPEC.md §3: valid slots
 * with position >= prompt_len, less the window newest of them).
 */
typedef struct kve_score_row {
    uint64_t table_offset;  /**< elements from desc.slot_pos to the row's table 0 */
    uint64_t scores_offset; /**< elements from desc.scores to the row's output row 0 */
    uint32_t n_slots;       /**< slots per table of this row (0..2^31-1) */
    uint32_t prompt_len;    /**< P */
    uint32_t window;        /**< W */
    uint32_t round_start;   /**< t0: position of the round (TriAttention) */
    int32_t cache_row;      /**< page-table row of the row's keys */
    /** elements between the row's tables; 0 = desc.slot_pos_stride_table */
    uint32_t table_stride;
} kve_score_row;

/**
 * A scoring call: n_rows rows, each with n_tables = n_heads / heads_per_table
 * slot tables (table t at slot_pos + table_offset + t * the row's table
 * stride, int32 positions, -1 empty) and as many output rows (scores +
 * scores_offset + t * scores_stride_table). Table t stands for KV heads
 * t * heads_per_table .. (t+1) * heads_per_table - 1, its score the max over
 * their query heads (docs/SCORERS.md "Candidates, normalization,
 * aggregation"); non-candidate slots < n_slots get 0 (ACCUMULATE: kept).
 */
typedef struct kve_score_desc {
    kve_scorer scorer;
    uint32_t flags;          /**< KVE_SCORE_ZNORM | KVE_SCORE_ACCUMULATE */
    float weight;            /**< output = weight x score (0 counts as 1), finite */
    kve_key_cache keys;
    kve_triattention_params tri; /**< KVE_SCORER_TRIATTENTION only */
    /** KV heads per table, dividing keys.n_heads: 0 or 1 = a table per KV
     *  head; n_heads = one per row (shared heads) */
    uint32_t heads_per_table;
    uint32_t n_rows;
    const kve_score_row *rows; /**< [n_rows], host memory */
    const int32_t *slot_pos;   /**< backend memory */
    size_t slot_pos_stride_table; /**< >= each row's n_slots when n_tables > 1 */
    float *scores;             /**< backend memory */
    size_t scores_stride_table; /**< >= each row's n_slots when n_tables > 1 */
    /** kve_state_score only (host memory, [n_rows] or NULL): page-table row
     *  of call row i's keys; NULL = i */
    const int32_t *cache_rows;
} kve_score_desc;

/**
 * Score the candidates of every table of @p desc from the keys in its cache
 * (docs/SCORERS.md). Output rows of distinct tables must not overlap.
 * Checks every argument; on backends with host memory also each slot
 * position (>= -1) and the page of every candidate.
 * @return KVE_OK; KVE_ERR_NULL, KVE_ERR_RANGE, KVE_ERR_INVALID,
 *         KVE_ERR_ALIAS, KVE_ERR_OVERFLOW with a message naming the field;
 *         KVE_ERR_UNAVAILABLE when the backend lacks scoring.
 */
KVE_API kve_status kve_score(kve_context *ctx, const kve_score_desc *desc);

/**
 * Scores for a KVE_SCORED state's next kve_state_append of @p n_new tokens
 * to @p rows (host memory), in kve_step_buffers.scores' layout, for table
 * layer @p table_layer, written only for the rows whose round runs. desc
 * gives scorer, flags, weight, keys and tri; its rows, slot_pos, scores and
 * strides are ignored (docs/SCORERS.md "Scoring a cache state").
 * @param scores backend memory, strided as kve_step_buffers.scores.
 */
KVE_API kve_status kve_state_score(kve_state *state, uint32_t n_rows, const uint32_t *rows,
                                   const uint32_t *n_new, uint32_t table_layer,
                                   const kve_score_desc *desc, float *scores,
                                   size_t scores_stride_row, size_t scores_stride_table);

/** TriAttention calibration (docs/SCORERS.md "Calibration file"), host memory. */
typedef struct kve_triattention_stats {
    uint32_t n_layers, n_q_heads, head_dim;
    double rope_theta; /**< as recorded by the writer (0: not recorded) */
    /** float [n_layers][n_q_heads][head_dim / 2][2]: layer l's q_mean is
     *  q_mean + l * n_q_heads * head_dim */
    float *q_mean;
    float *q_abs_mean; /**< float [n_layers][n_q_heads][head_dim / 2] */
} kve_triattention_stats;

/**
 * Read a calibration file written by python/kvevict (docs/SCORERS.md): magic,
 * version, sizes, then the statistics. Fills @p out (arrays allocated; free
 * them with kve_triattention_stats_free).
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_INVALID (cannot open, bad magic,
 *         version, sizes, truncated or non-finite values: the message says
 *         which); KVE_ERR_NOMEM.
 */
KVE_API kve_status kve_triattention_stats_load(const char *path, kve_triattention_stats *out);

/** Free the arrays of @p stats (NULL accepted) and zero it. Returns KVE_OK. */
KVE_API kve_status kve_triattention_stats_free(kve_triattention_stats *stats);

/* ================================================================== */
/* 5. Audit: digests, a row's bookkeeping, its tables                  */
/* ================================================================== */
/*
 * Read back what was kept, to compare runs, backends and shards: the spec's
 * digest of a batch's keep-sets, a state row's bookkeeping and running
 * digest, and a copy of its slot tables. These may synchronize: not for
 * hot paths, nor inside a captured graph.
 */

/**
 * The spec's digest (docs/SPEC.md "Digest") of a batch's keep-sets. A head's
 * keep-set is the valid positions of its slot_pos, less the slots listed in
 * @p evicted (kve_evict's output) when @p evicted is not NULL.
 * @param evicted optional kve_evict_out whose evicted/n_evicted are read.
 */
KVE_API kve_status kve_digest(kve_context *ctx, const kve_batch *batch,
                              const kve_evict_out *evicted, uint64_t *out_digest);

/** One row of a state: the host's copy of its bookkeeping, no device access
 *  until a call was planned with kve_state_append_device (then read back
 *  first, waiting for the stream: not inside a captured region). */
typedef struct kve_state_seq_info {
    uint32_t active;     /**< 1 when the row holds a sequence */
    uint32_t prompt_len; /**< P */
    uint64_t seq_id;
    uint32_t capacity;   /**< C = max(B, P + W) + r slots per head */
    uint32_t n_tokens;   /**< tokens appended: positions 0 .. n_tokens-1 */
    uint32_t round;      /**< eviction rounds so far */
    uint32_t n_valid;    /**< valid slots, the same in every head */
    /** = n_valid: the KV length to give attention (slots 0 .. n_used-1 are
     *  exactly the valid ones). */
    uint32_t n_used;
    /** elements from kve_state_layout.slot_pos to the row's first table (its
     *  place in the pool, while active) */
    uint64_t table_offset;
    /** = capacity: the row's first draft slot (experimental kve_state_draft);
     *  its draft token i lives at slot draft_first + i < draft_first + max_draft */
    uint32_t draft_first;
    uint32_t max_draft; /**< D of the state's desc: draft slots a row has */
} kve_state_seq_info;

/** Row @p row's bookkeeping (a free row: active = 0). */
KVE_API kve_status kve_state_get_seq(const kve_state *state, uint32_t row,
                                   kve_state_seq_info *out);

/**
 * Copy row @p row's running digest (docs/SPEC.md §11) to @p out: the wrapping
 * sum over the row's rounds of its tables' evicted tokens' elements, each
 * weighted by the KV heads its table stands for; 0 before the first round.
 * The eviction kernels add to it as they evict (no extra pass or wait);
 * admit and rebuild set it (rebuild: to the uninterrupted row's). Log it at
 * retire: shards' values sum to the unsharded model's. Synchronizes.
 * @return KVE_ERR_INVALID when the row holds no sequence.
 */
KVE_API kve_status kve_state_read_digest(kve_state *state, uint32_t row, uint64_t *out);

/**
 * Copy row @p row's slot tables to host memory @p out [table_layers]
 * [table_heads][max_slots] (out_len >= row_elems; slots past the row's
 * capacity read -1). Not for hot paths.
 * @return KVE_ERR_INVALID when the row holds no sequence.
 */
KVE_API kve_status kve_state_read_slots(kve_state *state, uint32_t row, int32_t *out,
                                        size_t out_len);

#ifdef __cplusplus
}
#endif
#endif /* KVEVICT_H */

/* ================================================================== */
/* 6. Experimental API                                                 */
/* ================================================================== */
/*
 * Declared only when KVE_EXPERIMENTAL is defined before this header is
 * included: new calls that may change or go in any minor release, outside
 * semantic versioning. Opt in knowingly and pin the library's minor version
 * (docs/INTEGRATION.md "Stable and experimental API").
 */
#if defined(KVE_EXPERIMENTAL) && !defined(KVEVICT_H_EXPERIMENTAL)
#define KVEVICT_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A speculative step's draft tokens (docs/SPEC.md "Speculative steps"): call
 * row i's n_draft[i] drafts go to state row rows[i]'s draft slots (token k
 * at slot capacity + k); out->slot_mapping gets them, move lists are
 * emptied, nothing else changes (docs/INTEGRATION.md "Speculative decoding").
 * @param rows, n_draft [n_rows], backend memory; n_draft[i] = 0 is padding.
 * @param max_draft the most drafts a row brings, <= desc.max_draft.
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_RANGE (n_rows, max_draft,
 *         out->max_rows); KVE_ERR_INVALID (a state without max_draft).
 */
KVE_API kve_status kve_state_draft(kve_state *state, uint32_t n_rows, const uint32_t *rows,
                                   const uint32_t *n_draft, uint32_t max_draft,
                                   const kve_step_buffers *out);

/**
 * kve_state_score for a step planned on the device: the same scores, in the
 * same layout, from the rows and counts in backend memory that the step's
 * kve_state_append_device reads; one launch per table layer, due rows
 * decided on the device, capturable (docs/SCORERS.md "Scoring a cache state").
 * @param scores_stride_table >= desc.max_slots (any row may be due).
 * @return KVE_OK; KVE_ERR_NULL; KVE_ERR_RANGE; KVE_ERR_INVALID;
 *         KVE_ERR_OVERFLOW; KVE_ERR_UNAVAILABLE.
 */
KVE_API kve_status kve_state_score_device(kve_state *state, uint32_t n_rows,
                                          const uint32_t *rows, const uint32_t *n_new,
                                          uint32_t table_layer, const kve_score_desc *desc,
                                          float *scores, size_t scores_stride_row,
                                          size_t scores_stride_table);

#ifdef __cplusplus
}
#endif
#endif /* KVE_EXPERIMENTAL */

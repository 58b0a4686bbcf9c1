/*
 * compact_cpu.c — the CPU's compaction kernel (kve_compact; the op is
 * backends/cpu.c's): every head's kept entries
 * and positions to the front of its rows, head by head in per-head rows,
 * slot by slot across groups of heads in token rows; OpenMP across heads
 * or groups (static schedule), so results cannot depend on the thread
 * count. The copies go through the ISA table's copy_runs (or its
 * copy_runs_stream), except a streaming token-row walk's, which copies
 * each entry itself (kve_stream_entry), and an in-place head's whose runs
 * move a short way down on a CPU that copies those faster with plain
 * stores (near_plain: the driver's kve_cpu_near_moves_plain).
 */
#include <string.h>

#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"

#if defined(__SSE2__) /* every x86-64 */
#include <emmintrin.h>
#define KVE_DIRECT_STREAM 1
#else
#define KVE_DIRECT_STREAM 0
#endif

#define KVE_COMPACT_GROUP 320 /* most heads one token-row walk takes */
#define KVE_COPY_LIST 64 /* copies queued per cache before one copy_runs call */
/* Compactions whose rows hold this many bytes or more copy with the ISA's
 * copy_runs_stream: too large for their output to stay cached (half an
 * EPYC CCD's L3 and up), and streaming stores moved G1's compaction faster
 * than plain ones on the AMD Zen 4 it was measured on, in both layouts. */
#define KVE_STREAM_MIN_BYTES ((size_t)16 << 20)

typedef void (*kve_copy_fn)(char *const *dst, const char *const *src, const size_t *bytes,
                            uint32_t count);

/* The first slot in [t, stop) of @p row that is empty (negative), else
 * stop: eight slots a test while they last, one then. */
static inline uint32_t kve_valid_end(const int32_t *row, uint32_t t, uint32_t stop)
{
    for (; t + 8 <= stop; t += 8) {
        const int32_t *r = row + t;
        if ((r[0] | r[1] | r[2] | r[3] | r[4] | r[5] | r[6] | r[7]) < 0)
            break;
    }
    while (t < stop && row[t] >= 0)
        t++;
    return t;
}

static char *kve_entry_base(const kve_cache_view *v, size_t s, size_t l, size_t h)
{
    return (char *)v->base + s * v->stride_seq + l * v->stride_layer + h * v->stride_head;
}

/* Copies waiting for the ISA's copy_runs, in the order given. In token
 * rows, where one cache's copies are queued at a time, neighbouring heads
 * whose entries move by the same shift make one copy: the last one grows.
 * That keeps the result: the grown part reads nothing the first part
 * writes (out of place nothing overlaps; in place every destination lies
 * below its source). */
typedef struct {
    char *to[KVE_COPY_LIST];
    const char *from[KVE_COPY_LIST];
    size_t bytes[KVE_COPY_LIST];
    uint32_t n;
    kve_copy_fn copy; /* the ISA's copy_runs or copy_runs_stream */
} kve_copy_list;

static void kve_copy_flush(kve_copy_list *q)
{
    if (q->n)
        q->copy(q->to, q->from, q->bytes, q->n);
    q->n = 0;
}

/* Queues a copy; @p grow: it continues the last one queued at both ends,
 * which then grows when it is still in the list. */
static inline void kve_copy_add(kve_copy_list *q, char *to, const char *from, size_t bytes,
                                int grow)
{
    if (grow && q->n) {
        q->bytes[q->n - 1] += bytes;
        return;
    }
    if (q->n == KVE_COPY_LIST)
        kve_copy_flush(q);
    uint32_t n = q->n++;
    q->to[n] = to;
    q->from[n] = from;
    q->bytes[n] = bytes;
}

/* Whether compaction @p d streams its copies (KVE_STREAM_MIN_BYTES): its
 * rows' bytes, whole cache lines of entries only. */
static int kve_compact_streams(const kve_compact_desc *d)
{
    size_t rows = (size_t)d->n_seqs * d->n_layers * d->n_heads * d->n_slots;
    size_t per = d->entry_bytes < KVE_STREAM_MIN_BYTES ? d->entry_bytes * d->n_caches
                                                       : KVE_STREAM_MIN_BYTES; /* not 0 */
    return d->entry_bytes % 64 == 0 && rows >= KVE_STREAM_MIN_BYTES / per;
}

/* One head's walk over its slots: its tables, its entries, and the next of
 * its evictions (e). Slots below t0 stay where they are. */
typedef struct {
    int32_t *row;
    const int32_t *ev;
    uint32_t ne, e, t0;
    int holes;    /* an empty slot from t0 on: else only evictions leave gaps */
    const char *src[KVE_MAX_CACHES];
    char *dst[KVE_MAX_CACHES];
} kve_head_cursor;

/* The copies of every cache of one compaction walk. */
typedef struct {
    const kve_compact_desc *d;
    int out_of_place;
    size_t dst_stride[KVE_MAX_CACHES];
    kve_copy_list q;
} kve_compact_walk;

static void kve_walk_init(kve_compact_walk *w, const kve_cpu_kernels *k, const kve_compact_desc *d,
                          int out_of_place)
{
    w->q.copy = kve_compact_streams(d) ? k->copy_runs_stream : k->copy_runs;
    w->d = d;
    w->out_of_place = out_of_place;
    for (uint32_t m = 0; m < d->n_caches; m++)
        w->dst_stride[m] = (out_of_place ? &d->dst[m] : &d->src[m])->stride_slot;
    w->q.n = 0;
}

/* Head i's cursor. In place, the slots before its first hole or eviction
 * stay put, and so do their positions. */
static void kve_cursor_init(const kve_compact_walk *w, size_t i, kve_head_cursor *c)
{
    const kve_compact_desc *d = w->d;
    size_t s = i / ((size_t)d->n_layers * d->n_heads), l = (i / d->n_heads) % d->n_layers,
           h = i % d->n_heads;
    c->row = d->slot_pos + i * d->slot_pos_stride;
    c->ev = d->evicted + i * d->evicted_stride;
    c->ne = d->n_evicted[i];
    c->e = 0;
    uint32_t stop = c->ne ? (uint32_t)c->ev[0] : d->n_slots;
    c->t0 = w->out_of_place ? 0 : kve_valid_end(c->row, 0, stop);
    c->holes = kve_valid_end(c->row, c->t0, d->n_slots) < d->n_slots;
    for (uint32_t m = 0; m < d->n_caches; m++) {
        c->src[m] = kve_entry_base(&d->src[m], s, l, h);
        c->dst[m] = kve_entry_base(w->out_of_place ? &d->dst[m] : &d->src[m], s, l, h);
    }
}

/* The first slot from t on of the cursor's head that does not stay (an
 * empty one, or the next eviction), else n_slots. */
static inline uint32_t kve_next_gap(const kve_head_cursor *c, uint32_t n_slots, uint32_t t)
{
    uint32_t stop = c->e < c->ne ? (uint32_t)c->ev[c->e] : n_slots;
    return c->holes ? kve_valid_end(c->row, t, stop) : stop;
}

/* The cursor's next run of staying slots from *t on: returns its first
 * slot and leaves *t past its last (n_slots and n_slots: none), passing
 * the holes and evictions before it. */
static uint32_t kve_next_run(kve_head_cursor *c, uint32_t n_slots, uint32_t *t)
{
    for (uint32_t a = *t; a < n_slots; a++) {
        uint32_t z = kve_next_gap(c, n_slots, a);
        if (z > a) {
            *t = z;
            return a;
        }
        c->e += c->e < c->ne && c->ev[c->e] == (int32_t)a;
    }
    return *t = n_slots;
}

/* The head's positions to their kept places, run by run (the cursor's
 * walk from its start), and its table past them empty. */
static void kve_cursor_positions(const kve_compact_desc *d, kve_head_cursor *c)
{
    uint32_t j = c->t0, t = c->t0, a;
    c->e = 0;
    for (; (a = kve_next_run(c, d->n_slots, &t)) < d->n_slots; j += t - a)
        if (j != a)
            memmove(c->row + j, c->row + a, (size_t)(t - a) * 4);
    for (; j < d->n_slots; j++)
        c->row[j] = -1;
}

/* A run of staying slots of one head: slots [from, from + len) to [to, ..). */
typedef struct {
    uint32_t from, to, len;
} kve_slot_run;

/* The entries of @p n runs of the cursor's head, cache by cache (one
 * stream at a time): one copy per run where a head's slots are adjacent. */
static void kve_runs_copy(kve_compact_walk *w, const kve_head_cursor *c, const kve_slot_run *r,
                          uint32_t n)
{
    const kve_compact_desc *d = w->d;
    size_t e = d->entry_bytes;
    for (uint32_t m = 0; m < d->n_caches; m++) {
        size_t ss = d->src[m].stride_slot, ds = w->dst_stride[m];
        size_t run = ss == e && ds == e ? 0 : e; /* 0: a run is one copy */
        for (uint32_t i = 0; i < n; i++) {
            char *to = c->dst[m] + (size_t)r[i].to * ds;
            const char *from = c->src[m] + (size_t)r[i].from * ss;
            if (!run)
                kve_copy_add(&w->q, to, from, (size_t)r[i].len * e, 0);
            else
                for (uint32_t x = 0; x < r[i].len; x++)
                    kve_copy_add(&w->q, to + x * ds, from + x * ss, e, 0);
        }
    }
}

/* Whether every run of the cursor's head (in place) moves down by at most
 * KVE_NEAR_MOVE_BYTES in every cache: no holes, so by at most its
 * evictions' count of slots. */
static int kve_moves_near(const kve_compact_desc *d, const kve_head_cursor *c)
{
    if (c->holes)
        return 0;
    for (uint32_t m = 0; m < d->n_caches; m++)
        if ((size_t)c->ne * d->src[m].stride_slot > KVE_NEAR_MOVE_BYTES)
            return 0;
    return 1;
}

/* Head i's kept slots to the front of its rows, the head alone, run by run
 * of staying slots (between holes and evictions), their positions moving
 * with them in the same pass: the order that streams when a head's
 * entries are adjacent (HF-like). @p near_plain: plain stores for a head
 * whose runs move near (near_plain: kve_cpu_near_moves_plain; in place only). */
static void kve_compact_head(const kve_cpu_kernels *k, const kve_compact_desc *d, size_t i,
                             int out_of_place, int near_plain)
{
    kve_compact_walk w;
    kve_head_cursor c;
    kve_slot_run runs[KVE_COPY_LIST];
    uint32_t n = 0, j, t, a;
    kve_walk_init(&w, k, d, out_of_place);
    kve_cursor_init(&w, i, &c);
    if (near_plain && kve_moves_near(d, &c))
        w.q.copy = k->copy_runs; /* their destination lines are still cached */
    for (j = t = c.t0; (a = kve_next_run(&c, d->n_slots, &t)) < d->n_slots; j += t - a) {
        if (j != a || out_of_place) {
            runs[n++] = (kve_slot_run){a, j, t - a};
            if (j != a) /* j < a: the unread part of the table stays */
                memmove(c.row + j, c.row + a, (size_t)(t - a) * 4);
        }
        if (n == KVE_COPY_LIST) {
            kve_runs_copy(&w, &c, runs, n);
            n = 0;
        }
    }
    kve_runs_copy(&w, &c, runs, n);
    kve_copy_flush(&w.q);
    for (; j < d->n_slots; j++)
        c.row[j] = -1;
}

/* A slot's entries of all heads adjacent (token-row layouts, [T][L][H][E]):
 * walking head by head would stride a whole row per entry, so walk slot by
 * slot across a group of heads instead, and memory streams. */
static int kve_compact_by_slot(const kve_compact_desc *d)
{
    for (uint32_t c = 0; c < d->n_caches; c++) {
        const kve_cache_view *v = &d->src[c];
        size_t lay = d->n_layers > 1 ? v->stride_layer : 0, hd = d->n_heads > 1 ? v->stride_head : 0;
        if (v->stride_slot <= (lay > hd ? lay : hd))
            return 0;
    }
    return d->n_slots > 1 && (size_t)d->n_layers * d->n_heads > 1;
}

/* Heads per token-row group of a sequence: as many as KVE_COMPACT_GROUP
 * lets, in groups as even as can be, and a group per thread where the
 * sequences alone are too few. A wider group reads a longer stretch of
 * each slot's row in one go: on G1 (288 heads a sequence) 64-head groups
 * compacted at 0.42x a memmove of the same bytes, 144 at 0.46x, 288 at
 * 0.50x (in place, one thread, streaming copies). */
static size_t kve_group_size(size_t per_seq, uint32_t n_seqs, int threads)
{
    size_t parts = ((size_t)threads + n_seqs - 1) / n_seqs;
    size_t least = (per_seq + KVE_COMPACT_GROUP - 1) / KVE_COMPACT_GROUP;
    parts = parts < least ? least : parts > per_seq ? per_seq : parts;
    return (per_seq + parts - 1) / parts;
}

/* One entry of a token-row walk that streams: @p bytes (a multiple of 64)
 * from @p from to @p to (16-byte aligned) with non-temporal stores, right
 * where the walk meets it, so that the walk's next slots overlap the
 * stores in flight (queued for copy_runs_stream instead, G1's entries
 * compacted at about 0.49x a memmove of the same bytes, here 0.64x), the
 * source read KVE_STREAM_AHEAD bytes ahead (the walk waited on its loads). */
static inline void kve_stream_entry(char *to, const char *from, size_t bytes)
{
#if KVE_DIRECT_STREAM
    for (size_t o = 0; o < bytes; o += 64) {
        _mm_prefetch(from + o + KVE_STREAM_AHEAD, _MM_HINT_T0); /* may lie past the cache */
        const __m128i *p = (const __m128i *)(const void *)(from + o);
        __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2),
                e = _mm_loadu_si128(p + 3);
        __m128i *q = (__m128i *)(void *)(to + o);
        _mm_stream_si128(q, a);
        _mm_stream_si128(q + 1, b);
        _mm_stream_si128(q + 2, c);
        _mm_stream_si128(q + 3, e);
    }
#else
    (void)to, (void)from, (void)bytes;
#endif
}

/* Whether a token-row walk of @p count heads streams its entries itself
 * (kve_stream_entry): it streams, and every head's destination and slot
 * stride are 16-byte aligned in every cache. */
static int kve_streams_direct(const kve_compact_walk *w, const kve_head_cursor *hc, size_t count)
{
    if (!KVE_DIRECT_STREAM || !kve_compact_streams(w->d)) /* entry_bytes % 64 == 0 */
        return 0;
    uintptr_t bits = 0;
    for (uint32_t m = 0; m < w->d->n_caches; m++) {
        bits |= (uintptr_t)w->dst_stride[m];
        for (size_t g = 0; g < count; g++)
            bits |= (uintptr_t)hc[g].dst[m];
    }
    return (bits & 15) == 0;
}

/* Each thread's cursors of its group (52 KiB: too many for a stack). */
static _Thread_local kve_head_cursor kve_group_cursors[KVE_COMPACT_GROUP];

/* What the walk over slots reads of each head of a group, side by side
 * (8 KiB, on the stack: a thread-local one is looked up again and again
 * in a shared library): from t0 on, the next slot that does not stay (an
 * empty one or an eviction: gap), how many did not stay before the walk's
 * slot (shift: slot t's kept place is t - shift), and the head's entries
 * in the cache walked. */
typedef struct {
    uint32_t gap[KVE_COMPACT_GROUP], shift[KVE_COMPACT_GROUP];
    uint8_t adjacent[KVE_COMPACT_GROUP];
    const char *src[KVE_COMPACT_GROUP];
    char *dst[KVE_COMPACT_GROUP];
} kve_group_heads;

/* Heads [first, first + count) of one sequence, slot by slot, one cache
 * at a time (on G1 in place, that pattern alone moved at about 0.83x a
 * memmove of the same bytes, and at 0.72x with K and V in one walk);
 * neighbouring heads whose entries move by the same shift join into one
 * copy. The positions move last, head by head, so that every cache's walk
 * sees the same holes. */
static void kve_compact_group(const kve_cpu_kernels *k, const kve_compact_desc *d, size_t first,
                              size_t count, int out_of_place)
{
    kve_compact_walk w;
    kve_head_cursor *hc = kve_group_cursors;
    kve_group_heads heads, *hot = &heads;
    uint32_t *gap = hot->gap, *shift = hot->shift;
    kve_walk_init(&w, k, d, out_of_place);
    uint32_t t_min = d->n_slots, n = d->n_slots;
    for (size_t g = 0; g < count; g++) {
        kve_head_cursor *c = &hc[g];
        kve_cursor_init(&w, first + g, c);
        t_min = c->t0 < t_min ? c->t0 : t_min;
        int adjacent = g > 0; /* every entry right after the previous head's */
        for (uint32_t m = 0; adjacent && m < d->n_caches; m++)
            adjacent = c->src[m] == hc[g - 1].src[m] + d->entry_bytes &&
                       c->dst[m] == hc[g - 1].dst[m] + d->entry_bytes;
        hot->adjacent[g] = (uint8_t)adjacent;
    }
    int direct = kve_streams_direct(&w, hc, count);
    for (uint32_t m = 0; m < d->n_caches; m++) {
        size_t ss = d->src[m].stride_slot, ds = w.dst_stride[m], eb = d->entry_bytes;
        for (size_t g = 0; g < count; g++) {
            kve_head_cursor *c = &hc[g];
            c->e = 0;
            gap[g] = kve_next_gap(c, n, c->t0);
            shift[g] = 0;
            hot->src[g] = c->src[m];
            hot->dst[g] = c->dst[m];
        }
        /* In place, a head's slots before t0 have shift 0 and stay. */
        for (uint32_t t = t_min; t < n; t++)
            for (size_t g = 0, prev = UINT32_MAX; g < count; g++) { /* prev: head g - 1's j */
                uint32_t j = t - shift[g];
                if (t == gap[g]) {
                    kve_head_cursor *c = &hc[g];
                    c->e += c->e < c->ne && c->ev[c->e] == (int32_t)t;
                    shift[g]++;
                    gap[g] = kve_next_gap(c, n, t + 1);
                    prev = UINT32_MAX;
                } else if (j != t || out_of_place) {
                    char *to = hot->dst[g] + j * ds;
                    const char *from = hot->src[g] + t * ss;
                    if (direct)
                        kve_stream_entry(to, from, eb);
                    else
                        kve_copy_add(&w.q, to, from, eb, hot->adjacent[g] && prev == j);
                    prev = j;
                } else {
                    prev = UINT32_MAX;
                }
            }
        kve_copy_flush(&w.q);
    }
#if KVE_DIRECT_STREAM
    if (direct)
        _mm_sfence(); /* the stores visible to every thread, as copy_runs_stream's */
#endif
    for (size_t g = 0; g < count; g++)
        kve_cursor_positions(d, &hc[g]);
}

/* One kve_cpu_compact_run call, shared by its threads. */
typedef struct {
    const kve_cpu_kernels *k;
    const kve_compact_desc *d;
    int out_of_place, near_plain; /* near_plain: in place, and the caller's near_plain */
    size_t per_seq, size, groups_per_seq; /* groups: size heads of a sequence */
} kve_compact_call;

static int kve_compact_groups(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_compact_call *c = (const kve_compact_call *)arg;
    for (size_t g = lo; g < hi; g++) {
        size_t s = g / c->groups_per_seq, off = (g % c->groups_per_seq) * c->size;
        size_t count = c->per_seq - off < c->size ? c->per_seq - off : c->size;
        kve_compact_group(c->k, c->d, s * c->per_seq + off, count, c->out_of_place);
    }
    return 0;
}

static int kve_compact_heads(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_compact_call *c = (const kve_compact_call *)arg;
    for (size_t i = lo; i < hi; i++)
        kve_compact_head(c->k, c->d, i, c->out_of_place, c->near_plain);
    return 0;
}

/* Every head's kept entries and positions to the front: groups of heads
 * slot by slot in token-row layouts, else head by head. */
void kve_cpu_compact_run(const kve_compact_desc *d, kve_cpu_isa isa, int threads, int near_plain)
{
    int out_of_place = d->dst[0].base != NULL;
    kve_compact_call c = {kve_cpu_kernels_get(isa), d, out_of_place, !out_of_place && near_plain,
                          (size_t)d->n_layers * d->n_heads, 0, 0};
    if (kve_compact_by_slot(d)) {
        c.size = kve_group_size(c.per_seq, d->n_seqs, threads);
        c.groups_per_seq = (c.per_seq + c.size - 1) / c.size;
        kve_cpu_parallel(threads, (size_t)d->n_seqs * c.groups_per_seq, kve_compact_groups, &c);
    } else {
        kve_cpu_parallel(threads, (size_t)d->n_seqs * c.per_seq, kve_compact_heads, &c);
    }
}

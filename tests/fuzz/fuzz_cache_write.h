/*
 * fuzz_cache_write.h — what the sources of fuzz_cache_write share (internal
 * to the harness): one decoded request and each cache's resolved geometry;
 * the parts' decoding (fuzz_cache_write_parts.c) and the reference write with
 * its checks (fuzz_cache_write_ref.c), called from LLVMFuzzerTestOneInput in
 * fuzz_cache_write.c in the order the input's bytes are read.
 */
#ifndef KVE_FUZZ_CACHE_WRITE_H
#define KVE_FUZZ_CACHE_WRITE_H

#include "fuzz_common.h"

/* One cache's geometry with its part resolved as the header says: element
 * types and sizes, dim, entry bytes of source and cache, byte strides (0
 * taken from the desc-wide value, then the dense one of this cache's entry;
 * d_elem, between an entry's elements in the cache: 0 = the element size),
 * the bytes one cache entry spans, spans, its scale. */
typedef struct {
    kve_dtype st, dt;
    uint32_t ss, ds, dim;
    int conv;
    size_t se, de, s_head, s_tok, d_head, d_slot, d_page, d_elem, e_span;
    size_t src_span, dst_span;
    const float *scale; /* NULL: no division */
} cw_cache;

/* One decoded request: the descriptor, what the harness allocated for it,
 * the reference write and its verdicts. */
typedef struct {
    kve_cache_write_desc d;
    int bad, exact, unsure;  /* unsure: validity not asserted */
    /* refuse: must be refused, unsure or not (a view past SIZE_MAX bytes, an
     * indptr not from 0 or decreasing); skip: a valid view too large to
     * allocate */
    int refuse, skip;
    size_t d_head, d_slot, d_page, s_head, s_tok;
    size_t src_span, dst_span; /* desc-wide, before parts */
    uint64_t seed;             /* the caches' bytes */
    int has_parts;
    /* shared: cache 1's destination inside cache 0's allocation (one K/V
     * tensor), shared_off bytes after dst[0], the allocation shared_len
     * bytes; shared_doc: a layout the header's documentation accepts when
     * nested, aligned and without overlap (equal strides and dims, or vLLM's
     * CPU layout) */
    int shared, shared_doc;
    size_t shared_off, shared_len;
    int styled;          /* style_sources: converting sources restyled, from style_rng */
    uint64_t style_rng;
    cw_cache g[KVE_MAX_CACHES];
    float *scale[KVE_MAX_CACHES];
    int dst_overlap;
    int misaligned; /* a typed base or stride not a multiple of its element's size */
    /* [entries]: entries whose bytes depend on an order the header leaves
     * open (two tokens writing one, or moves against its @pre) */
    uint8_t *amb;
    size_t n_entries;
    uint8_t *src[KVE_MAX_CACHES], *dst[KVE_MAX_CACHES], *ref[KVE_MAX_CACHES],
        *before[KVE_MAX_CACHES];
    int32_t *block_table, *indptr, *indices, *last, *token_row;
    int32_t *moves, *move_row;
    uint32_t *n_moves;
    size_t n_lists;
    int64_t *slots;
    int64_t *src_slots;   /* desc.src_slots (NULL: the sources are src[]) */
    size_t n_slots_el;    /* elements of slots (and src_slots) */
    int64_t row_limit[4]; /* slots a row may use */
} cw_case;

/* fuzz_cache_write_parts.c: the per-cache parts, decoded last; resolved as
 * the header says, with the verdict on them; converting sources restyled
 * (drawn before the caches are filled, applied after); the caches' element
 * strides, from the input's last bytes (then resolved again). */
void decode_parts(fz_bytes *in, cw_case *c);
void resolve_parts(cw_case *c);
void decode_style(fz_bytes *in, cw_case *c);
void style_sources(cw_case *c);
void decode_elem_strides(fz_bytes *in, cw_case *c);
void decode_shared(fz_bytes *in, cw_case *c);
/* Bytes allocated at c->dst[k] (0 for a cache inside another's). */
size_t dst_len(const cw_case *c, uint32_t k);

/* fuzz_cache_write_ref.c: what the allocation decides (alignment, nesting,
 * overlap), the reference write with its verdicts, and the library's answer
 * held against them. */
void check_geometry(cw_case *c);
void reference_write(cw_case *c);
void check_write(cw_case *c, kve_status st);

#endif

/* kve_check.h — checks that more than one front-end validator makes
 * (validate.c, api.c, memory.c, state*.c, cache_write.c, score.c): one
 * place each. */
#ifndef KVE_CHECK_H
#define KVE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kve_error.h"
#include "kve_util.h"

/* KVE_ERR_NULL naming the output pointer @p p when it is NULL. */
#define KVE_CHECK_OUT(p) KVE_RETURN_ERROR_IF(!(p), KVE_ERR_NULL, #p " is NULL")

/* THE overflow-checked size of a caller's strided view (docs/FUZZING.md,
 * "Strides"): @p rows rows of @p len elements, @p stride elements apart,
 * span (rows - 1) x stride + len elements (0 when empty) in @p out. Returns
 * 1 when that, or its bytes at @p elem bytes an element, overflows size_t.
 * A view of more dimensions nests calls, inner first (len = the inner
 * span); every size formed from a caller's stride goes through here. */
static inline int kve_rows_span(size_t rows, size_t stride, size_t len, size_t elem, size_t *out)
{
    size_t s, bytes;
    if (rows == 0 || len == 0) {
        *out = 0;
        return 0;
    }
    if (__builtin_mul_overflow(rows - 1, stride, &s) || __builtin_add_overflow(s, len, &s) ||
        __builtin_mul_overflow(s, elem, &bytes))
        return 1;
    *out = s;
    return 0;
}

/* KVE_ERR_RANGE naming @p what when @p value exceeds 2^31-1. */
static inline kve_status kve_check_i32(const char *what, uint64_t value)
{
    KVE_RETURN_ERROR_IF(value > KVE_I32_MAX, KVE_ERR_RANGE, "%s = %llu: must be <= 2^31-1", what,
                        (unsigned long long)value);
    return KVE_OK;
}

/* A page table's shape: its kind, sizes and the arrays its kind reads;
 * messages name the field as @p what.field ("desc.pages", "desc.keys.pages"). */
static inline kve_status kve_check_pages(const char *what, const kve_page_table *p)
{
    KVE_RETURN_ERROR_IF(p->kind < KVE_PAGES_NONE || p->kind > KVE_PAGES_FLAT,
                        KVE_ERR_INVALID, "%s.kind = %d: not a kve_page_kind value", what,
                        (int)p->kind);
    KVE_RETURN_ERROR_IF(p->page_size == 0, KVE_ERR_RANGE, "%s.page_size = 0: must be >= 1", what);
    KVE_RETURN_ERROR_IF(p->n_pages == 0, KVE_ERR_RANGE, "%s.n_pages = 0: must be >= 1", what);
    KVE_RETURN_ERROR_IF(p->kind != KVE_PAGES_FLAT && p->n_rows == 0, KVE_ERR_RANGE,
                        "%s.n_rows = 0: must be >= 1", what);
    KVE_RETURN_ERROR_IF(p->kind == KVE_PAGES_NONE && p->n_rows > p->n_pages, KVE_ERR_RANGE,
                        "%s.n_rows = %u: with KVE_PAGES_NONE row r is page r, and n_pages = %u",
                        what, p->n_rows, p->n_pages);
    if (p->kind == KVE_PAGES_BLOCK_TABLE) {
        KVE_RETURN_ERROR_IF(!p->block_table, KVE_ERR_NULL, "%s.block_table is NULL", what);
        KVE_RETURN_ERROR_IF(p->blocks_per_row == 0, KVE_ERR_RANGE,
                            "%s.blocks_per_row = 0: must be >= 1", what);
    }
    if (p->kind == KVE_PAGES_INDPTR) {
        KVE_RETURN_ERROR_IF(!p->indptr, KVE_ERR_NULL, "%s.indptr is NULL", what);
        KVE_RETURN_ERROR_IF(!p->indices, KVE_ERR_NULL, "%s.indices is NULL", what);
        KVE_RETURN_ERROR_IF(!p->last_page_len, KVE_ERR_NULL, "%s.last_page_len is NULL", what);
    }
    return KVE_OK;
}

#endif

/* kve_check.h — checks that more than one front-end validator makes
 * (common/validate.c, state*.c, cache_write.c, score.c): one place each. */
#ifndef KVE_CHECK_H
#define KVE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kve_error.h"
#include "kve_util.h"

/* Elements spanned by @p rows rows of @p len at @p stride (0 when empty);
 * returns 1 when that overflows size_t. */
static inline int kve_rows_span(size_t rows, size_t stride, size_t len, size_t *out)
{
    size_t s;
    if (rows == 0 || len == 0) {
        *out = 0;
        return 0;
    }
    if (__builtin_mul_overflow(rows - 1, stride, &s) || __builtin_add_overflow(s, len, &s))
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

#endif

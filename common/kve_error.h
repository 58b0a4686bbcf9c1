/* kve_error.h — the thread-local error message and one-line check macros. */
#ifndef KVE_ERROR_H
#define KVE_ERROR_H

#include "kvevict.h"

/* Record @p status with a printf-style message naming the argument and
 * value; returns @p status so a check stays one line. */
kve_status kve_error_set(kve_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Forget the last message (successful calls leave "" behind). */
void kve_error_clear(void);

#define KVE_RETURN_ERROR_IF(cond, status, ...)                                                   \
    do {                                                                                         \
        if (cond)                                                                                \
            return kve_error_set((status), __VA_ARGS__);                                         \
    } while (0)

#define KVE_TRY(expr)                                                                            \
    do {                                                                                         \
        kve_status kve_try_status_ = (expr);                                                     \
        if (kve_try_status_ != KVE_OK)                                                           \
            return kve_try_status_;                                                              \
    } while (0)

#endif

/* kve_select.h — Hoare quickselect for the CPU kernels (scalar reference
 * and the SIMD kernels' exact slow paths). */
#ifndef KVE_SELECT_H
#define KVE_SELECT_H

#include <stddef.h>

/* Defines `static type name(type *a, size_t n, size_t k)`: rearranges
 * a[0..n) so that a[k] is the k-th smallest (0-based) and returns it.
 * Values are unique, so any pivot order gives the same answer. */
#define KVE_DEFINE_SELECT(name, type, less)                                                      \
    static type name(type *a, size_t n, size_t k)                                                \
    {                                                                                            \
        ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, kk = (ptrdiff_t)k;                              \
        while (lo < hi) {                                                                        \
            type p = a[lo + (hi - lo) / 2];                                                      \
            ptrdiff_t i = lo, j = hi;                                                            \
            while (i <= j) {                                                                     \
                while (less(a[i], p))                                                            \
                    i++;                                                                         \
                while (less(p, a[j]))                                                            \
                    j--;                                                                         \
                if (i <= j) {                                                                    \
                    type t = a[i];                                                               \
                    a[i++] = a[j];                                                               \
                    a[j--] = t;                                                                  \
                }                                                                                \
            }                                                                                    \
            if (kk <= j)                                                                         \
                hi = j;                                                                          \
            else if (kk >= i)                                                                    \
                lo = i;                                                                          \
            else                                                                                 \
                break;                                                                           \
        }                                                                                        \
        return a[kk];                                                                            \
    }

#define KVE_U32_LESS(x, y) ((x) < (y))

#endif

/* cpu_threads.c — kve_cpu_parallel (kve_cpu_threads.h). */
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kve_cpu_threads.h"

int kve_cpu_parallel(int threads, size_t n, kve_cpu_range_fn fn, void *arg)
{
    if (n == 0)
        return 0;
    if (threads <= 1 || n == 1)
        return fn(arg, 0, n, 0);
    int any = 0;
#ifdef _OPENMP
    if ((size_t)threads > n)
        threads = (int)n;
#pragma omp parallel num_threads(threads) reduction(| : any)
    {
        /* OpenMP may give fewer threads than asked: split by what it gave. */
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t lo = n / nt * t + (t < n % nt ? t : n % nt);
        size_t hi = lo + n / nt + (t < n % nt);
        if (lo < hi)
            any |= fn(arg, lo, hi, (int)t);
    }
#else
    any = fn(arg, 0, n, 0);
#endif
    return any;
}

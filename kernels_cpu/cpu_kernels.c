/* cpu_kernels.c — the per-ISA kernel tables (only ISAs this build has). */
#include <stddef.h>

#include "kve_cpu_kernels.h"

const kve_cpu_kernels *kve_cpu_kernels_get(kve_cpu_isa isa)
{
    switch (isa) {
    case KVE_CPU_ISA_SCALAR: return &kve_cpu_kernels_scalar;
#ifdef KVE_HAVE_AVX2
    case KVE_CPU_ISA_AVX2: return &kve_cpu_kernels_avx2;
#endif
#ifdef KVE_HAVE_AVX512
    case KVE_CPU_ISA_AVX512: return &kve_cpu_kernels_avx512;
#endif
    default: return NULL;
    }
}

const kve_score_kernels *kve_score_kernels_get(kve_cpu_isa isa)
{
    switch (isa) {
#if defined(KVE_HAVE_AVX512) && defined(KVE_HAVE_SCORE_SIMD)
    case KVE_CPU_ISA_AVX512: return &kve_score_kernels_avx512;
#endif
#if defined(KVE_HAVE_AVX2) && defined(KVE_HAVE_SCORE_SIMD)
    case KVE_CPU_ISA_AVX2: return &kve_score_kernels_avx2;
#endif
    default: return &kve_score_kernels_scalar;
    }
}

/* cpu_kernels.c — the per-ISA kernel tables (only ISAs this build has). */
#include <stddef.h>

#include "kve_cpu_kernels.h"

const kve_cpu_kernels *kve_cpu_kernels_get(kve_cpu_isa isa)
{
    switch (isa) {
    case KVE_CPU_ISA_SCALAR: return &kve_cpu_kernels_scalar;
    default: return NULL;
    }
}

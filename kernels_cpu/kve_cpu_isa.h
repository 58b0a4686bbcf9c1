/* kve_cpu_isa.h — CPU feature detection and the ISA choice. */
#ifndef KVE_CPU_ISA_H
#define KVE_CPU_ISA_H

#include "kvevict.h"

/* The best ISA this CPU and OS run (cpuid + xgetbv), detected once. */
kve_cpu_isa kve_cpu_isa_best(void);

/* AUTO -> $KVE_CPU_ISA (bad value: KVE_ERR_ENV) or the best; an explicit
 * ISA this CPU cannot run (or this build lacks) is KVE_ERR_UNAVAILABLE. */
kve_status kve_cpu_isa_resolve(kve_cpu_isa requested, kve_cpu_isa *out);

/* OpenMP's default thread count (1 without OpenMP). */
int kve_cpu_default_threads(void);

#endif

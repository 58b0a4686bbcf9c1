/*
 * kve_cpu_ops.h — the CPU backend's operations that its drivers define
 * (backends/), which backends/cpu.c puts in its kve_backend_ops beside the
 * kernels' ones of kernels_cpu/kve_cpu_kernels.h: the state's wave eviction
 * (backends/cpu.c), its planner (backends/cpu_state.c) and the compaction
 * (backends/cpu_compact.c).
 */
#ifndef KVE_CPU_OPS_H
#define KVE_CPU_OPS_H

#include "kvevict.h"

struct kve_state_evict;
struct kve_state_plan;
kve_status kve_cpu_state_evict(kve_context *ctx, const struct kve_state_evict *e);
kve_status kve_cpu_state_plan(kve_context *ctx, const struct kve_state_plan *p);
kve_status kve_cpu_compact(kve_context *ctx, const kve_compact_desc *d);

#endif

/*
 * hip_backend.hip — the HIP backend, libkvevict_hip.so: the CUDA backend's
 * source (kernels and glue around kernels_cuda/'s bodies) compiled by
 * hipcc for AMD GPUs, with kve_hip_vendor.h mapping the runtime's names.
 * What differs on AMD lives in that header and in the bodies' use of the
 * device's warp width (64 on CDNA).
 */
#define KVE_GPU_HIP 1
#include "../backends/gpu.cu"

/*
 * hip_backend.hip — the HIP backend, libkvevict_hip.so: the CUDA backend's
 * driver (gpu.cu, with kernels_cuda/'s kernels and common/'s bodies)
 * compiled by hipcc for AMD GPUs, with kernels_hip/kve_hip_vendor.h mapping
 * the runtime's names (kernels_hip/CMakeLists.txt builds it).
 * What differs on AMD lives in that header and in the bodies' use of the
 * device's warp width (64 on CDNA).
 */
#define KVE_GPU_HIP 1
#include "gpu.cu"

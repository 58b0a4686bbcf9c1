/*
 * kve_hip_vendor.h — HIP under CUDA's names, so backends/gpu.cu
 * and gpu_bench.cu compile unchanged as HIP (ggml's vendors/hip.h habit).
 * Only the runtime calls kvevict uses are mapped.
 *
 * Warp width: never taken from here. Device code reads warpSize (64 on CDNA
 * gfx90a/gfx942, 32 on RDNA gfx1030/gfx1100 in HIP's default wave32), and
 * the host asks the device (hipDeviceAttributeWarpSize) before launching.
 */
#ifndef KVE_HIP_VENDOR_H
#define KVE_HIP_VENDOR_H

#include <hip/hip_runtime.h>

#define KVE_GPU_KIND KVE_BACKEND_HIP
#define KVE_GPU_NAME "hip"
#define KVE_GPU_VENDOR "HIP"
/* LDS per block: AMD has no opt-in beyond it (64 KiB). */
#define KVE_GPU_SMEM_ATTR hipDeviceAttributeMaxSharedMemoryPerBlock

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaLaunchKernel hipLaunchKernel
#define cudaDeviceAttr hipDeviceAttribute_t
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrWarpSize hipDeviceAttributeWarpSize
#define cudaFuncAttributes hipFuncAttributes
#define cudaFuncGetAttributes hipFuncGetAttributes
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMemcpyKind hipMemcpyKind
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaStream_t hipStream_t
#define cudaStreamCreate hipStreamCreate
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphDestroy hipGraphDestroy
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEventElapsedTime hipEventElapsedTime

#endif

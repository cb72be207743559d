// TG_HOST_DEVICE: marks inline functions compiled for both the CPU and, under nvcc, the GPU. Code that must
// give the same bits on both devices (Philox, ternarize, optimizer updates, losses) is written once with it.
#pragma once

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif

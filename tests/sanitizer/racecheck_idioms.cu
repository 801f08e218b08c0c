// Which synchronisation idiom of the warp-specialised topk kernel makes compute-sanitizer
// racecheck report hazards on accesses that a CTA barrier orders (issue 11, bench/NOTES.md
// "Issue 11's racecheck reports"). Test machinery, not product code: built by nvcc on the
// GPU machine (dev/gpu_suite.sh SANITIZE=idioms, with this file copied into .gpu-kit/), never
// by CMake.
//
// Every variant runs one CTA of 288 threads (8 math warps + 1 producer warp, the kernel's
// shape), does its idiom, then the same probe: barrier; thread 0 writes a slot; barrier;
// every thread reads it. The probe is race-free by the CUDA memory model in every variant,
// so a hazard racecheck reports on it is the tool's, and the variant names the idiom.
//
//   ./racecheck_idioms <variant>    (0..13; prints the slot's value read by thread 256)
//
// Build: nvcc -arch=sm_90a -lineinfo -o racecheck_idioms racecheck_idioms.cu -lcuda
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

namespace {

constexpr int kMath = 256, kThreads = 288, kStages = 2, kTiles = 8, kTileBytes = 1024;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.shared::cta.b64 s, [%0];\n}" ::"r"(smem_addr(b))
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(unsigned long long* b, unsigned bytes) {
  asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.expect_tx.shared::cta.b64 s, [%0], %1;\n}" ::"r"(
                   smem_addr(b)),
               "r"(bytes)
               : "memory");
}
// The kernel's wait: a branch inside the asm.
__device__ __forceinline__ void mbar_wait_asm(unsigned long long* b, unsigned parity) {
  asm volatile(
      "{\n.reg .pred d;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 d, [%0], %1;\n"
      "@!d bra WAIT;\n}" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
// The same spin in C++ around one try_wait.
__device__ __forceinline__ void mbar_wait_cxx(unsigned long long* b, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
  }
}
// A bulk copy global -> shared completing on an mbarrier (the TMA's proxy, no tensor map).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          unsigned long long* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(b))
      : "memory");
}
// A 2-D tensor-map load (the kernel's key tiles), and the tensor map's prefetch.
__device__ __forceinline__ void tma_copy(void* dst, const CUtensorMap* map, int x, int y,
                                         unsigned long long* b) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_addr(b))
      : "memory");
}
__device__ __forceinline__ void tma_prefetch(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// A 4-byte cp.async (the kernel's key scales) and the arrival made when this thread's
// copies land.
__device__ __forceinline__ void copy4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void arrive_after_copies(unsigned long long* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(b))
               : "memory");
}
// The generic-to-async proxy fence the producer issues before the copy engine rewrites a
// region the CTA wrote; a 16-byte cp.async (the sample's gathered tiles) and its wait.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void copy16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void copies_commit_wait() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}
__device__ __forceinline__ void math_barrier() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

// The ring of the kernel: the producer warp's lane 0 fills `kStages` stages by bulk copies
// (full: 1 arrival + bytes), the math warps wait for full, read, and release (empty: one
// arrival per math warp). wait_cxx picks the wait; math_sync adds the math warps' named
// barrier per tile (the kernel's checks every few tiles).
// Tma: the tiles by tensor-map loads (after lane 0's prefetch of the map) and the producer
// lanes' 4-byte scale copies arriving on `full` (33 arrivals then), as the kernel does.
// Gather: the tiles by every producer lane's 16-byte cp.async, each lane waiting for its
// copies, fencing to the async proxy and arriving (full: 32 arrivals then), as the
// kernel's sample tiles; Fence: the producer's proxy fence before its loop. `first`: the
// ring position of this call's first tile (a second call continues the phases).
template <bool WaitCxx, bool MathSync, bool Tma = false, bool Gather = false, bool Fence = false>
__device__ void ring(const char* src, char* stages, unsigned long long* full,
                     unsigned long long* empty, int* sink, const CUtensorMap* map = nullptr,
                     float* scales = nullptr, int first = 0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == kMath / 32) {
    if (Fence) fence_proxy_async();
    for (int t = first; t < first + kTiles; ++t) {
      const int st = t % kStages;
      const unsigned parity = ((t / kStages) & 1) ^ 1u;
      if (WaitCxx) mbar_wait_cxx(empty + st, parity); else mbar_wait_asm(empty + st, parity);
      if (Gather) {
        for (int c = lane; c < kTileBytes / 16; c += 32)
          copy16(stages + st * kTileBytes + 16 * c, src + (t % kTiles) * kTileBytes + 16 * c);
        copies_commit_wait();
        fence_proxy_async();
        mbar_arrive(full + st);
      } else if (Tma) {
        copy4(scales + st * 32 + lane, src + 4 * lane);
        arrive_after_copies(full + st);
        if (lane == 0) {
          mbar_arrive_tx(full + st, kTileBytes);
          tma_copy(stages + st * kTileBytes, map, 0, (t % kTiles) * (kTileBytes / 128), full + st);
        }
      } else if (lane == 0) {
        mbar_arrive_tx(full + st, kTileBytes);
        bulk_copy(stages + st * kTileBytes, src + (t % kTiles) * kTileBytes, kTileBytes, full + st);
      }
    }
  } else {
    int acc = 0;
    for (int t = first; t < first + kTiles; ++t) {
      const int st = t % kStages;
      const unsigned parity = (t / kStages) & 1;
      if (WaitCxx) mbar_wait_cxx(full + st, parity); else mbar_wait_asm(full + st, parity);
      acc += stages[st * kTileBytes + threadIdx.x];
      if (Tma) acc += int(scales[st * 32 + lane]);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + st);
      if (MathSync) math_barrier();
    }
    sink[threadIdx.x] = acc;
  }
}

__global__ void idiom(int variant, const char* src, int* out, int* sink,
                      const __grid_constant__ CUtensorMap map) {
  __shared__ alignas(1024) char stages[kStages * kTileBytes];
  __shared__ float scales[kStages * 32];
  __shared__ unsigned long long full[kStages], empty[kStages];
  __shared__ unsigned slot;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full + i, variant == 8 || variant == 9 || variant == 13 ? 33 : variant == 11 ? 32 : 1);
      mbar_init(empty + i, kMath / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (variant == 9 && threadIdx.x == kMath) tma_prefetch(&map);
  __syncthreads();
  switch (variant) {
    case 0: break;                                       // control: the probe alone
    case 1: if (threadIdx.x < kMath) math_barrier(); break;  // a named barrier of the math warps
    case 2: ring<false, false>(src, stages, full, empty, sink); break;  // the ring, asm wait
    case 3: ring<true, false>(src, stages, full, empty, sink); break;   // the ring, C++ wait
    case 4: ring<false, true>(src, stages, full, empty, sink); break;   // + math named barrier
    case 5:                                              // producer lane 0 diverges alone
      if (threadIdx.x == kMath) {
        for (int i = 0; i < 64; ++i) sink[kThreads + i] = i;
      }
      break;
    case 6:                                              // mbarrier waits without copies
      if (threadIdx.x >= kMath) {
        mbar_wait_asm(empty, 0);                         // completed by the math warps
      } else if (threadIdx.x % 32 == 0) {
        mbar_arrive(empty);
      }
      break;
    case 7: ring<true, true>(src, stages, full, empty, sink); break;    // C++ wait + named
    case 8:                                              // tensor-map loads + scale copies
    case 9:                                              // the same after the map's prefetch
      ring<false, true, true>(src, stages, full, empty, sink, &map, scales);
      break;
    case 10: ring<false, true, false, false, true>(src, stages, full, empty, sink); break;  // + fence
    case 11: ring<false, true, false, true, true>(src, stages, full, empty, sink); break;   // gathered
    case 12:                                             // two work items: ring, probe, ring
    case 13:                                             // the same, tensor-map loads
      if (variant == 12) {
        ring<false, true, false, false, true>(src, stages, full, empty, sink);
      } else {
        ring<false, true, true>(src, stages, full, empty, sink, &map, scales);
      }
      __syncthreads();
      if (threadIdx.x == 0) slot = 1u;
      __syncthreads();
      sink[kThreads + threadIdx.x % 64] = int(slot);
      if (variant == 12) {
        ring<false, true, false, false, true>(src, stages, full, empty, sink, nullptr, nullptr, kTiles);
      } else {
        ring<false, true, true>(src, stages, full, empty, sink, &map, scales, kTiles);
      }
      break;
    default: break;
  }
  // The probe: ordered by the two barriers whatever came before.
  __syncthreads();
  if (threadIdx.x == 0) slot = 40u + unsigned(variant);
  __syncthreads();
  out[threadIdx.x] = int(slot);
}

}  // namespace

int main(int argc, char** argv) {
  const int variant = argc > 1 ? std::atoi(argv[1]) : 0;
  if (variant < 0 || variant > 13) {
    std::fprintf(stderr, "variant: 0..13\n");
    return 2;
  }
  char* src;
  int *out, *sink;
  if (cudaMalloc(&src, kTiles * kTileBytes) || cudaMalloc(&out, kThreads * sizeof(int)) ||
      cudaMalloc(&sink, (kThreads + 64) * sizeof(int))) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(src, 1, kTiles * kTileBytes);
  // src as a [kTiles * 8, 128] byte matrix, boxes of {128, 8} (one tile).
  CUtensorMap map{};
  const cuuint64_t dims[2] = {128, cuuint64_t(kTiles * kTileBytes / 128)};
  const cuuint64_t strides[1] = {128};
  const cuuint32_t box[2] = {128, kTileBytes / 128}, elem[2] = {1, 1};
  if (cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, src, dims, strides, box, elem,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                             CU_TENSOR_MAP_L2_PROMOTION_NONE,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    return 1;
  }
  idiom<<<1, kThreads>>>(variant, src, out, sink, map);
  const cudaError_t e = cudaDeviceSynchronize();
  int host[kThreads];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < kThreads; ++i) wrong += host[i] != 40 + variant;
  std::printf("variant %d: %s, thread 256 read %d, %d threads read a wrong value\n", variant,
              cudaGetErrorString(e), host[256], wrong);
  return e != cudaSuccess || wrong != 0;
}

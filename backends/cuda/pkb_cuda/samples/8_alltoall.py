"""All-to-all in CUDA: rank r copies slot r of every peer's (W, M, N) input.

Output slot s on rank r is x_s[r], read directly from rank s's memory over
NVLink. The copy works on bytes (any dtype; the element size only matters
for the tail): 16-byte vectors when every address and the slot size allow it,
element-sized words otherwise. Each rank starts with a different peer so the
links are busy at once. Pairwise CAS barriers per block before (inputs in
place) and after (nobody returns while a peer still reads its input).

Built as 1_allreduce.py is: a torch-free CUDA source (the kernel, and a
launcher on raw pointers that picks the grid) and the torch side in
CPP_SOURCE.
"""
import pkb_cuda

CUDA_SOURCE = r"""
#include <algorithm>

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte vectors per thread in flight

// out[slot j] <- `chunk` bytes of rank j's tensor at `offset` (its slot for this rank), j = 0 .. world-1.
template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
alltoall_kernel(const uint64_t* __restrict__ buffers, uint32_t* const* pads, int64_t offset,
               char* __restrict__ out, int64_t chunk, int rank, int world, bool vec) {
  pkb::barrier_block(pads, rank, world, blockIdx.x);

  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = vec ? chunk / 16 : 0;
  for (int64_t base = tid; base < nvec; base += threads * kUnroll) {
    for (int jj = 0; jj < world; ++jj) {
      const int j = (rank + jj) % world;  // stagger: ranks start on different peers
      const uint4* src = pkb::peer_ptr<const uint4>(buffers, j, offset);
      uint4* dst = reinterpret_cast<uint4*>(out + j * chunk);
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + u * threads;
        if (i < nvec) v[u] = src[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + u * threads;
        if (i < nvec) dst[i] = v[u];
      }
    }
  }
  // Tail (or everything when the addresses are not 16-byte aligned), in elements.
  const int64_t elems = chunk / static_cast<int64_t>(sizeof(E));
  for (int64_t i = nvec * (16 / sizeof(E)) + tid; i < elems; i += threads) {
    for (int j = 0; j < world; ++j) {
      reinterpret_cast<E*>(out + j * chunk)[i] = pkb::peer_ptr<const E>(buffers, j, offset)[i];
    }
  }

  pkb::barrier_block(pads, rank, world, blockIdx.x);
}

int sm_count() {  // 0 when the device cannot be asked
  static const int count = [] {
    int device = 0, value = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 0;
    return value;
  }();
  return count;
}

}  // namespace

cudaError_t alltoall_launch(int64_t element_size, void* out, int64_t chunk, int64_t buffers, int64_t pads,
                            int64_t slot_offset, int64_t rank, int64_t world, int64_t max_blocks, bool vec,
                            cudaStream_t stream) {
  const int sms = sm_count();
  if (sms == 0) return cudaErrorInvalidDevice;
  // Same grid on every rank (it pairs the barrier's blocks): from shared values only.
  const int64_t per_block = int64_t(kThreads) * kUnroll * 16;
  const int64_t cap = std::min<int64_t>(2 * sms, max_blocks);
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((chunk * world + per_block - 1) / per_block, cap)));
  auto table = reinterpret_cast<const uint64_t*>(buffers);
  auto pad_table = reinterpret_cast<uint32_t* const*>(pads);
  char* dst = static_cast<char*>(out);
  const int r = static_cast<int>(rank), w = static_cast<int>(world);
  switch (element_size) {
    case 1: alltoall_kernel<uint8_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, dst, chunk, r, w, vec); break;
    case 2: alltoall_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, dst, chunk, r, w, vec); break;
    case 4: alltoall_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, dst, chunk, r, w, vec); break;
    case 8: alltoall_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, dst, chunk, r, w, vec); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
"""

CPP_SOURCE = """
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t alltoall_launch(int64_t element_size, void* out, int64_t chunk, int64_t buffers, int64_t pads,
                            int64_t slot_offset, int64_t rank, int64_t world, int64_t max_blocks, bool vec,
                            cudaStream_t stream);

at::Tensor alltoall(at::Tensor x, int64_t buffers, int64_t pads, int64_t offset, int64_t rank,
                       int64_t world, int64_t max_blocks, int64_t align) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "alltoall: expected a contiguous CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(0) == world, "alltoall: expected a (W, ...) tensor with W = ", world);
  TORCH_CHECK(max_blocks >= 1, "alltoall: the signal pad has no room for ", world, " ranks");
  c10::cuda::CUDAGuard guard(x.device());
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t chunk = x.numel() / world * x.element_size();  // one slot
  if (chunk == 0) return out;
  const int64_t size = x.element_size();
  TORCH_CHECK(size == 1 || size == 2 || size == 4 || size == 8, "alltoall: unsupported element size ", size);
  const bool vec = align >= 16 && chunk % 16 == 0 && reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
  const int64_t slot_offset = offset + rank * chunk;  // every peer's slot for this rank
  C10_CUDA_CHECK(alltoall_launch(size, out.data_ptr(), chunk, buffers, pads, slot_offset, rank, world, max_blocks,
                                 vec, c10::cuda::getCurrentCUDAStream()));
  return out;
}
"""

_ext = pkb_cuda.compile("alltoall", CUDA_SOURCE, CPP_SOURCE, functions=["alltoall"], bind="ops")


def solution(tensor):
    return _ext.alltoall(tensor, *pkb_cuda.peers(tensor))

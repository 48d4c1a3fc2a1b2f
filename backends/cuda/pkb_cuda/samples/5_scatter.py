"""Scatter in CUDA: rank r copies slot r of ``src``'s (W, M, N) tensor.

On src the input is (W, M, N); on the other ranks it is an (M, N) placeholder
whose shape gives the block size. Every rank reads its slot straight from
src's memory over NVLink (16-byte vectors when the slot's address allows,
element-sized words otherwise) between two pairwise CAS barriers: the first
makes sure src's input is in place, the second keeps src from returning
while peers still read it. The grid depends only on the block size, which
every rank shares, so the barrier's blocks pair up.

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

// out <- `bytes` bytes of rank `src`'s tensor (at `offset` in its buffer).
template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
copy_from_kernel(const uint64_t* __restrict__ buffers, uint32_t* const* pads, int64_t offset, int src,
                 char* __restrict__ out, int64_t bytes, int rank, int world, bool vec) {
  pkb::barrier_block(pads, rank, world, blockIdx.x);

  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = vec ? bytes / 16 : 0;
  const uint4* from = pkb::peer_ptr<const uint4>(buffers, src, offset);
  uint4* to = reinterpret_cast<uint4*>(out);
  for (int64_t base = tid; base < nvec; base += threads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * threads;
      if (i < nvec) v[u] = from[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * threads;
      if (i < nvec) to[i] = v[u];
    }
  }
  const int64_t elems = bytes / static_cast<int64_t>(sizeof(E));
  const E* from_e = pkb::peer_ptr<const E>(buffers, src, offset);
  for (int64_t i = nvec * (16 / sizeof(E)) + tid; i < elems; i += threads) {
    reinterpret_cast<E*>(out)[i] = from_e[i];
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

cudaError_t scatter_launch(int64_t element_size, void* out, int64_t bytes, int64_t src, int64_t buffers,
                           int64_t pads, int64_t slot_offset, int64_t rank, int64_t world, int64_t max_blocks,
                           bool vec, cudaStream_t stream) {
  const int sms = sm_count();
  if (sms == 0) return cudaErrorInvalidDevice;
  const int64_t per_block = int64_t(kThreads) * kUnroll * 16;
  const int64_t cap = std::min<int64_t>(2 * sms, max_blocks);
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((bytes + per_block - 1) / per_block, cap)));
  auto table = reinterpret_cast<const uint64_t*>(buffers);
  auto pad_table = reinterpret_cast<uint32_t* const*>(pads);
  char* dst = static_cast<char*>(out);
  const int s = static_cast<int>(src), r = static_cast<int>(rank), w = static_cast<int>(world);
  switch (element_size) {
    case 1: copy_from_kernel<uint8_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, s, dst, bytes, r, w, vec); break;
    case 2: copy_from_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, s, dst, bytes, r, w, vec); break;
    case 4: copy_from_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, s, dst, bytes, r, w, vec); break;
    case 8: copy_from_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, slot_offset, s, dst, bytes, r, w, vec); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
"""

CPP_SOURCE = """
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t scatter_launch(int64_t element_size, void* out, int64_t bytes, int64_t src, int64_t buffers,
                           int64_t pads, int64_t slot_offset, int64_t rank, int64_t world, int64_t max_blocks,
                           bool vec, cudaStream_t stream);

at::Tensor scatter(at::Tensor x, int64_t src, int64_t buffers, int64_t pads, int64_t offset, int64_t rank,
                      int64_t world, int64_t max_blocks, int64_t align) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "scatter: expected a contiguous CUDA tensor");
  TORCH_CHECK(0 <= src && src < world, "scatter: src ", src, " is not a rank of ", world);
  TORCH_CHECK(max_blocks >= 1, "scatter: the signal pad has no room for ", world, " ranks");
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> shape = x.sizes().vec();
  if (rank == src) {
    TORCH_CHECK(x.dim() >= 1 && x.size(0) == world, "scatter: src's tensor must be (W, ...) with W = ", world);
    shape.erase(shape.begin());
  }
  auto out = at::empty(shape, x.options());
  const int64_t bytes = out.numel() * out.element_size();  // one slot; the same on every rank
  if (bytes == 0) return out;
  const int64_t size = x.element_size();
  TORCH_CHECK(size == 1 || size == 2 || size == 4 || size == 8, "scatter: unsupported element size ", size);
  const int64_t slot_offset = offset + rank * bytes;  // slot `rank` of src's tensor
  const bool vec = align >= 16 && (rank * bytes) % 16 == 0 && reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
  C10_CUDA_CHECK(scatter_launch(size, out.data_ptr(), bytes, src, buffers, pads, slot_offset, rank, world, max_blocks,
                                vec, c10::cuda::getCurrentCUDAStream()));
  return out;
}
"""

_ext = pkb_cuda.compile("scatter", CUDA_SOURCE, CPP_SOURCE, functions=["scatter"], bind="ops")


def solution(tensor, src=0):
    return _ext.scatter(tensor, int(src), *pkb_cuda.peers(tensor))

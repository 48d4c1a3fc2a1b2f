"""All-gather in CUDA: a one-way push for small floating-point messages, a pull for the rest.

**Small messages** (floating point, up to ``PUSH_MAX_BYTES`` a rank, 16-byte aligned): each rank
writes its input straight into every peer's slot for it in a symmetric scratch
(:func:`pkb_cuda.push_scratch`), and copies each peer's slot into its output as it lands; the
data is its own flag (``pkb_push.cuh``): one one-way trip across NVLink, no barrier. A peer's
-0.0 arrives as +0.0 (the protocol's sentinel is negative zero), equal to it in every
comparison; this rank's own block is its input, bit for bit.

**The rest**: output slot s of shape (M, N) is rank s's input, read directly from rank s's
memory over NVLink. The copy works on bytes, so one kernel serves every dtype
(dispatch on the element size only for the tail): 16-byte vectors when every
address and the block size allow it, element-sized words otherwise. A pairwise
CAS barrier per block comes before (peers' inputs are in place) and after
(nobody returns while a peer still reads its input). Each rank starts with a
different peer, so the links are busy at once.

Built as 1_allreduce.py is: a torch-free CUDA source (the kernel, and a
launcher on raw pointers that picks the grid) and the torch side in
CPP_SOURCE.
"""
import pkb_cuda

CUDA_SOURCE = pkb_cuda.PUSH_CUH + r"""
#include <algorithm>

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte vectors per thread in flight

// out[slot j] <- rank j's tensor, for j = 0 .. world-1; `chunk` bytes each.
template <typename E>
__global__ void __launch_bounds__(kThreads, 2)
allgather_kernel(const uint64_t* __restrict__ buffers, uint32_t* const* pads, int64_t offset,
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

// The push path (pkb_push.cuh), on elements of E's size: this rank's input to every peer's slot
// for it, then each peer's slot into the output as it lands (this rank's block from its input).
template <typename E>
__global__ void __launch_bounds__(kThreads)
push_allgather_kernel(const uint4* __restrict__ in, pkb::PushScratch scratch, uint4* __restrict__ out, int64_t nvec) {
  const int epoch = scratch.epoch();
  const int rank = scratch.rank, world = scratch.world;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < nvec; i += threads) {
    const uint4 v = in[i];
    const uint4 clean = pkb::push_clean<E>(v);
    for (int jj = 1; jj < world; ++jj) scratch.slot((rank + jj) % world, epoch, rank)[i] = clean;
    out[rank * nvec + i] = v;
  }
  for (int64_t i = tid; i < nvec; i += threads)
    for (int jj = 1; jj < world; ++jj) {
      const int j = (rank + jj) % world;
      out[j * nvec + i] = pkb::push_receive<E>(scratch.slot(rank, epoch, j) + i);
    }
  scratch.reset_last<E>(epoch, tid, threads);
  scratch.finish(epoch, nvec);
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

cudaError_t allgather_launch(int64_t element_size, void* out, int64_t chunk, int64_t buffers, int64_t pads,
                             int64_t offset, int64_t rank, int64_t world, int64_t max_blocks, int64_t align,
                             cudaStream_t stream) {
  const int sms = sm_count();
  if (sms == 0) return cudaErrorInvalidDevice;
  // Same grid on every rank (it pairs the barrier's blocks): from shared values only.
  const int64_t per_block = int64_t(kThreads) * kUnroll * 16;
  const int64_t cap = std::min<int64_t>(2 * sms, max_blocks);
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((chunk * world + per_block - 1) / per_block, cap)));
  const bool vec = align >= 16 && chunk % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  auto table = reinterpret_cast<const uint64_t*>(buffers);
  auto pad_table = reinterpret_cast<uint32_t* const*>(pads);
  char* dst = static_cast<char*>(out);
  const int r = static_cast<int>(rank), w = static_cast<int>(world);
  switch (element_size) {
    case 1: allgather_kernel<uint8_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, offset, dst, chunk, r, w, vec); break;
    case 2: allgather_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, offset, dst, chunk, r, w, vec); break;
    case 4: allgather_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, offset, dst, chunk, r, w, vec); break;
    case 8: allgather_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(table, pad_table, offset, dst, chunk, r, w, vec); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t allgather_push_launch(int64_t element_size, const void* in, void* out, int64_t chunk, int64_t table,
                                  int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank, int64_t world,
                                  cudaStream_t stream) {
  const int sms = sm_count();
  if (sms == 0) return cudaErrorInvalidDevice;
  const auto scratch = pkb::PushScratch::from_fields(table, offset, slot_bytes, counters, rank, world);
  const int64_t nvec = chunk / 16;
  const int blocks = pkb::push_blocks(nvec, kThreads, sms);
  auto src = static_cast<const uint4*>(in);
  auto dst = static_cast<uint4*>(out);
  switch (element_size) {
    case 2: push_allgather_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
    case 4: push_allgather_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
    case 8: push_allgather_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
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

cudaError_t allgather_launch(int64_t element_size, void* out, int64_t chunk, int64_t buffers, int64_t pads,
                             int64_t offset, int64_t rank, int64_t world, int64_t max_blocks, int64_t align,
                             cudaStream_t stream);
cudaError_t allgather_push_launch(int64_t element_size, const void* in, void* out, int64_t chunk, int64_t table,
                                  int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank, int64_t world,
                                  cudaStream_t stream);

at::Tensor allgather(at::Tensor x, int64_t buffers, int64_t pads, int64_t offset, int64_t rank,
                        int64_t world, int64_t max_blocks, int64_t align) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "allgather: expected a contiguous CUDA tensor");
  TORCH_CHECK(max_blocks >= 1, "allgather: the signal pad has no room for ", world, " ranks");
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> shape{world};
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  auto out = at::empty(shape, x.options());
  const int64_t chunk = x.numel() * x.element_size();
  if (chunk == 0) return out;
  const int64_t size = x.element_size();
  TORCH_CHECK(size == 1 || size == 2 || size == 4 || size == 8, "allgather: unsupported element size ", size);
  C10_CUDA_CHECK(allgather_launch(size, out.data_ptr(), chunk, buffers, pads, offset, rank, world, max_blocks, align,
                                  c10::cuda::getCurrentCUDAStream()));
  return out;
}

// The push path (pkb_push.cuh): a floating-point x whose bytes are a multiple of 16 and at most a
// slot, 16-byte aligned; the arguments after x are pkb_cuda.push_scratch(x, slot_bytes)'s fields.
at::Tensor allgather_push(at::Tensor x, int64_t table, int64_t offset, int64_t slot_bytes, int64_t counters,
                          int64_t rank, int64_t world) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.is_floating_point(),
              "allgather_push: expected a contiguous floating-point CUDA tensor");
  const int64_t chunk = x.numel() * x.element_size();
  TORCH_CHECK(chunk % 16 == 0 && chunk <= slot_bytes, "allgather_push: ", chunk, " bytes do not fit a slot");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "allgather_push: input not 16-byte aligned");
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> shape{world};
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  auto out = at::empty(shape, x.options());
  if (chunk == 0) return out;
  C10_CUDA_CHECK(allgather_push_launch(x.element_size(), x.data_ptr(), out.data_ptr(), chunk, table, offset,
                                       slot_bytes, counters, rank, world, c10::cuda::getCurrentCUDAStream()));
  return out;
}
"""

_ext = pkb_cuda.compile("allgather", CUDA_SOURCE, CPP_SOURCE, functions=["allgather", "allgather_push"], bind="ops")


#: The largest input the push path takes (its scratch holds 3 epochs x W slots of this size).
PUSH_MAX_BYTES = 1024 * 1024


def solution(tensor):
    peers = pkb_cuda.peers(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    pushable = tensor.is_floating_point() and tensor.element_size() in (2, 4, 8)
    if pushable and nbytes % 16 == 0 and 0 < nbytes <= PUSH_MAX_BYTES and peers.align >= 16:
        return _ext.allgather_push(tensor, *pkb_cuda.push_scratch(tensor, PUSH_MAX_BYTES, tag="allgather"))
    return _ext.allgather(tensor, *peers)

"""All-to-all in CUDA: slot p of rank r's (W, ...) input goes to slot r of rank p's output.

Floating-point slots up to 1 MiB are pushed one way (``pkb_push.cuh``, the data its own flag):
rank r writes its slot p straight into rank p's push slot for r, keeps its own slot r, and copies
each peer's push slot into its output as it lands: one one-way trip, no barrier. Every rank
receives from every rank in every call, which is what the protocol's three epochs need. A peer's
-0.0 arrives as +0.0 (the protocol's sentinel is negative zero), equal to it in every comparison.

Larger slots, and integers, are pulled: output slot s on rank r is x_s[r], read directly from rank
s's memory over NVLink. The copy works on bytes (any dtype; the element size only matters for the
tail): 16-byte vectors when every address and the slot size allow it, element-sized words
otherwise. Each rank starts with a different peer so the links are busy at once. Pairwise CAS
barriers per block before (inputs in place) and after (nobody returns while a peer still reads its
input).

Built as 1_allreduce.py is: a torch-free CUDA source (the kernels, and launchers on raw pointers
that pick the grid) and the torch side in CPP_SOURCE. Every rank takes the same path, decided on
what all ranks share.
"""
import pkb_cuda

CUDA_SOURCE = pkb_cuda.PUSH_CUH + r"""
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

// nvec: 16-byte vectors of one slot; E: an unsigned type of the element's size.
template <typename E>
__global__ void __launch_bounds__(kThreads)
push_alltoall_kernel(const uint4* __restrict__ in, pkb::PushScratch scratch, uint4* __restrict__ out, int64_t nvec) {
  const int epoch = scratch.epoch();
  const int rank = scratch.rank, world = scratch.world;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < nvec; i += threads) {
    for (int jj = 1; jj < world; ++jj) {
      const int p = (rank + jj) % world;  // stagger: ranks start on different peers
      scratch.slot(p, epoch, rank)[i] = pkb::push_clean<E>(in[p * nvec + i]);
    }
    out[rank * nvec + i] = in[rank * nvec + i];
  }
  for (int64_t i = tid; i < nvec; i += threads)
    for (int jj = 1; jj < world; ++jj) {
      const int p = (rank + jj) % world;
      out[p * nvec + i] = pkb::push_receive<E>(scratch.slot(rank, epoch, p) + i);
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

cudaError_t alltoall_push_launch(int64_t element_size, const void* in, void* out, int64_t chunk, int64_t table,
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
    case 2: push_alltoall_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
    case 4: push_alltoall_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
    case 8: push_alltoall_kernel<uint64_t><<<blocks, kThreads, 0, stream>>>(src, scratch, dst, nvec); break;
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

cudaError_t alltoall_push_launch(int64_t element_size, const void* in, void* out, int64_t chunk, int64_t table,
                                 int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank, int64_t world,
                                 cudaStream_t stream);

// A floating-point (W, ...) x whose slots' bytes are a multiple of 16 and at most a push slot,
// 16-byte aligned; the arguments after x are pkb_cuda.push_scratch(x, slot_bytes)'s fields.
at::Tensor alltoall_push(at::Tensor x, int64_t table, int64_t offset, int64_t slot_bytes, int64_t counters,
                         int64_t rank, int64_t world) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.is_floating_point(),
              "alltoall_push: expected a contiguous floating-point CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(0) == world, "alltoall_push: expected a (W, ...) tensor with W = ", world);
  const int64_t chunk = x.numel() / world * x.element_size();  // one slot
  TORCH_CHECK(chunk % 16 == 0 && chunk <= slot_bytes, "alltoall_push: ", chunk, " bytes do not fit a slot");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "alltoall_push: input not 16-byte aligned");
  c10::cuda::CUDAGuard guard(x.device());
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (chunk == 0) return out;
  C10_CUDA_CHECK(alltoall_push_launch(x.element_size(), x.data_ptr(), out.data_ptr(), chunk, table, offset,
                                      slot_bytes, counters, rank, world, c10::cuda::getCurrentCUDAStream()));
  return out;
}
"""

_ext = pkb_cuda.compile("alltoall", CUDA_SOURCE, CPP_SOURCE, functions=["alltoall", "alltoall_push"], bind="ops")

#: The largest slot the push path takes (the scratch holds 3 epochs x W slots of this size).
PUSH_MAX_BYTES = 1024 * 1024


def solution(tensor):
    # Every rank must take the same path (a pushing rank waits for its peers' pushes): decide on
    # what all ranks share (the shape, and the alignment of every rank's copy).
    peers = pkb_cuda.peers(tensor)
    chunk = tensor.numel() // peers.world_size * tensor.element_size()
    pushable = (tensor.is_floating_point() and tensor.element_size() in (2, 4, 8)
                and tensor.shape[0] == peers.world_size)
    if pushable and chunk % 16 == 0 and 0 < chunk <= PUSH_MAX_BYTES and peers.align >= 16:
        return _ext.alltoall_push(tensor, *pkb_cuda.push_scratch(tensor, PUSH_MAX_BYTES, tag="alltoall"))
    return _ext.alltoall(tensor, *peers)

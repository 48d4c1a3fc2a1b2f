"""All-to-all in CUDA, pushed one way for floating-point slots up to 1 MiB (above that, the sample's pull).

A candidate for the cuda backend's all-to-all sample (issue 56), not yet run on a GPU (it compiles:
``python3 backends/cuda/tools/compile_check.py benchmarks/push/8_alltoall_push.py``); on two GPUs,
``pkb bench --backend cuda --solutions benchmarks/push --problem 8 --sizes 4K,256K,1M`` beside the
sample, which pulls (a barrier, loads across NVLink, a barrier) and read 0.82x NCCL's calls at
4 KiB on 2xH200 (docs/benchmarks/2026-11-30-h200x2-push-samples.md).

Rank r's input is (W, ...): slot p goes to rank p, which puts it at its output's slot r. Here rank
r writes its slot p straight into rank p's push slot for r (``pkb_push.cuh``, the data its own
flag), keeps its own slot r, and copies each peer's push slot into its output as it lands: one
one-way trip, no barrier. Every rank receives from every rank in every call, which is what the
protocol's three epochs need. A peer's -0.0 arrives as +0.0 (the protocol's sentinel is negative
zero), equal to it in every comparison.
"""
import functools
import runpy

import pkb_cuda

CUDA_SOURCE = pkb_cuda.PUSH_CUH + r"""
#include <algorithm>

namespace {

constexpr int kThreads = 512;

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

}  // namespace

cudaError_t alltoall_push_launch(int64_t element_size, const void* in, void* out, int64_t chunk, int64_t table,
                                 int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank, int64_t world,
                                 cudaStream_t stream) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return cudaErrorInvalidDevice;
  const pkb::PushScratch scratch{reinterpret_cast<const uint64_t*>(table), offset, slot_bytes,
                                 reinterpret_cast<uint32_t*>(counters), static_cast<int>(rank), static_cast<int>(world)};
  const int64_t nvec = chunk / 16;
  // Every block resident at once (a waiting block must not keep a peer's sender from running).
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((nvec + kThreads - 1) / kThreads, sms)));
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

_ext = pkb_cuda.compile("alltoall_push", CUDA_SOURCE, CPP_SOURCE, functions=["alltoall_push"], bind="ops")

#: The largest slot the push path takes (the scratch holds 3 epochs x W slots of this size).
PUSH_MAX_BYTES = 1024 * 1024


@functools.cache
def _pull():
    """The cuda sample's pull, for what the push does not take."""
    from pkb_cuda.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "8_alltoall.py"))["solution"]


def solution(tensor):
    # Every rank must take the same path (a pushing rank waits for its peers' pushes): decide on
    # what all ranks share (the shape, and the alignment of every rank's copy).
    peers = pkb_cuda.peers(tensor)
    chunk = tensor.numel() // peers.world_size * tensor.element_size()
    pushable = (tensor.is_floating_point() and tensor.element_size() in (2, 4, 8)
                and tensor.shape[0] == peers.world_size)
    if pushable and chunk % 16 == 0 and 0 < chunk <= PUSH_MAX_BYTES and peers.align >= 16:
        return _ext.alltoall_push(tensor, *pkb_cuda.push_scratch(tensor, PUSH_MAX_BYTES, tag="alltoall"))
    return _pull()(tensor)

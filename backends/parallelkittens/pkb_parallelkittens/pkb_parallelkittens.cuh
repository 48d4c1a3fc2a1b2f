// pkb_parallelkittens helpers for ThunderKittens solutions (namespace pkb::pk).
//
// pkb_parallelkittens.compile() puts this header after the CUDA backend's
// pkb_cuda.cuh (pkb::barrier_block, pkb::peer_ptr, the system-scope CAS
// helpers) and in front of every source. It includes ThunderKittens
// ("kittens.cuh", from $THUNDERKITTENS_ROOT/include, compiled with
// -DKITTENS_HOPPER for sm_90a) and torch's types.
//
// What it gives:
//   pkb::pk::kWorld            the world size, fixed at compile time
//                              (pkb_parallelkittens.compile defines PKB_WORLD_SIZE).
//   pkb::pk::pgl<GL>           kittens::pgl<GL, kWorld, false>: one global layout
//                              per rank, *no multicast object*.
//   pkb::pk::make_pgl<PGL>(ptrs, b, d, r, c)
//                              host: that pgl over a symmetric tensor, from the CPU
//                              int64 tensor of per-rank addresses that
//                              pkb_parallelkittens.pgl_args(t).ptrs holds.
//   pkb::pk::barrier(pads, rank, slot)
//                              device, whole block: the CUDA backend's pairwise CAS
//                              barrier (pkb::barrier_block) on the signal pads, then
//                              a proxy fence so TMA (async proxy) accesses issued
//                              after it are ordered after the peers' arrivals.
//
// Multicast is off on pkb's GPU machine: never use kittens::barrier_t,
// barrier_all / signal_all, multicast pgls, PGL-level TMA stores or
// store_add_async, TKParallelTensor, or anything that creates a multicast
// object. Per-peer loads, stores and TMA on pg[peer] work without it.
#ifndef PKB_PARALLELKITTENS_CUH_
#define PKB_PARALLELKITTENS_CUH_

#include "kittens.cuh"

#ifndef PKB_WORLD_SIZE
#error "PKB_WORLD_SIZE is not defined: build through pkb_parallelkittens.compile()"
#endif

namespace pkb {
namespace pk {

constexpr int kWorld = PKB_WORLD_SIZE;
static_assert(kWorld >= 1 && kWorld <= 72, "PKB_WORLD_SIZE out of range");

// A parallel global layout without multicast: gls[p] is rank p's copy.
template <typename GL>
using pgl = kittens::pgl<GL, kWorld, false>;

// Host: a unicast pgl over one symmetric tensor. `ptrs` is a CPU int64 tensor
// of kWorld addresses (rank p's copy as this process reaches it), batch /
// depth / rows / cols are the global layout's dimensions (a dimension fixed
// in GL must match). TMA descriptors are built here, one per rank, for the
// tile types GL names: the addresses must be 16-byte aligned and every row
// (cols * sizeof(T)) a multiple of 16 bytes.
template <typename PGL>
PGL make_pgl(const torch::Tensor& ptrs, int batch, int depth, int rows, int cols) {
  static_assert(!PGL::multicast, "pkb: multicast pgls are not allowed (use pkb::pk::pgl<GL>)");
  static_assert(PGL::num_devices == kWorld, "pkb: the pgl's device count must be pkb::pk::kWorld");
  TORCH_CHECK(ptrs.device().is_cpu() && ptrs.scalar_type() == at::kLong && ptrs.numel() == kWorld &&
                  ptrs.is_contiguous(),
              "pkb::pk::make_pgl: expected the CPU int64 address table of pkb_parallelkittens.pgl_args (", kWorld,
              " entries)");
  const int64_t* addresses = ptrs.data_ptr<int64_t>();
  for (int p = 0; p < kWorld; ++p) {
    TORCH_CHECK(addresses[p] % 16 == 0, "pkb::pk::make_pgl: rank ", p, "'s address is not 16-byte aligned");
  }
  return kittens::make_pgl<PGL>(reinterpret_cast<uint64_t*>(const_cast<int64_t*>(addresses)), batch, depth,
                                rows, cols);
}

// Device: barrier among block `slot` of every rank (call from every thread of
// the block; the grid must be the same on every rank and fit the pad:
// slot < pkb_parallelkittens.pgl_args(t).max_blocks).
__device__ __forceinline__ void barrier(uint32_t* const* pads, int rank, int slot) {
  pkb::barrier_block(pads, rank, kWorld, slot);
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Device: make this thread's generic-proxy writes to shared memory visible to
// a TMA store issued after the next block-level sync.
__device__ __forceinline__ void fence_shared_for_tma() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace pk
}  // namespace pkb

#endif  // PKB_PARALLELKITTENS_CUH_

// pkb_cuda device helpers: peer pointers and the pairwise compare-and-swap
// barrier on symmetric signal pads (pkb gpu-notes section 3.2).
//
// pkb_cuda.compile() puts this header in front of every CUDA source (the
// Python string pkb_cuda.BARRIER_CUH holds the same text).
//
// Signal pads: rank r owns a pad of 32-bit slots that every rank can reach.
// Slot `slot * world + src` of r's pad means "src arrived at sync point
// `slot`". A barrier first *arrives* (for every peer p, self included: CAS
// pad_p[slot * world + rank] from 0 to 1, release, system scope; retried
// while the previous signal there is not consumed yet), then *waits* (for
// every p: CAS pad_rank[slot * world + p] from 1 back to 0, acquire, system
// scope). Every slot returns to 0, so the barrier is reusable without a reset
// and safe to replay. Nothing here uses multicast.
#ifndef PKB_CUDA_CUH_
#define PKB_CUDA_CUH_

#include <cstdint>
#include <cuda_runtime.h>

namespace pkb {

// Compare-and-swap on a 32-bit word, release semantics, system scope: writes
// made before it (by this thread, or by the block after a __syncthreads) are
// visible to a peer GPU that observes the new value.
__device__ __forceinline__ uint32_t cas_release_sys(uint32_t* addr, uint32_t expected, uint32_t desired) {
  uint32_t old;
  asm volatile("atom.release.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old) : "l"(addr), "r"(expected), "r"(desired) : "memory");
  return old;
}

// Compare-and-swap, acquire semantics, system scope: reads made after it see
// everything the peer wrote before its releasing CAS.
__device__ __forceinline__ uint32_t cas_acquire_sys(uint32_t* addr, uint32_t expected, uint32_t desired) {
  uint32_t old;
  asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old) : "l"(addr), "r"(expected), "r"(desired) : "memory");
  return old;
}

// Tell `peer` that `rank` arrived at sync point `slot` (one thread).
__device__ __forceinline__ void signal_arrive(uint32_t* const* pads, int peer, int rank, int world, int slot) {
  uint32_t* word = pads[peer] + static_cast<int64_t>(slot) * world + rank;
  while (cas_release_sys(word, 0u, 1u) != 0u) {
  }
}

// Wait until `peer` arrived at sync point `slot`, and consume its signal (one thread).
__device__ __forceinline__ void signal_wait(uint32_t* const* pads, int peer, int rank, int world, int slot) {
  uint32_t* word = pads[rank] + static_cast<int64_t>(slot) * world + peer;
  while (cas_acquire_sys(word, 1u, 0u) != 1u) {
  }
}

// Barrier among the blocks that use the same `slot` on every rank (normally
// slot = blockIdx.x with the same grid on every rank). One thread per peer
// signals and waits; __syncthreads() on both sides orders the whole block's
// memory accesses. Call it from every thread of the block.
//
// At the start of a kernel it means: every peer's kernel is running, so the
// inputs its stream wrote before the launch are ready. At the end: every
// peer's block `slot` has finished reading; once every block of this kernel
// has passed it, no peer reads this rank's memory any more.
//
// Needs slot * world + world <= the pad's 32-bit slots (signal_pad_size / 4)
// and a grid that is co-resident (a waiting block must not keep its partner
// from being scheduled): see pkb_cuda.peers(...).max_blocks.
__device__ __forceinline__ void barrier_block(uint32_t* const* pads, int rank, int world, int slot) {
  __syncthreads();
  for (int p = threadIdx.x; p < world; p += blockDim.x) signal_arrive(pads, p, rank, world, slot);
  for (int p = threadIdx.x; p < world; p += blockDim.x) signal_wait(pads, p, rank, world, slot);
  __syncthreads();
}

// Address of rank `peer`'s copy of a symmetric tensor, as a T*: `buffers` is
// the uint64 table pkb_cuda.peers(t).buffer_table points to, `offset` is
// pkb_cuda.peers(t).offset (bytes; the same on every rank).
template <typename T>
__device__ __forceinline__ T* peer_ptr(const uint64_t* buffers, int peer, int64_t offset) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(buffers[peer]) + offset);
}

}  // namespace pkb

#endif  // PKB_CUDA_CUH_

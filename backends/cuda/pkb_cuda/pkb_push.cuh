// pkb_cuda push helpers: small messages sent one way, the data its own flag.
//
// Not in front of every source (pkb_cuda.cuh is): a solution that wants them
// puts pkb_cuda.PUSH_CUH in front of its CUDA source, and gets its scratch
// from pkb_cuda.push_scratch(...) (a symmetric buffer and this rank's counters).
//
// A sender writes 16-byte vectors of floating-point data straight into the
// receiver's slot for it; an empty slot holds the sentinel (negative zero's
// bits in every element), and a sender sends every -0.0 as +0.0 (equal in
// every comparison and sum), so a receiver knows a vector has landed once no
// element of it is the sentinel: one one-way trip across NVLink, no barrier.
// (Tearing is no risk: a vector lands at least 4 bytes at a time, and every
// element is checked.)
//
// Slots come in three epochs, used in turn, one slot per sender in each. In
// call e a receiver resets the slots of call e - 1, which it has read. A peer
// writes into them again in call e + 2, which it cannot begin before it has
// read this rank's data of call e + 1, sent after this call's kernel ended.
// The epoch, and how many vectors the last call received, live in device
// memory (counters), so CUDA graph replays advance them as calls do.
//
// That argument needs every rank to receive from every other rank in every
// call (all-reduce, all-gather, reduce-scatter, all-to-all): then no rank
// can be more than a call ahead of another. In a rooted collective (reduce,
// gather: one receiver; broadcast, scatter: one sender) a rank that only
// sends waits for nobody and could run calls ahead into slots still being
// read: it needs credits (the receiver telling each sender which call it has
// read) before it reuses a slot, which these helpers do not provide.
#ifndef PKB_PUSH_CUH_
#define PKB_PUSH_CUH_

#include <algorithm>
#include <cstdint>

namespace pkb {

template <int Size> struct PushBits;
template <> struct PushBits<2> { using type = uint16_t; static constexpr uint16_t kEmpty = 0x8000u; };
template <> struct PushBits<4> { using type = uint32_t; static constexpr uint32_t kEmpty = 0x80000000u; };
template <> struct PushBits<8> { using type = uint64_t; static constexpr uint64_t kEmpty = 0x8000000000000000ull; };

// `v` with every -0.0 element made +0.0, so no element sent reads as empty.
template <typename T> __device__ __forceinline__ uint4 push_clean(uint4 v) {
  using B = PushBits<sizeof(T)>;
  typename B::type* e = reinterpret_cast<typename B::type*>(&v);
#pragma unroll
  for (int k = 0; k < 16 / int(sizeof(T)); ++k)
    if (e[k] == B::kEmpty) e[k] = 0;
  return v;
}

// Whether any element of `v` is still the sentinel (its sender's write has not landed).
template <typename T> __device__ __forceinline__ bool push_empty(uint4 v) {
  using B = PushBits<sizeof(T)>;
  const typename B::type* e = reinterpret_cast<const typename B::type*>(&v);
  bool any = false;
#pragma unroll
  for (int k = 0; k < 16 / int(sizeof(T)); ++k) any |= e[k] == B::kEmpty;
  return any;
}

template <typename T> __device__ __forceinline__ uint4 push_sentinel() {
  using B = PushBits<sizeof(T)>;
  uint4 v;
  typename B::type* e = reinterpret_cast<typename B::type*>(&v);
#pragma unroll
  for (int k = 0; k < 16 / int(sizeof(T)); ++k) e[k] = B::kEmpty;
  return v;
}

// A 16-byte load that goes to memory every time (a peer's write lands there, not in this SM's L1).
__device__ __forceinline__ uint4 load_volatile_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

// The vector at `src` once its sender's write has landed.
template <typename T> __device__ __forceinline__ uint4 push_receive(const uint4* src) {
  uint4 v = load_volatile_v4(src);
  while (push_empty<T>(v)) v = load_volatile_v4(src);
  return v;
}

// One rank's view of the push scratch (pkb_cuda.push_scratch(...) gives the fields, in order).
// counters, this rank's, in device memory: [0] the epoch (0, 1, 2), [1] blocks done in this
// call, [2] vectors each slot received in the last call (what this call resets).
struct PushScratch {
  const uint64_t* table;  // the scratch's symmetric pointer table (pkb_cuda.peers(scratch))
  int64_t offset;         // the scratch's offset from each table entry
  int64_t slot_bytes;     // bytes of one slot: the most one sender sends one receiver in a call
  uint32_t* counters;
  int rank;
  int world;

  // From pkb_cuda.push_scratch(...)'s six ints, as a binding receives them.
  static PushScratch from_fields(int64_t table, int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank,
                                 int64_t world) {
    return PushScratch{reinterpret_cast<const uint64_t*>(table), offset, slot_bytes,
                       reinterpret_cast<uint32_t*>(counters), static_cast<int>(rank), static_cast<int>(world)};
  }

  // Rank p's slot for `sender` in `epoch`.
  __device__ __forceinline__ uint4* slot(int p, int epoch, int sender) const {
    return pkb::peer_ptr<uint4>(table, p, offset + (static_cast<int64_t>(epoch) * world + sender) * slot_bytes);
  }
  __device__ __forceinline__ int epoch() const {
    return static_cast<int>(*reinterpret_cast<volatile uint32_t*>(&counters[0]));
  }
  // Reset, in this rank's slots of the last call, the vectors a thread of index `tid` among
  // `threads` is given (call from every thread, before push_finish).
  template <typename T>
  __device__ __forceinline__ void reset_last(int epoch, int64_t tid, int64_t threads) const {
    const int64_t last = *reinterpret_cast<volatile uint32_t*>(&counters[2]);
    const int previous = (epoch + 2) % 3;
    const uint4 empty = push_sentinel<T>();
    for (int64_t i = tid; i < last; i += threads)
      for (int p = 0; p < world; ++p) slot(rank, previous, p)[i] = empty;
  }
  // The last block of the grid to get here advances the epoch and records `vectors`, the
  // vectors each slot received in this call (call from every thread of every block, last).
  __device__ __forceinline__ void finish(int epoch, int64_t vectors) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(&counters[1], 1u) == gridDim.x - 1) {
        counters[1] = 0;
        counters[2] = static_cast<uint32_t>(vectors);
        counters[0] = static_cast<uint32_t>((epoch + 1) % 3);
      }
    }
  }
};

// The grid a push kernel launches with: one block per `threads` of the `vectors` each thread
// takes one of, but every block resident at once (a waiting block must not keep a peer's sender
// from running), so at most one block an SM; at least one.
inline int push_blocks(int64_t vectors, int threads, int sms) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((vectors + threads - 1) / threads, sms)));
}

}  // namespace pkb

#endif  // PKB_PUSH_CUH_

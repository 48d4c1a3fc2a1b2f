"""All-gather in CUDA compiled with NVRTC: every rank copies every peer's block into its output.

The kernel of 2_allgather.py without the host C++ (see 1_allreduce_nvrtc.py
for why NVRTC). Output slot s of shape (M, N) is rank s's input, read directly
from rank s's memory over NVLink. The copy works on bytes, so one kernel
serves every dtype (instantiated per element size, for the tail): 16-byte
vectors when every address and the block size allow it, element-sized words
otherwise. A pairwise CAS barrier per block before (peers' inputs are in
place) and after (nobody returns while a peer still reads its input). Each
rank starts with a different peer, so the links are busy at once.
"""
import functools

import torch

import pkb_cuda
from pkb_cuda import nvrtc

SOURCE = r"""
// Every integer argument is a long long: the launcher passes Python ints as 64-bit values.
template <typename E>
__global__ void __launch_bounds__(512, 2)
allgather(const unsigned long long* buffers, unsigned int* const* pads, long long offset, char* out,
          long long chunk, long long rank, long long world, long long vec) {
  const int U = 2;  // 16-byte vectors per thread and peer in flight
  pkb::barrier_block(pads, (int)rank, (int)world, blockIdx.x);
  const long long threads = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nvec = vec ? chunk / 16 : 0;
  for (long long base = tid; base < nvec; base += threads * U) {
    for (int jj = 0; jj < world; ++jj) {
      const int j = (int)((rank + jj) % world);  // stagger: ranks start on different peers
      const uint4* src = pkb::peer_ptr<const uint4>(buffers, j, offset);
      uint4* dst = reinterpret_cast<uint4*>(out + j * chunk);
      uint4 v[U];
      for (int u = 0; u < U; ++u)
        if (base + u * threads < nvec) v[u] = src[base + u * threads];
      for (int u = 0; u < U; ++u)
        if (base + u * threads < nvec) dst[base + u * threads] = v[u];
    }
  }
  // Tail (or everything when the addresses are not 16-byte aligned), in elements.
  const long long elems = chunk / (long long)sizeof(E);
  for (long long i = nvec * (16 / sizeof(E)) + tid; i < elems; i += threads)
    for (int j = 0; j < world; ++j)
      reinterpret_cast<E*>(out + j * chunk)[i] = pkb::peer_ptr<const E>(buffers, j, offset)[i];
  pkb::barrier_block(pads, (int)rank, (int)world, blockIdx.x);
}
"""

THREADS = 512
BYTES_PER_BLOCK = THREADS * 2 * 16
WORDS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
#: The instantiations the kernel source offers (the compile phase may build them ahead).
KERNELS = [f"allgather<{name}>" for name in WORDS.values()]


@functools.lru_cache(maxsize=None)
def sm_count(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def solution(tensor):
    p = pkb_cuda.peers(tensor)
    out = torch.empty((p.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    chunk = tensor.numel() * tensor.element_size()
    if chunk == 0:
        return out
    kernel = nvrtc.kernel(SOURCE, f"allgather<{WORDS[tensor.element_size()]}>")
    # Same grid on every rank (it pairs the barrier's blocks): from shared values only.
    blocks = max(1, min(-(-chunk * p.world_size // BYTES_PER_BLOCK), 2 * sm_count(tensor.device), p.max_blocks))
    vec = p.align >= 16 and chunk % 16 == 0 and out.data_ptr() % 16 == 0
    kernel(blocks, THREADS, p.buffer_table, p.signal_table, p.offset, out, chunk, p.rank, p.world_size, int(vec))
    return out

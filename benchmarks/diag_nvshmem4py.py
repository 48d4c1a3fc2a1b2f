"""Why nvshmem4py's Numba device API fails to compile on the GPU machine.

One process, no NVSHMEM initialisation (compiling needs none): compile a
kernel that calls ``nvd.get_block`` for a fixed signature and print the whole
exception chain, NVRTC's log if the exception carries one, and where the
NVSHMEM and CUDA headers were found. Run: ``python3 benchmarks/diag_nvshmem4py.py``.
"""
import os
import sys
import traceback

from pkb_nvshmem.nvshmem4py import cuda, int32, nvd


def _kernel(out, src, peer):
    nvd.get_block(out, src, int32(peer))


def main() -> int:
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        for lib in ("nvshmem", "cudart", "nvrtc", "cccl"):
            try:
                print(f"headers {lib}: {find_nvidia_header_directory(lib)}")
            except Exception as exc:  # noqa: BLE001
                print(f"headers {lib}: {type(exc).__name__}: {exc}")
    except ImportError as exc:
        print("cuda.pathfinder:", exc)
    print("CUDA_HOME", os.environ.get("CUDA_HOME"), "CUDA_PATH", os.environ.get("CUDA_PATH"))
    try:
        cuda.jit("void(uint8[::1], uint8[::1], int64)")(_kernel)
        print("compiled ok")
        return 0
    except BaseException as exc:  # noqa: BLE001
        seen = exc
        while seen is not None:
            print("----", type(seen).__name__, repr(seen)[:4000])
            for attr in ("log", "compile_log", "args"):
                if hasattr(seen, attr):
                    print(f"  .{attr} = {str(getattr(seen, attr))[:4000]}")
            seen = seen.__cause__ or seen.__context__
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())

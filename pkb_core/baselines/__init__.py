"""Strong non-NCCL baselines that ``pkb bench`` times next to NCCL.

They are ordinary solution files for the reference backend (plain PyTorch
calling torch's symmetric-memory operators on the harness-placed inputs), so
they are checked like any candidate. GPU only: torch symm_mem has no CPU path.
"""
from pathlib import Path

BASELINES = Path(__file__).parent


def baselines_for(problem_key: str) -> list[Path]:
    """Baseline solution files for one problem (``<id>_<name>_*.py``)."""
    return sorted(BASELINES.glob(f"{problem_key}_*.py"))

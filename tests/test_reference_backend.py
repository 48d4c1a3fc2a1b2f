"""The reference backend runs the shared backend contract like any plugin."""
from pkb_core.testing import BackendContract


class TestReferenceBackend(BackendContract):
    backend = "reference"
    sample_problems = "1-8"  # the built-in collectives (other installed packs may add more)
    world_sizes = (4,)  # 2 and 3 are covered by test_run.py

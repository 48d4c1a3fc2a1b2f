"""Every test of the repository (tests/ and each backend's tests/) runs with pkb's
opt-in pytest plugin (fixtures ``pkb_invoke``, ``pkb_pm``; the BackendContract suite)."""
import os

pytest_plugins = ["pkb_core.testing"]

# Tests run the real CPU pipeline; never let a developer's GPU change that.
os.environ["PKB_DEVICE"] = "cpu"

"""Every test of the repository (tests/ and each backend's tests/) runs with pkb's
opt-in pytest plugin (fixtures ``pkb_invoke``, ``pkb_pm``; the BackendContract suite).

The tests are hermetic: pkb's cache (calibration, build outcomes, backends' builds)
is a temporary folder of this session's own, never ``~/.cache/pkb``; tables are
rendered at full width whatever the developer's ``$COLUMNS``. ``--pkb-extra-pack``
runs the tests with a throwaway third-party problem pack installed, to check
that none assumes the built-in pack is alone.
"""
import atexit
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

pytest_plugins = ["pkb_core.testing"]

# Tests run the real CPU pipeline; never let a developer's GPU change that.
os.environ["PKB_DEVICE"] = "cpu"
# Set before any test (and inherited by every process a test starts), and removed as the process
# exits: the xdist worker that ran a root-only pkb job in-process never reached pytest_unconfigure
# (its atexit handlers ran), and each test run left its folder in /tmp.
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="pkb-tests-"))
atexit.register(shutil.rmtree, _SESSION_DIR, ignore_errors=True)
os.environ["PKB_CACHE_DIR"] = str(_SESSION_DIR / "cache")
os.environ.pop("COLUMNS", None)

EXTRA_PACK = '''
from pathlib import Path
from pkb_core import hookimpl

@hookimpl
def pkb_register_problems(register):
    register(Path(__file__).parent / "pkbextra_problems")
'''

EXTRA_PROBLEM = '''"""Sum of every rank's small integers (a third-party pack's problem)."""
import torch.distributed as dist

ID = 990
NAME = "extra_pack_sum"
CATEGORY = "collective"
ORIGIN = "a third-party pack (tests)"
WORLD_SIZE = "any W >= 2"
SIZES = {"tiny": {"n": 8}, "default": {"n": 1024}, "large": {"n": 65536}}


def inputs(ctx):
    return (ctx.exact(ctx.params["n"]),)


def reference(x):
    out = x.clone()
    dist.all_reduce(out)
    return out


def traffic(params, world_size, itemsize):
    nbytes = params["n"] * itemsize
    return {"link_bytes": 2 * (world_size - 1) / world_size * nbytes, "hbm_bytes": 2 * nbytes, "flops": 0}
'''


def pytest_addoption(parser):
    parser.addoption("--pkb-extra-pack", action="store_true",
                     help="Install a throwaway third-party problem pack (problem 990, a collective) for the session.")


def pytest_configure(config):
    if not config.getoption("--pkb-extra-pack", default=False):
        return
    site = _SESSION_DIR / "extra-pack"
    (site / "pkbextra_problems").mkdir(parents=True)
    (site / "pkbextra_pack.py").write_text(EXTRA_PACK)
    (site / "pkbextra_problems" / "990_extra_pack_sum.py").write_text(EXTRA_PROBLEM)
    info = site / "pkbextra-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkbextra\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pkb.problems]\nextra = pkbextra_pack\n")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


#: Files whose tests take minutes of wall time that is mostly waiting (a Ray cluster's start and a
#: worker node's departure, two launchers that form one world) or CPU time (every problem of the
#: pack at three world sizes), collected first: with two tests at a time (`-n 2 --dist loadfile`,
#: in collection order), the other worker's tests fill their waits, instead of the suite's last
#: minutes being one of these alone (4-5 minutes of a 17-minute run before this order).
LONG_FILES = ("tests/test_serve_ray.py", "tests/test_multinode.py", "tests/test_problem_pack.py", "tests/test_serve.py")


def pytest_collection_modifyitems(session, config, items):
    """Put the tests of :data:`LONG_FILES` first, in that order (each file's own order kept)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FILES)))

"""pkb's built-in problem pack.

Each problem is one file ``<category>/<id>_<name>.py`` following the contract
in :mod:`pkb_core.problem.contract`. The files are registered by path and imported only
when a problem runs, so importing this pack stays light (no torch).
"""
from pathlib import Path

from pkb_core import hookimpl

PROBLEM_DIR = Path(__file__).parent


@hookimpl
def pkb_register_problems(register):
    register(PROBLEM_DIR)

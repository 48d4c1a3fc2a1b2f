"""Who goes next, in the compile pool and onto the lanes: the scheduler's order of waiting jobs.

A waiting job belongs to an *account*: the client of the token that submitted it, where the
service has client tokens (``pkb serve --tokens``), else its submission's ``client`` tag (a single
token, or none: one party submits every job and tags them as it likes). The order:

1. a job's priority across accounts: the admin's (and a single-token service's) as submitted; a
   tenant's (a client token's) at most 0, so that a tenant can lower its jobs below others' but
   never lift them above another tenant's: priority 1000 for every job of one tenant had every
   other tenant's jobs wait behind them;
2. the account with the fewest jobs started lately (the caller counts: builds running, or jobs
   started in the last window), so one account's thousand submissions do not starve another's
   one, and a tenant that spreads its jobs over many ``client`` tags is still one account;
3. the job's own priority (within an account, a tenant's priorities order its own jobs);
4. submission order (the caller's list is oldest first, and ``min`` keeps the first of equals).
"""
from __future__ import annotations

from typing import Any, Callable


def account(item: dict) -> str:
    """The account of a waiting job (``item`` as :meth:`pkb_core.serve.store.JobStore.waiting` gives it)."""
    return item["owner"] if item.get("owner") is not None else item["client"]


def order_key(item: dict, started: Callable[[str], Any]) -> tuple:
    """The key :func:`min` picks the next job by (see the module docstring); ``started(account)``:
    how much of the account's share it has used now (a count, or a tuple of counts compared in
    order: the compile pool's builds running, then started lately)."""
    tenant = item.get("owner") is not None
    across = min(item["priority"], 0) if tenant else item["priority"]
    return -across, started(account(item)), -item["priority"]

"""Per-client storage quota of the reward service: how many jobs, and how many bytes of source, a
client may keep in the service's data at once.

A client here is an *account*: the client of a token (``pkb serve --tokens``), every job it
submitted whatever their client tags; or, for a request with the admin token or to a service
without tokens, the submission's ``client`` tag (self-declared: the quota then guards against a
runaway trainer, not a hostile one; give each client its own token for that). Every job an
account keeps counts, finished or not, until retention prunes it
(:mod:`pkb_core.serve.retention`), each with its source's bytes (a job answered from an
identical one's record counts them too). Over either limit a submission is refused with 429
and one line naming the limit, without ``Retry-After``: waiting does not help until finished
jobs are pruned, so :class:`pkb_core.client.Client` does not retry it.

The check is made in the transaction that adds the job (:meth:`pkb_core.serve.store.JobStore.add`),
so concurrent submissions of one account cannot pass the limit together.
"""
from __future__ import annotations

from dataclasses import dataclass

from pkb_core.serve.refusal import Refused

#: Default limits per account.
DEFAULT_MAX_JOBS = 100_000
DEFAULT_MAX_SOURCE_BYTES = 1 << 30


class OverQuota(Refused):
    """A submission over its account's quota: HTTP 429 without ``Retry-After``."""

    def __init__(self, message: str):
        super().__init__(message, 429)


@dataclass(frozen=True)
class Quota:
    """The limits each account has (``pkb serve --client-max-jobs``, ``--client-max-source-mb``);
    ``retention_days`` only words the refusal (when kept jobs leave)."""

    max_jobs: int = DEFAULT_MAX_JOBS
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    retention_days: float = 0.0

    def admit(self, account: str, *, jobs: int, source_bytes: int, adding_bytes: int) -> None:
        """Refuse (:class:`OverQuota`) a job of ``adding_bytes`` of source for ``account``, which keeps
        ``jobs`` jobs with ``source_bytes`` bytes of source now."""
        if jobs + 1 > self.max_jobs:
            raise OverQuota(f"client {account!r} keeps {jobs} jobs, at most {self.max_jobs} per client "
                            f"(--client-max-jobs); {self._leaving()}")
        if source_bytes + adding_bytes > self.max_source_bytes:
            raise OverQuota(f"client {account!r} keeps {source_bytes} bytes of sources and this one is "
                            f"{adding_bytes} more, at most {self.max_source_bytes} per client "
                            f"(--client-max-source-mb); {self._leaving()}")

    def _leaving(self) -> str:
        if self.retention_days > 0:
            return f"finished jobs are pruned {self.retention_days:g} days after they end"
        return "finished jobs are kept (no --retention-days): ask the operator"

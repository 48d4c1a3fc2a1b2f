"""A request the reward service does not take: :class:`Refused`, its HTTP status and its one line.

Light on purpose (it imports nothing of the service): the command line reads the
service's defaults from modules that refuse with it (:mod:`pkb_core.serve.quota`)
without importing the intake's planning.
"""
from __future__ import annotations

from pkb_core.errors import PkbError


class Refused(PkbError):
    """A submission the service does not queue: ``status`` is the HTTP status, the text its one line."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status

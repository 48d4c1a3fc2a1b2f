"""The reward service's tokens file (``pkb serve --tokens FILE``): which bearer token is which client.

A TOML file, read once when the service starts::

    admin = "a long random string"          # optional: sees, lists and cancels every job

    [clients]                               # client name = its token
    trainer-a = "another long random string"
    trainer-b = "a third one"

A request with a client's token is that client: it sees, lists and cancels only the jobs it
submitted (another's job is a 404, as an unknown one). The admin token, like ``--token``
(the single-token setup), sees every job. :mod:`pkb_core.serve.access` turns the file into
the callers a request can be; docs/serve.md is the reference.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class TokensFile(Contract):
    """The tokens file's content; unknown keys are refused (a misspelt ``[client]`` table would
    otherwise leave every client without a token)."""

    #: The admin token (another admin token may come from ``--token``); None: no admin in the file.
    admin: str | None = optional()
    #: Client name -> its bearer token.
    clients: dict[str, str] = attrs.field(factory=dict)

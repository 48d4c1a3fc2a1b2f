"""Who a request is: the bearer tokens of the reward service, and the caller each one makes.

Two kinds of caller (:class:`Caller`):

- **admin**: sees, lists and cancels every job. The token of ``--token`` /
  ``PKB_SERVE_TOKEN`` (the single-token setup, unchanged) and the ``admin`` of a tokens
  file are admin tokens; a service with no token at all (localhost only) treats every
  request as admin, as it always did.
- **a client** (a name of the tokens file's ``[clients]`` table): its jobs are recorded as
  its own (the store's ``owner``), and it sees, lists and cancels only those. Another
  client's job answers 404 exactly as an unknown one, so job ids do not leak.

Tokens are compared by their SHA-256 digests in a dictionary: the lookup costs the same
whatever prefix a guess shares with a real token, and the service keeps no token in clear.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve_tokens import TokensFile
from pkb_core.errors import CannotStart

#: The longest client name (a client name is also its jobs' default client tag).
MAX_NAME = 200


@dataclass(frozen=True)
class Caller:
    """Who made a request: the admin (``name`` None), or the client ``name``."""

    name: str | None = None

    @property
    def admin(self) -> bool:
        return self.name is None

    @property
    def owner(self) -> str | None:
        """The store's filter for this caller: its own jobs (a client), or None (the admin: every job)."""
        return self.name


#: The caller of a request with an admin token, and of every request to a service without tokens.
ADMIN = Caller()


class Access:
    """The service's tokens: :meth:`caller` tells who a request's ``Authorization`` header is.

    :param admin_tokens: admin tokens (``--token``, a tokens file's ``admin``); None entries are skipped.
    :param clients: client name -> token (a tokens file's ``[clients]``).
    """

    def __init__(self, admin_tokens=(), clients: dict[str, str] | None = None):
        self._callers: dict[bytes, Caller] = {}
        for token in admin_tokens:
            if token:
                self._callers[_digest(token)] = ADMIN
        for name, token in (clients or {}).items():
            key = _digest(token)
            if key in self._callers:
                raise CannotStart(f"client {name!r} has a token that another client or the admin has: "
                                  "give each its own")
            self._callers[key] = Caller(name)

    @property
    def required(self) -> bool:
        """Whether requests need a token (any token is configured)."""
        return bool(self._callers)

    @property
    def has_admin(self) -> bool:
        return ADMIN in self._callers.values()

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller of a request with this ``Authorization`` header; None: a missing or wrong token."""
        if not self._callers:
            return ADMIN
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        return self._callers.get(_digest(token.strip()))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def load_tokens(path: Path) -> TokensFile:
    """The tokens file at ``path``, checked; :class:`~pkb_core.errors.CannotStart` (one line) when it
    cannot be read, is not TOML of the right shape, names a client or token that cannot be one,
    or can be read by other users (a job's candidate runs as a user of its own: the file must be
    the service user's alone, as an ssh key is)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CannotStart(f"cannot read the tokens file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if mode & 0o077:
        raise CannotStart(f"the tokens file {path} can be read by other users (mode {mode & 0o777:o}): "
                          f"chmod 600 {path}")
    try:
        tokens = TokensFile.from_json(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ContractError) as exc:
        raise CannotStart(f"the tokens file {path} is not valid: {str(exc).splitlines()[0]}") from None
    for name, token in [("admin", tokens.admin), *tokens.clients.items()]:
        if token is not None and (not token or token != token.strip() or not token.isprintable() or " " in token):
            raise CannotStart(f"the tokens file {path}: the token of {name!r} must be non-empty printable text "
                              "without spaces")
    for name in tokens.clients:
        if not name or len(name) > MAX_NAME or not name.isprintable():
            raise CannotStart(f"the tokens file {path}: client name {name[:40]!r} must be printable and "
                              f"1 to {MAX_NAME} characters")
    return tokens

"""Clients of pkb's reward service (``pkb serve``, docs/serve.md): :class:`Client`
(synchronous) and :class:`AsyncClient` (asyncio), over HTTP with httpx.

They import nothing of the service, torch or the launcher: a trainer's reward
function imports them in its own process. Both return the service's contracts
(:class:`~pkb_core.contracts.serve.JobView`,
:class:`~pkb_core.contracts.record.Record`), parsed once.
"""
from pkb_core.client.http import AsyncClient, Client, ServiceError

__all__ = ["AsyncClient", "Client", "ServiceError"]

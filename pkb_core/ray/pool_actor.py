"""The :class:`~pkb_core.ray.EvaluatorPool` as a named Ray actor that answers only its token.

:meth:`EvaluatorPool.remote` starts :class:`PoolActor` under a name
(``pkb-evaluator`` in the ``pkb`` namespace) and returns a :class:`PoolHandle`: the
actor's handle with the pool's token inside. Every method of the actor takes the
token as its first argument and refuses a call without it (:class:`Unauthorized`,
a :class:`PermissionError`); the handle adds it, so its holder calls
``pool.evaluate.remote(...)`` as before. Anyone else in the cluster can find the
actor by its name (``ray.get_actor``), but without the token cannot submit, read,
list or cancel a job.

The token: 32 random bytes per pool, or the one the creator gives (``token=``, as
``pkb serve --token`` takes one). The actor keeps only its SHA-256, so the creation
arguments Ray keeps in its control store hold no usable token; each call's token is
hashed and compared in constant time. A :class:`PoolHandle` pickles with its token,
so handing it to a reward worker (a task's or an actor's argument) gives that worker
the pool; :meth:`EvaluatorPool.find` makes one from the name and the token.

Ray gives every actor a ``__ray_call__`` method that runs any function the caller
sends on the actor's instance; it would read the pool's jobs past the token, so the
pool's actor class answers it with :class:`Unauthorized` too (:func:`actor_class`).

The token keeps pkb's pool to its holders among the cluster's drivers; it does not
make a hostile member of the cluster harmless (one can still kill the actor, or run
code on its node): docs/trust.md, "Across the nodes of a Ray cluster".
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

from pkb_core.ray.placement import NAMESPACE

#: The pool actor's default name (in the service's namespace).
NAME = "pkb-evaluator"


class Unauthorized(PermissionError):
    """A call to the pool's actor without the pool's token."""

    def __init__(self, name: str = NAME):
        super().__init__(f"the Ray actor {name!r} answers only calls with its pool's token: use the "
                         f"handle EvaluatorPool.remote returned, or EvaluatorPool.find(token)")


def digest(token: str) -> bytes:
    return hashlib.sha256(str(token).encode()).digest()


def new_token() -> str:
    return secrets.token_hex(32)


class PoolActor:
    """The pool in its actor (see the module docstring): each method is the
    :class:`~pkb_core.ray.EvaluatorPool` method of that name, after the token.

    :param token_digest: the SHA-256 of the pool's token (:func:`digest`).
    :param name: the actor's name (for the refusal's message).
    :param pool_class: :class:`~pkb_core.ray.EvaluatorPool`.
    :param args, kwargs: its arguments.
    """

    def __init__(self, token_digest: bytes, name: str, pool_class, args: tuple, kwargs: dict):
        self._digest = token_digest
        self._name = name
        # The class is handed in (it imports this module to start the actor: no import cycle).
        self._pool = pool_class(*args, **kwargs)

    def _check(self, token) -> None:
        if not hmac.compare_digest(digest(token), self._digest):
            raise Unauthorized(self._name)

    def submit(self, token, problem, source, **options):
        self._check(token)
        return self._pool.submit(problem, source, **options)

    def view(self, token, job_id):
        self._check(token)
        return self._pool.view(job_id)

    def wait(self, token, job_id, timeout=None):
        self._check(token)
        return self._pool.wait(job_id, timeout)

    def jobs(self, token, **selection):
        self._check(token)
        return self._pool.jobs(**selection)

    def evaluate(self, token, problem, source, **options):
        self._check(token)
        return self._pool.evaluate(problem, source, **options)

    def evaluate_many(self, token, items):
        self._check(token)
        return self._pool.evaluate_many(items)

    def cancel(self, token, job_id):
        self._check(token)
        return self._pool.cancel(job_id)

    def cancel_jobs(self, token, ids=None, **selection):
        self._check(token)
        return self._pool.cancel_jobs(ids, **selection)

    def stats(self, token):
        self._check(token)
        return self._pool.stats()

    def close(self, token):
        self._check(token)
        return self._pool.close()


def actor_class():
    """``ray.remote(PoolActor)`` whose ``__ray_call__`` refuses (see the module docstring).

    Ray adds ``__ray_call__`` to a subclass it makes of the class (so a method of
    ours by that name would be overridden); the refusal replaces it on that subclass,
    which Ray sends to the actor's worker by value.
    """
    import ray

    remote = ray.remote(PoolActor)

    def __ray_call__(self, fn, *args, **kwargs):
        raise Unauthorized(self._name)

    remote.__ray_metadata__.modified_class.__ray_call__ = __ray_call__
    return remote


class PoolHandle:
    """The pool's actor with its token: ``handle.evaluate.remote(...)`` calls the actor's
    ``evaluate`` with the token first. ``token`` is the pool's (give it only to whom may use the pool)."""

    def __init__(self, actor, token: str):
        self.actor = actor
        self.token = token

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("actor", "token"):
            raise AttributeError(name)
        return _Method(getattr(self.actor, name), self.token)

    def __repr__(self) -> str:  # never the token
        return f"PoolHandle({self.actor!r})"


class _Method:
    def __init__(self, method, token: str):
        self._method = method
        self._token = token

    def remote(self, *args, **kwargs):
        return self._method.remote(self._token, *args, **kwargs)

    def options(self, **options):
        return _Method(self._method.options(**options), self._token)


def start(pool_class, args: tuple, kwargs: dict, *, name: str, token: str | None, max_concurrency: int) -> PoolHandle:
    """The named pool actor of ``pool_class(*args, **kwargs)`` (created, or the running one of that
    name) with ``token`` (default: a new one)."""
    token = token or new_token()
    actor = actor_class().options(name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0,
                                  max_concurrency=max_concurrency).remote(digest(token), name, pool_class, args,
                                                                          kwargs)
    return PoolHandle(actor, token)


def find(token: str, name: str = NAME) -> PoolHandle:
    """The running pool actor of that name, called with ``token`` (refused unless it is the pool's)."""
    import ray

    return PoolHandle(ray.get_actor(name, namespace=NAMESPACE), token)

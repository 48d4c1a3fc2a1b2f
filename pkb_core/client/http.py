"""The service's clients (see :mod:`pkb_core.client`).

``evaluate(problem, source, **options) -> Record`` submits and waits;
``evaluate_many(items, concurrency=N)`` keeps N submissions in flight and
returns one record per item, in the order of ``items``. What a source holds
never raises: an empty, undecodable or oversized one is its job's
``compile-error`` record, as a file that does not parse. A full queue (429 with
``Retry-After``) is retried after the seconds it says; any other refusal (of the
request: an unknown problem or backend, an option out of range, a wrong token, a
client over its quota: a 429 without ``Retry-After``, which waiting does not cure)
raises :class:`ServiceError` with the service's one line, and so does a service that
cannot be reached (no answer: ``status`` :data:`UNREACHABLE`).

Without a URL a client talks to ``$PKB_SERVER``, else :data:`DEFAULT_URL`
(as ``pkb submit`` does); without a token it sends ``$PKB_SERVE_TOKEN``, if set.
"""
from __future__ import annotations

import asyncio
import json
import os
import time

import httpx

from pkb_core.contracts.record import Record
from pkb_core.contracts.serve import CancelRequest, Cancelled, JobView, QueueStats, Submission

#: Where ``pkb serve`` listens by default.
DEFAULT_URL = "http://127.0.0.1:8765"
#: The environment variable naming the service (``pkb submit --server``'s too).
URL_ENV = "PKB_SERVER"
#: Seconds one long poll asks the service to hold (the service caps it at 60).
POLL_S = 30.0
#: Times a 429 is retried before it is raised.
OVERLOAD_RETRIES = 20


#: :attr:`ServiceError.status` when no answer came: the service could not be reached.
UNREACHABLE = 0


class ServiceError(RuntimeError):
    """A refusal of the service: ``status`` and its one-line ``message``; or no answer at all
    (``status`` :data:`UNREACHABLE`, the message names the URL and why)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}" if status != UNREACHABLE else message)
        self.status = status
        self.message = message


def _unreachable(url: str, exc: httpx.TransportError) -> ServiceError:
    """No answer from the service at ``url`` (refused, timed out, cut off), as one line."""
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ServiceError(UNREACHABLE, f"cannot reach the service at {url}: {why}")


def _base_url(url: str | None) -> str:
    return (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def _cancel_body(ids, client: str | None, all: bool) -> dict:
    return CancelRequest(ids=None if ids is None else tuple(ids), client=client, all=all).to_json()


def _headers(token: str | None) -> dict:
    token = token or os.environ.get("PKB_SERVE_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _submission(problem, source: str, options: dict) -> dict:
    """The request of one submission: its JSON, written here rather than by httpx, which writes UTF-8
    and cannot carry a source that is not UTF-8 text (escaped, the service answers it ``compile-error``)."""
    body = json.dumps(Submission(problem=str(problem), source=source, **options).to_json())
    return {"content": body.encode("ascii"), "headers": {"Content-Type": "application/json"}}


def _answer(response: httpx.Response) -> dict:
    if response.status_code >= 400:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text[:300]
        raise ServiceError(response.status_code, message)
    return response.json()


def _retry(response: httpx.Response) -> bool:
    """Whether to submit again later: a full queue (429 with ``Retry-After``), not a quota (429 without)."""
    return response.status_code == 429 and "retry-after" in response.headers


def _waiting_for_room(response: httpx.Response, on_full) -> float:
    """The seconds to wait before submitting again to a full queue, told to ``on_full`` first."""
    seconds = _retry_after(response)
    if on_full is not None:
        try:
            line = response.json().get("error", "")
        except ValueError:
            line = ""
        on_full(seconds, line)
    return seconds


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.5, min(60.0, float(response.headers.get("retry-after", "5"))))
    except ValueError:
        return 5.0


class Client:
    """A synchronous client of one service.

    :param url: the service's base URL (default ``$PKB_SERVER``, else :data:`DEFAULT_URL`).
    :param token: its bearer token (default ``$PKB_SERVE_TOKEN``).
    :param timeout: seconds per HTTP request (long polls add theirs).
    :param on_full: called as ``on_full(seconds, line)`` before each wait for a full queue's room
        (429 with ``Retry-After``), so a caller can say why it waits (``pkb submit`` does).
    """

    def __init__(self, url: str | None = None, *, token: str | None = None, timeout: float = 30.0,
                 on_full=None):
        self.url = _base_url(url)
        self._http = httpx.Client(base_url=self.url, headers=_headers(token), timeout=timeout)
        self.on_full = on_full

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **request) -> httpx.Response:
        """One HTTP request; :class:`ServiceError` when no answer comes (not httpx's exception)."""
        try:
            return self._http.request(method, path, **request)
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def submit(self, problem, source: str, **options) -> JobView:
        """Queue a solution; ``options`` are :class:`Submission`'s fields (backend, world_size,
        trials, measure_perf, client, priority, fresh, ...)."""
        body = _submission(problem, source, options)
        for _ in range(OVERLOAD_RETRIES):
            response = self._call("POST", "/v1/jobs", **body)
            if not _retry(response):
                return JobView.from_json(_answer(response))
            time.sleep(_waiting_for_room(response, self.on_full))
        return JobView.from_json(_answer(response))

    def get(self, job_id: str) -> JobView:
        return JobView.from_json(_answer(self._call("GET", f"/v1/jobs/{job_id}")))

    def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        """The job once final (or as it is after ``timeout`` seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            hold = POLL_S if end is None else max(0.0, min(POLL_S, end - time.monotonic()))
            view = JobView.from_json(_answer(self._call("GET", f"/v1/jobs/{job_id}/wait", params={"timeout": hold},
                                                        timeout=hold + 30)))
            if view.state.final or (end is not None and time.monotonic() >= end):
                return view

    def cancel(self, job_id: str) -> JobView:
        return JobView.from_json(_answer(self._call("POST", f"/v1/jobs/{job_id}/cancel")))

    def cancel_jobs(self, ids=None, *, client: str | None = None, all: bool = False) -> Cancelled:
        """Cancel many unfinished jobs in one call: those among ``ids`` and of ``client`` (both when
        both are given), or with ``all`` every one."""
        return Cancelled.from_json(_answer(self._call("POST", "/v1/jobs/cancel",
                                                      json=_cancel_body(ids, client, all))))

    def jobs(self, *, state: str | None = None, client: str | None = None, limit: int = 100) -> list[JobView]:
        params = {k: v for k, v in {"state": state, "client": client, "limit": limit}.items() if v is not None}
        return [JobView.from_json(j) for j in _answer(self._call("GET", "/v1/jobs", params=params))["jobs"]]

    def stats(self) -> QueueStats:
        return QueueStats.from_json(_answer(self._call("GET", "/v1/stats")))

    def health(self) -> dict:
        return _answer(self._call("GET", "/v1/health"))

    def evaluate(self, problem, source: str, **options) -> Record | None:
        """Submit, wait, and return the record (None if the job was cancelled)."""
        return self.wait(self.submit(problem, source, **options).id).record

    def evaluate_many(self, items, *, concurrency: int = 8) -> list[Record | None]:
        """``items``: ``(problem, source, options)`` triples; one record per item, in their order
        (None for a job that was cancelled), with at most ``concurrency`` jobs in flight."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(lambda item: self.evaluate(item[0], item[1], **(item[2] or {})), items))


class AsyncClient:
    """The asyncio twin of :class:`Client` (same methods, awaited)."""

    def __init__(self, url: str | None = None, *, token: str | None = None, timeout: float = 30.0,
                 on_full=None):
        self.url = _base_url(url)
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(token), timeout=timeout)
        self.on_full = on_full

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **request) -> httpx.Response:
        """One HTTP request; :class:`ServiceError` when no answer comes (not httpx's exception)."""
        try:
            return await self._http.request(method, path, **request)
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    async def submit(self, problem, source: str, **options) -> JobView:
        body = _submission(problem, source, options)
        for _ in range(OVERLOAD_RETRIES):
            response = await self._call("POST", "/v1/jobs", **body)
            if not _retry(response):
                return JobView.from_json(_answer(response))
            await asyncio.sleep(_waiting_for_room(response, self.on_full))
        return JobView.from_json(_answer(response))

    async def get(self, job_id: str) -> JobView:
        return JobView.from_json(_answer(await self._call("GET", f"/v1/jobs/{job_id}")))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while True:
            hold = POLL_S if end is None else max(0.0, min(POLL_S, end - loop.time()))
            view = JobView.from_json(_answer(await self._call(
                "GET", f"/v1/jobs/{job_id}/wait", params={"timeout": hold}, timeout=hold + 30)))
            if view.state.final or (end is not None and loop.time() >= end):
                return view

    async def cancel(self, job_id: str) -> JobView:
        return JobView.from_json(_answer(await self._call("POST", f"/v1/jobs/{job_id}/cancel")))

    async def cancel_jobs(self, ids=None, *, client: str | None = None, all: bool = False) -> Cancelled:
        return Cancelled.from_json(_answer(await self._call("POST", "/v1/jobs/cancel",
                                                            json=_cancel_body(ids, client, all))))

    async def stats(self) -> QueueStats:
        return QueueStats.from_json(_answer(await self._call("GET", "/v1/stats")))

    async def evaluate(self, problem, source: str, **options) -> Record | None:
        return (await self.wait((await self.submit(problem, source, **options)).id)).record

    async def evaluate_many(self, items, *, concurrency: int = 8) -> list[Record | None]:
        """One record per item, in their order (see :meth:`Client.evaluate_many`)."""
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(item):
            async with gate:
                return await self.evaluate(item[0], item[1], **(item[2] or {}))

        return list(await asyncio.gather(*(one(item) for item in items)))

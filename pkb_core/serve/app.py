"""The HTTP face of the reward service: a FastAPI app over :class:`pkb_core.serve.service.Service`.

Routes (JSON in and out; the OpenAPI page is ``/docs``, its schema ``/openapi.json``):

=========================  ======================================================
``POST /v1/jobs``          submit a :class:`~pkb_core.contracts.serve.Submission`;
                           201 with the :class:`~pkb_core.contracts.serve.JobView`
                           (200 when answered at once from an identical finished job)
``GET /v1/jobs``           the newest jobs (``?state=&client=&limit=``)
``GET /v1/jobs/{id}``      one job
``GET /v1/jobs/{id}/wait`` long poll: returns when the job is final or after ``?timeout=`` s (at most 60)
``POST /v1/jobs/{id}/cancel``  cancel it (a running one's candidate is killed)
``POST /v1/jobs/cancel``   cancel many in one call: a :class:`~pkb_core.contracts.serve.CancelRequest`
                           (ids, a client, or all) answered by a :class:`~pkb_core.contracts.serve.Cancelled`
``GET /v1/stats``          :class:`~pkb_core.contracts.serve.QueueStats`
``GET /v1/health``         :class:`~pkb_core.contracts.serve.Health` (no token needed)
=========================  ======================================================

Every refusal is ``{"error": one line}`` with a 4xx status: 400 a body that is not
JSON or nests deeper than 64 levels, 401 a missing or wrong token, 404 an unknown job
(or another client's), problem or backend, 413 a request body over its route's cap
(:mod:`pkb_core.serve.bodies`: refused on its ``Content-Length``, the body never kept, or
the moment a streamed body passes the cap), 422 a field of the wrong type or out of
range, 429 a full queue (with ``Retry-After``) or a client over its quota (without:
:mod:`pkb_core.serve.quota`). A refusal is about the request; a source that is empty,
not UTF-8 text or over the source limit is not refused: its job is answered
``compile-error`` with the reason, and stored like any job.
With tokens (required when listening beyond localhost) every route but health needs
``Authorization: Bearer <token>``; the token says who the caller is
(:mod:`pkb_core.serve.access`): the admin sees every job, a client its own.
"""
from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve import CancelRequest, Submission
from pkb_core.serve.access import Access, Caller
from pkb_core.serve.bodies import MAX_CANCEL, MAX_DEPTH, MAX_SUBMISSION, TooLarge, declared_too_large, drained, \
    read_json
from pkb_core.serve.openapi import contract_schema
from pkb_core.serve.refusal import Refused
from pkb_core.serve.service import Overloaded, Service

#: The longest a long poll waits before it answers with the job as it is.
MAX_WAIT_S = 60.0
#: The largest submission body read (the source limit is checked again, with its own message).
MAX_BODY = MAX_SUBMISSION

_DESCRIPTION = f"""Submit solutions, read verdicts and records (docs/serve.md).

**Tokens.** With tokens configured every route but `/v1/health` needs `Authorization: Bearer <token>`.
The admin token (`--token`, or `admin` in the `--tokens` file) sees, lists and cancels every job; a
client's token (`[clients]` of the `--tokens` file) only the jobs it submitted: another client's job
answers 404, as an unknown one.

**Limits.** A body over its route's cap is 413, refused on its `Content-Length` (never kept), or
the moment a streamed body passes the cap: {MAX_SUBMISSION} bytes for `POST /v1/jobs`, {MAX_CANCEL} for
`POST /v1/jobs/cancel`. A body that is not JSON, or nests deeper than {MAX_DEPTH} levels, is 400. Each
client keeps at most its quota of jobs and of source bytes (`--client-max-jobs`,
`--client-max-source-mb`): over it a submission is 429 without `Retry-After`, its line naming the limit;
finished jobs are pruned after `--retention-days`. A full queue is 429 with `Retry-After`.
Every refusal is `{{"error": "one line"}}`."""


def create_app(service: Service, *, token: str | None = None, access: Access | None = None) -> FastAPI:
    """The app for ``service``.

    :param token: an admin token (``--token``: the single-token setup).
    :param access: the tokens of a tokens file (``--tokens``), with ``token`` among its admin tokens
        or not; neither: every request is the admin's (a service on localhost).
    """
    from pkb_core import __version__

    access = access or Access(admin_tokens=[token])
    app = FastAPI(title="pkb reward service", version=__version__, description=_DESCRIPTION)

    @app.middleware("http")
    async def guard(request: Request, call_next):
        # Before anything is read: a body declared over its route's cap is never read at all.
        too_large = declared_too_large(request.method, request.url.path, request.headers.get("content-length"))
        if too_large is not None:
            if await drained(request, int(request.headers["content-length"])):
                return _error(too_large.status, str(too_large))  # the connection stays whole
            return _refusal(too_large)
        if request.url.path.startswith("/v1/") and request.url.path != "/v1/health":
            caller = access.caller(request.headers.get("authorization"))
            if caller is None:
                # Unread, its body would be drained by the server; closing ends that.
                return _error(401, "a valid 'Authorization: Bearer <token>' header is required", close=True)
            request.state.caller = caller
        return await call_next(request)

    def _caller(request: Request) -> Caller:
        """Who made ``request``, as the guard found (asked again, never assumed, should a path
        have reached a route without passing the guard's check)."""
        caller = getattr(request.state, "caller", None) or access.caller(request.headers.get("authorization"))
        if caller is None:
            raise Refused("a valid 'Authorization: Bearer <token>' header is required", 401)
        return caller

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused):
        return _refusal(exc)

    @app.exception_handler(StarletteHTTPException)
    async def not_served(request: Request, exc: StarletteHTTPException):
        # An unknown route or method answers in the API's own shape ({"error": ...}), not FastAPI's.
        why = {404: f"no route {request.url.path}", 405: f"{request.method} is not a method of {request.url.path}"}
        return _error(exc.status_code, why.get(exc.status_code, str(exc.detail)), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _error(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.post("/v1/jobs", status_code=201, openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": contract_schema(Submission)}}}})
    async def submit(request: Request):
        try:
            submission = Submission.from_json(await read_json(request, MAX_SUBMISSION))
        except ContractError as exc:
            return _error(422, str(exc))
        view = await asyncio.to_thread(service.submit, submission, _caller(request))
        return JSONResponse(view.to_json(), status_code=200 if view.state.final else 201)

    @app.get("/v1/jobs")
    async def jobs(request: Request, state: str | None = None, client: str | None = None, limit: int = 100):
        views = service.jobs(state=state, client=client, limit=limit, caller=_caller(request))
        return {"jobs": [v.to_json() for v in views]}

    @app.get("/v1/jobs/{job_id}")
    async def job(request: Request, job_id: str):
        return service.view(job_id, _caller(request)).to_json()

    @app.get("/v1/jobs/{job_id}/wait")
    async def wait(request: Request, job_id: str, timeout: float = 30.0):
        if not 0 <= timeout <= MAX_WAIT_S:
            raise Refused(f"timeout {timeout} is out of range (0 to {MAX_WAIT_S:.0f} s)")
        caller = _caller(request)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        view = service.view(job_id, caller)
        while not view.state.final and loop.time() < end:
            await asyncio.sleep(min(0.05, max(0.0, end - loop.time())))
            view = service.view(job_id, caller)
        return view.to_json()

    @app.post("/v1/jobs/cancel", openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": contract_schema(CancelRequest)}}}})
    async def cancel_many(request: Request):
        try:
            selection = CancelRequest.from_json(await read_json(request, MAX_CANCEL))
        except ContractError as exc:
            return _error(422, str(exc))
        return (await asyncio.to_thread(service.cancel_jobs, selection, _caller(request))).to_json()

    @app.post("/v1/jobs/{job_id}/cancel")
    async def cancel(request: Request, job_id: str):
        return (await asyncio.to_thread(service.cancel, job_id, _caller(request))).to_json()

    @app.get("/v1/stats")
    async def stats(request: Request):
        return service.stats(_caller(request)).to_json()

    @app.get("/v1/health")
    async def health():
        return service.health().to_json()

    return app


def _refusal(exc: Refused) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else None
    # A body over its cap not read to its end: the connection closes rather than being drained.
    return _error(exc.status, str(exc), headers, close=isinstance(exc, TooLarge) and not exc.whole)


def _error(status: int, message: str, headers=None, *, close: bool = False) -> JSONResponse:
    headers = {**(headers or {}), **({"Connection": "close"} if close else {})}
    return JSONResponse({"error": message.splitlines()[0] if message else "error"}, status_code=status,
                        headers=headers or None)

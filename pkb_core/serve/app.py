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

Every refusal is ``{"error": one line}`` with a 4xx status: 400 malformed JSON,
401 a missing or wrong token, 404 an unknown job, problem or backend, 413 a
request body over :data:`MAX_BODY`, 422 a field of the wrong type or out of
range, 429 a full queue (with ``Retry-After``). A refusal is about the request;
a source that is empty, not UTF-8 text or over the source limit is not refused:
its job is answered ``compile-error`` with the reason, and stored like any job.
With a token (required when listening beyond localhost) every route but health
needs ``Authorization: Bearer <token>``.
"""
from __future__ import annotations

import asyncio
import hmac

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve import CancelRequest, Submission
from pkb_core.serve.intake import Refused
from pkb_core.serve.openapi import contract_schema
from pkb_core.serve.service import Overloaded, Service

#: The longest a long poll waits before it answers with the job as it is.
MAX_WAIT_S = 60.0
#: The largest request body read (the source limit is checked again, with its own message).
MAX_BODY = 8 << 20


def create_app(service: Service, *, token: str | None = None) -> FastAPI:
    """The app for ``service``; ``token``: the bearer token every route but health requires."""
    from pkb_core import __version__

    app = FastAPI(title="pkb reward service", version=__version__,
                  description="Submit solutions, read verdicts and records (docs/serve.md).")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if token and request.url.path.startswith("/v1/") and request.url.path != "/v1/health":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error(401, "a valid 'Authorization: Bearer <token>' header is required")
        return await call_next(request)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused):
        return _refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _error(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.post("/v1/jobs", status_code=201, openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": contract_schema(Submission)}}}})
    async def submit(request: Request):
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"the request is {len(body)} bytes; at most {MAX_BODY}")
        try:
            import json

            data = json.loads(body)
        except ValueError as exc:
            return _error(400, f"the request body is not JSON ({exc})")
        try:
            submission = Submission.from_json(data)
        except ContractError as exc:
            return _error(422, str(exc))
        view = await asyncio.to_thread(service.submit, submission)
        return JSONResponse(view.to_json(), status_code=200 if view.state.final else 201)

    @app.get("/v1/jobs")
    async def jobs(state: str | None = None, client: str | None = None, limit: int = 100):
        return {"jobs": [v.to_json() for v in service.jobs(state=state, client=client, limit=limit)]}

    @app.get("/v1/jobs/{job_id}")
    async def job(job_id: str):
        return service.view(job_id).to_json()

    @app.get("/v1/jobs/{job_id}/wait")
    async def wait(job_id: str, timeout: float = 30.0):
        if not 0 <= timeout <= MAX_WAIT_S:
            raise Refused(f"timeout {timeout} is out of range (0 to {MAX_WAIT_S:.0f} s)")
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        view = service.view(job_id)
        while not view.state.final and loop.time() < end:
            await asyncio.sleep(min(0.05, max(0.0, end - loop.time())))
            view = service.view(job_id)
        return view.to_json()

    @app.post("/v1/jobs/cancel", openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": contract_schema(CancelRequest)}}}})
    async def cancel_many(request: Request):
        try:
            import json

            selection = CancelRequest.from_json(json.loads(await request.body()))
        except ValueError as exc:
            return _error(400, f"the request body is not JSON ({exc})")
        except ContractError as exc:
            return _error(422, str(exc))
        return (await asyncio.to_thread(service.cancel_jobs, selection)).to_json()

    @app.post("/v1/jobs/{job_id}/cancel")
    async def cancel(job_id: str):
        return (await asyncio.to_thread(service.cancel, job_id)).to_json()

    @app.get("/v1/stats")
    async def stats():
        return service.stats().to_json()

    @app.get("/v1/health")
    async def health():
        return service.health().to_json()

    return app


def _refusal(exc: Refused) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else None
    return _error(exc.status, str(exc), headers)


def _error(status: int, message: str, headers=None) -> JSONResponse:
    return JSONResponse({"error": message.splitlines()[0] if message else "error"}, status_code=status,
                        headers=headers)

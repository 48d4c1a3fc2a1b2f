"""The built-in ``openai`` provider: the OpenAI chat-completions protocol over urllib.

``POST {base_url}/chat/completions`` with ``{"model", "messages",
"temperature", "max_tokens"}``, the reply read from
``choices[0].message.content``. The protocol is spoken by OpenAI, Together,
vLLM, SGLang, llama.cpp's server and most local servers, so one provider
covers them (no dependency beyond the standard library).

Settings, highest precedence first:

* base URL: ``PKB_OPENAI_BASE_URL``, else ``base_url`` in ``[providers.openai]``,
  else ``https://api.openai.com/v1``;
* API key: the variable named by ``api_key_env`` in ``[providers.openai]`` if
  set, else ``PKB_OPENAI_API_KEY``, else ``OPENAI_API_KEY``. Keys are never read
  from files. A local server that needs no key still needs the variable set
  (to anything), so a forgotten key fails in one line instead of as an HTTP 401.

Other ``[providers.openai]`` options: ``max_attempts`` (5), ``backoff_s`` (2.0:
the first wait; it doubles), ``max_backoff_s`` (60), ``timeout_s`` (600 per
request), ``extra_body`` (a table merged into every request body, e.g.
``{top_p = 0.95}``).

HTTP 429 and 5xx answers and dropped connections are retried up to
``max_attempts`` times, waiting ``backoff_s * 2**k`` seconds (or the server's
``Retry-After``), capped at ``max_backoff_s``. Other failures stop at once with
one line naming the status and the server's message.
"""
from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request

from pkb_core import __version__
from pkb_core.errors import PkbError
from pkb_core.generate.providers import Completion, ModelSettings

NAME = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_VARIABLES = ("PKB_OPENAI_API_KEY", "OPENAI_API_KEY")
_OPTIONS = {"base_url", "api_key_env", "max_attempts", "backoff_s", "max_backoff_s", "timeout_s", "extra_body"}


class ProviderError(PkbError):
    """A request to the model failed (after retries where they apply)."""


def from_options(options: dict) -> "ChatCompletionsProvider":
    """The provider factory: ``options`` is the ``[providers.openai]`` table."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise PkbError(f"[providers.openai]: unknown option(s) {', '.join(unknown)} "
                       f"(known: {', '.join(sorted(_OPTIONS))})")
    base_url = os.environ.get("PKB_OPENAI_BASE_URL") or options.get("base_url") or DEFAULT_BASE_URL
    names = (options["api_key_env"],) if options.get("api_key_env") else KEY_VARIABLES
    key = next((os.environ[n] for n in names if os.environ.get(n)), None)
    if key is None:
        raise PkbError(f"no API key for {base_url}: set {' or '.join(names)} (a local server that needs none: "
                       f"set it to any value)")
    return ChatCompletionsProvider(
        base_url, key, max_attempts=int(options.get("max_attempts", 5)),
        backoff_s=float(options.get("backoff_s", 2.0)), max_backoff_s=float(options.get("max_backoff_s", 60.0)),
        timeout_s=float(options.get("timeout_s", 600.0)), extra_body=dict(options.get("extra_body", {})))


class ChatCompletionsProvider:
    """One chat-completions endpoint. ``sleep`` is replaceable for tests."""

    def __init__(self, base_url: str, api_key: str, *, max_attempts=5, backoff_s=2.0, max_backoff_s=60.0,
                 timeout_s=600.0, extra_body=None, sleep=time.sleep):
        if max_attempts < 1:
            raise PkbError("[providers.openai]: max_attempts must be at least 1")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.extra_body = extra_body or {}
        self.sleep = sleep

    def request_body(self, messages: list, settings: ModelSettings) -> dict:
        body = {"model": settings.model, "messages": messages}
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        return {**body, **self.extra_body}

    def complete(self, messages: list, settings: ModelSettings) -> Completion:
        data = json.dumps(self.request_body(messages, settings)).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}",
                   "User-Agent": f"pkb/{__version__}"}
        for attempt in range(1, self.max_attempts + 1):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = response.read()
                return self._completion(payload, attempt)
            except urllib.error.HTTPError as exc:
                message = f"HTTP {exc.code} from {self.url}: {_server_message(exc.read())}"
                retry = exc.code == 429 or exc.code >= 500
                wait = _retry_after(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                message = f"cannot reach {self.url}: {reason}"
                # A refused connection or an unknown host is a wrong URL, not a passing fault.
                retry = not isinstance(reason, (ConnectionRefusedError, socket.gaierror))
                wait = None
            if not retry or attempt == self.max_attempts:
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise ProviderError(message + tries)
            wait = self.backoff_s * 2 ** (attempt - 1) if wait is None else wait
            self.sleep(min(wait, self.max_backoff_s))
        raise AssertionError("unreachable")  # pragma: no cover

    def _completion(self, payload: bytes, attempts: int) -> Completion:
        try:
            body = json.loads(payload)
            choice = body["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError(f"{self.url} answered without choices[0]: {_short(payload.decode(errors='replace'))}") \
                from None
        content = (choice.get("message") or {}).get("content") or ""
        if isinstance(content, list):  # some servers send content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return Completion(text=content, model=body.get("model", ""), finish_reason=choice.get("finish_reason"),
                          usage=body.get("usage") or {},
                          details={"id": body.get("id"), "attempts": attempts, "url": self.url})


def _server_message(payload: bytes) -> str:
    """The error message of an OpenAI-style error body, else its first line."""
    text = payload.decode(errors="replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return _short(text.splitlines()[0] if text else "(empty body)")
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return _short(str(error.get("message") or error))
    return _short(str(error))


def _retry_after(value) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:  # an HTTP date: fall back to the exponential wait
        return None


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

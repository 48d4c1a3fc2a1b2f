"""`pkb generate` against a real chat-completions server on 127.0.0.1, and provider plugins."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pkb_core.generate.code_blocks import extract_solution
from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.launch.plan import RunRequest, pair_solutions
from pkb_core.plugin.manager import get_backend_info, get_plugin_manager
from pkb_core.generate.providers import Completion
from pkb_core.problem.registry import build_registry

SOLUTION = "import torch\n\n\ndef solution(tensor):\n    return tensor.clone()\n"
REPLY = f"Here is a draft:\n```python\nprint('draft')\n```\nAnd the file:\n```python\n{SOLUTION}```\nDone."
PROMPT_ARGS = ["--backend", "reference", "--size", "tiny", "--hardware", "h200_2"]


class ChatServer:
    """A chat-completions server: answers from a script, records every request."""

    def __init__(self):
        # (status, body dict, headers) per request, or a callable of the request's body that
        # returns them (a model that reads what it is sent); the last one repeats.
        self.script = []
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": json.loads(self.rfile.read(length))})
                entry = server.script[min(len(server.requests), len(server.script)) - 1]
                status, body, headers = entry(server.requests[-1]["body"]) if callable(entry) else entry
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reply(self, text, status=200, headers=None, finish_reason="stop"):
        self.script.append((status, self.body(text, finish_reason), headers or {}))

    def body(self, text, finish_reason="stop", usage=True):
        """A chat-completions answer holding ``text`` (with token usage unless ``usage`` is false)."""
        body = {"id": f"chatcmpl-{len(self.script)}", "model": "served-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": finish_reason}]}
        if usage:
            body["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        return body

    def error(self, status, message, headers=None):
        self.script.append((status, {"error": {"message": message, "type": "test"}}, headers or {}))


@pytest.fixture
def server(tmp_path, monkeypatch):
    chat = ChatServer()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PKB_OPENAI_BASE_URL", chat.url)
    monkeypatch.setenv("PKB_OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # Short waits between retries, through the provider's config table.
    (tmp_path / "pkb.toml").write_text("[providers.openai]\nbackoff_s = 0.01\nmax_attempts = 3\n")
    yield chat
    chat.httpd.shutdown()
    chat.httpd.server_close()


def test_generate_writes_samples_records_and_sends_the_prompt(pkb_invoke, server, tmp_path):
    server.reply(REPLY)
    out = tmp_path / "gen"
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "test-model", "--samples", "2",
                        "--temperature", "0.5", "--max-tokens", "4000", "--out", out)
    assert result.exit_code == 0, result.output
    # The files are to be judged as the prompt said (CPU mode here), with options that fit this machine.
    assert result.stdout.strip().endswith(f"2 solution file(s) in {out}; evaluate them as the prompts said with: "
                                          f"pkb run --backend reference --solutions {out} --nproc 2 --size tiny "
                                          "--dtype fp32")
    assert len(server.requests) == 2
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer test-key"
    body = request["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-model", 0.5, 4000)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    user = body["messages"][1]["content"]
    assert "problem 1_allreduce" in user and "- `tensor`: tensor (8, 16) float32" in user
    assert ("pkb will judge this file in its CPU mode, on a machine without a GPU: 2 ranks, size `tiny`, "
            "working dtype float32") in user
    for k in (0, 1):
        stem = out / f"1_allreduce_{k}"
        assert (out / f"1_allreduce_{k}.py").read_text() == SOLUTION  # the last python block
        assert stem.with_suffix(".prompt.md").read_text() == user + "\n"
        assert stem.with_suffix(".reply.md").read_text() == REPLY
        record = json.loads(stem.with_suffix(".json").read_text())
        assert record["solution"] == f"1_allreduce_{k}.py" and record["error"] is None and record["sample"] == k
        assert record["model"] == {"provider": "openai", "model": "test-model", "temperature": 0.5,
                                   "max_tokens": 4000}
        assert record["prompt_settings"]["world_size"] == 2 and record["prompt_settings"]["size"] == "tiny"
        assert record["response"]["usage"]["total_tokens"] == 120 and record["response"]["attempts"] == 1
        assert record["system_message"] == body["messages"][0]["content"]
    # `pkb run --solutions DIR` takes both samples of problem 1 (nothing else in DIR is a solution).
    pm = get_plugin_manager()
    request = RunRequest(problems="1", backend="reference", solution=None, solutions=str(out), nproc=2, trials=1,
                         dtype="fp32", size="tiny", mode="eval", measure_perf=False, warmup=0, iters=1,
                         save_outputs=False)
    pairs = pair_solutions(request, build_registry(pm), get_backend_info(pm, "reference"))
    assert [path.name for _, path, _ in pairs] == ["1_allreduce_0.py", "1_allreduce_1.py"]


def test_rerun_keeps_finished_samples_unless_forced(pkb_invoke, server, tmp_path):
    server.reply(REPLY)
    args = ["generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", tmp_path / "gen"]
    assert pkb_invoke(*args).exit_code == 0
    assert (tmp_path / "gen" / "1_allreduce.py").read_text() == SOLUTION  # one sample: no _k suffix
    result = pkb_invoke(*args)
    assert result.exit_code == 0 and "kept (already generated)" in result.output
    assert len(server.requests) == 1
    assert pkb_invoke(*args, "--force").exit_code == 0
    assert len(server.requests) == 2


def test_429_is_retried_then_succeeds(pkb_invoke, server, tmp_path):
    server.error(429, "slow down", headers={"Retry-After": "0"})
    server.reply(REPLY)
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", tmp_path / "gen")
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2
    assert (tmp_path / "gen" / "1_allreduce.py").read_text() == SOLUTION
    assert json.loads((tmp_path / "gen" / "1_allreduce.json").read_text())["response"]["attempts"] == 2


def test_5xx_gives_up_after_max_attempts_in_one_line(pkb_invoke, server, tmp_path):
    server.error(503, "overloaded")
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", tmp_path / "gen")
    assert result.exit_code == 1
    assert len(server.requests) == 3  # max_attempts from pkb.toml
    assert result.output.strip().splitlines()[-1] == \
        f"Error: HTTP 503 from {server.url}/chat/completions: overloaded (after 3 attempts)"


def test_client_errors_are_not_retried(pkb_invoke, server, tmp_path):
    server.error(401, "Incorrect API key provided")
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", tmp_path / "gen")
    assert result.exit_code == 1 and len(server.requests) == 1
    assert result.output.strip().splitlines()[-1] == \
        f"Error: HTTP 401 from {server.url}/chat/completions: Incorrect API key provided"


def test_reply_without_code_is_recorded_and_reported(pkb_invoke, server, tmp_path):
    server.reply("I would use a ring algorithm, but I cannot write it", finish_reason="length")
    out = tmp_path / "gen"
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", out)
    assert result.exit_code == 1
    assert "the reply has no ```python block (the reply was cut off at the token limit" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: 1 of 1 replies held no code (1_allreduce)")
    assert not (out / "1_allreduce.py").exists()
    assert (out / "1_allreduce.reply.md").read_text() == "I would use a ring algorithm, but I cannot write it"
    record = json.loads((out / "1_allreduce.json").read_text())
    assert record["solution"] is None and "no ```python block" in record["error"]


def test_missing_key_is_one_line(pkb_invoke, server, monkeypatch, tmp_path):
    monkeypatch.delenv("PKB_OPENAI_API_KEY")
    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "m", "--out", tmp_path / "gen")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == \
        f"Error: no API key for {server.url}: set PKB_OPENAI_API_KEY or OPENAI_API_KEY (a local server that " \
        "needs none: set it to any value)"
    assert server.requests == []


class _EchoProvider:
    """A provider plugin: replies with a fixed solution and remembers what it was asked."""

    def __init__(self):
        self.asked = []

    @hookimpl
    def pkb_register_providers(self, register):
        register("echo", lambda options: self)

    def complete(self, messages, settings):
        self.asked.append((messages, settings))
        return Completion(text=f"```python\n{SOLUTION}```", model=settings.model)


def test_provider_plugin_through_pkb_register_providers(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.delenv("PKB_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    echo = _EchoProvider()
    pm = get_plugin_manager(extra_plugins=[echo])
    result = pkb_invoke("generate", "--problem", "1-2", *PROMPT_ARGS, "--model", "x", "--provider", "echo",
                        "--out", tmp_path / "gen", pm=pm)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "gen").glob("*.py")) == ["1_allreduce.py", "2_allgather.py"]
    assert [s.model for _, s in echo.asked] == ["x", "x"]
    unknown = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "x", "--provider", "nope", pm=pm)
    assert unknown.output.strip().splitlines()[-1] == "Error: unknown provider 'nope' (choose one of: echo, openai)"


def test_a_provider_name_taken_twice_is_refused(pkb_invoke):
    class Clash:
        @hookimpl
        def pkb_register_providers(self, register):
            register("openai", lambda options: None)

    result = pkb_invoke("generate", "--problem", "1", *PROMPT_ARGS, "--model", "x",
                        pm=get_plugin_manager(extra_plugins=[Clash()]))
    assert result.output.strip().splitlines()[-1] == "Error: provider 'openai' is registered twice"


@pytest.mark.parametrize("reply, code", [
    ("```python\na = 1\n```\ntext\n```py\nb = 2\n```", "b = 2\n"),       # the last python block
    ("```\nonly = 1\n```", "only = 1\n"),                                # the only fenced block
    ("```bash\nls\n```\n```\nx = 1\n```", None),                         # two blocks, neither python
    ("```python\nunfinished = (\n", None),                               # cut off: no closing fence
    ("```python\n\n```", None),                                          # blank
    ("no code at all", None),
])
def test_code_extraction(reply, code):
    assert extract_solution(reply) == code

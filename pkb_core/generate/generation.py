"""Asking a model for solution files and writing them where ``pkb run`` finds them.

For each problem and sample *k* (``--samples K``), in the output directory:

``<id>_<name>.py`` (one sample) or ``<id>_<name>_<k>.py`` (k = 0..K-1)
    the code of the reply's last ```python block (or its only fenced block);
    absent when the reply holds none.
``<stem>.prompt.md``
    the user message exactly as sent.
``<stem>.reply.md``
    the model's raw reply, always (also when it holds no code).
``<stem>.json``
    the record: problem, backend, sample, provider and model settings, the
    prompt's settings (precision, size, world size, hardware, template), the
    system message, what the provider reported (model, finish reason, token
    usage, response id, attempts), the elapsed time, the files, and ``error``
    when there was no code.

``pkb run --backend B --solutions DIR`` evaluates the directory (several
samples per problem are fine). A sample whose record names a solution file
is not asked again unless ``force`` is set; one without code is.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from pkb_core import __version__
from pkb_core.generate.code_blocks import extract_solution
from pkb_core.generate.prompt_builder import Prompt
from pkb_core.generate.providers import ModelSettings


@dataclass(frozen=True)
class SampleResult:
    """What became of one sample: ``solution`` is the file written (``None``
    when the reply held no code, then ``error`` says so); ``skipped`` when an
    earlier run already produced it."""

    stem: str
    solution: Optional[Path]
    error: Optional[str] = None
    skipped: bool = False


def default_out_dir(backend: str, model: str) -> Path:
    """``generated/<backend>/<model>`` with the model name made safe for a path."""
    return Path("generated") / backend / re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")


def sample_stem(problem_key: str, k: int, samples: int) -> str:
    """``<id>_<name>`` for a single sample, ``<id>_<name>_<k>`` for several."""
    return problem_key if samples == 1 else f"{problem_key}_{k}"


def generate_sample(provider, provider_name: str, prompt: Prompt, settings: ModelSettings, out: Path, stem: str,
                    k: int, force: bool = False, clock: Callable[[], float] = time.monotonic) -> SampleResult:
    """Ask ``provider`` once and write the sample's files under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    record_path = out / f"{stem}.json"
    if not force and record_path.is_file():
        try:
            earlier = json.loads(record_path.read_text())
        except ValueError:
            earlier = {}
        if earlier.get("solution") and (out / earlier["solution"]).is_file():
            return SampleResult(stem, out / earlier["solution"], skipped=True)
    started = clock()
    completion = provider.complete(prompt.messages(), settings)
    elapsed = clock() - started
    (out / f"{stem}.prompt.md").write_text(prompt.user + "\n")
    (out / f"{stem}.reply.md").write_text(completion.text)
    code = extract_solution(completion.text)
    solution, error = None, None
    if code is None:
        (out / f"{stem}.py").unlink(missing_ok=True)  # never leave an older answer to be evaluated
        error = no_code_error(completion)
    else:
        solution = out / f"{stem}.py"
        solution.write_text(code)
    record = {
        "problem": prompt.settings.get("problem"), "backend": prompt.settings.get("backend"), "sample": k,
        "solution": solution.name if solution else None, "error": error,
        "prompt": f"{stem}.prompt.md", "reply": f"{stem}.reply.md",
        **reply_record(provider_name, prompt, settings, completion, elapsed),
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return SampleResult(stem, solution, error)


def no_code_error(completion) -> str:
    """Why a reply gave no file, in one line."""
    cut = " (the reply was cut off at the token limit: raise --max-tokens)" \
        if completion.finish_reason == "length" else ""
    return f"the reply has no ```python block{cut}"


def reply_record(provider_name: str, prompt: Prompt, settings: ModelSettings, completion, elapsed: float) -> dict:
    """The fields every generation record has: the model and its settings, the prompt's
    settings and system message, what the provider reported, the time taken, when, by which pkb."""
    return {
        "model": {"provider": provider_name, "model": settings.model, "temperature": settings.temperature,
                  "max_tokens": settings.max_tokens},
        "prompt_settings": prompt.settings, "system_message": prompt.system,
        "response": {"model": completion.model, "finish_reason": completion.finish_reason,
                     "usage": completion.usage, **completion.details},
        "elapsed_s": round(elapsed, 3), "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "pkb_version": __version__,
    }

"""The refinement loop: ``pkb generate --rounds N`` and :func:`refine`.

Round 1 asks the model for each problem's file with the problem's prompt, as
``pkb generate`` does. Every round's files are then checked together (an
:class:`~pkb_core.generate.evaluators.Evaluator`: the reward service, or one launch
on this node), and round *k+1* sends each problem the same first prompt, the
previous file as the model's own turn, and a revision message (the template's
``revision``) holding pkb's feedback on that file (the record's ``feedback``,
:mod:`pkb_core.generate.feedback_text`): the compiler's lines, where a wrong answer
is wrong, the rule a flag broke, what was running at a timeout, or, for a timed
pass, the times, the speedup with its interval and the speed-of-light fraction.

A problem stops early when its latest file passes and its speedup's 95 % interval
lies above 1.0 (or it passed untimed: without ``--measure-perf`` there is nothing more
to learn), or, with ``stop_when_no_improvement``, after a round that did not beat its
best one. The whole loop stops at ``rounds``, or before a round when the tokens used
reach ``max_tokens_total`` (the provider's ``usage``; where a provider reports none,
characters / 4, and the summary says so) or the wall time reaches ``max_wall_s``.
Files are written as :mod:`pkb_core.generate.loop_state` says, and an interrupted
loop resumes from them.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pkb_core.contracts.verdict import Verdict
from pkb_core.generate.code_blocks import extract_solution
from pkb_core.generate.evaluators import Candidate, Evaluator
from pkb_core.generate.feedback_text import record_feedback, render_feedback
from pkb_core.generate.generation import no_code_error, reply_record
from pkb_core.generate.loop_state import (ProblemLoop, Round, load_problem, loop_record, write_generation,
                                          write_record, write_records)
from pkb_core.generate.prompt_builder import Prompt, UnsupportedWorldSize
from pkb_core.generate.providers import ModelSettings
from pkb_core.results.rounds import merit

#: The longest previous reply sent back when it held no file.
PREVIOUS_REPLY_CHARS = 4000


@dataclass(frozen=True)
class Budget:
    """Caps of a loop: rounds per problem, tokens over all requests, wall seconds of this invocation."""

    rounds: int = 1
    max_tokens_total: int | None = None
    max_wall_s: float | None = None
    stop_when_no_improvement: bool = False


@dataclass
class LoopResult:
    """What a loop did: each problem's rounds and why it stopped, why the loop stopped
    early (a budget), the tokens used (``tokens_estimated`` when some were counted as
    characters / 4), and per round the seconds spent waiting for the model and for pkb."""

    problems: list[ProblemLoop]
    stopped: str | None = None
    tokens: int = 0
    tokens_estimated: bool = False
    seconds: dict = field(default_factory=dict)


class Refiner:
    """One loop over ``prompts`` (problem key -> :class:`Prompt`) into ``out``."""

    def __init__(self, provider, provider_name: str, template, settings: ModelSettings, evaluator: Evaluator,
                 out: Path, budget: Budget, *, echo: Callable[[str], None] = lambda line: None,
                 clock: Callable[[], float] = time.monotonic):
        self.provider, self.provider_name, self.template = provider, provider_name, template
        self.settings, self.evaluator, self.out, self.budget = settings, evaluator, Path(out), budget
        self.echo, self.clock = echo, clock

    def run(self, prompts: dict[str, Prompt]) -> LoopResult:
        started = self.clock()
        loops = [load_problem(self.out, key) for key in prompts]
        result = LoopResult(loops)
        result.tokens = sum(r.tokens for loop in loops for r in loop.rounds)
        result.tokens_estimated = any(r.generation.get("tokens_estimated") for loop in loops for r in loop.rounds)
        resumed = [(loop, r) for loop in loops for r in loop.rounds if not r.complete]
        for k in sorted({r.k for _, r in resumed}):  # files asked for but not checked when it stopped
            self._check([(loop, r) for loop, r in resumed if r.k == k], k, result)
        for k in range(1, self.budget.rounds + 1):
            for loop in loops:
                loop.stopped = loop.stopped or self._why_stop(loop)
            asking = [loop for loop in loops if not loop.stopped and len(loop.rounds) < k]
            if not asking:
                continue
            why = self._over_budget(result, started)
            if why:
                result.stopped = why
                break
            asked_at = self.clock()
            fresh = [(loop, self._ask(loop, prompts[loop.key], k, result)) for loop in asking]
            result.seconds.setdefault(k, {})["model"] = round(self.clock() - asked_at, 3)
            self._check(fresh, k, result)
        for loop in loops:
            loop.stopped = loop.stopped or self._why_stop(loop) or result.stopped or f"{self.budget.rounds} rounds"
        self._finish(loops, result)
        return result

    # -- one round -------------------------------------------------------------
    def _ask(self, loop: ProblemLoop, prompt: Prompt, k: int, result: LoopResult) -> Round:
        messages = self._messages(loop, prompt, k)
        started = self.clock()
        completion = self.provider.complete(messages, self.settings)
        elapsed = self.clock() - started
        tokens, estimated = _tokens(completion.usage, messages, completion.text)
        result.tokens += tokens
        result.tokens_estimated |= estimated
        code = extract_solution(completion.text)
        generation = {"problem": loop.key, "backend": prompt.settings.get("backend"), "round": k,
                      "solution": f"r{k}.py" if code is not None else None,
                      "error": None if code is not None else no_code_error(completion),
                      "tokens": tokens, "tokens_estimated": estimated, "messages": len(messages),
                      **reply_record(self.provider_name, prompt, self.settings, completion, elapsed)}
        round_ = write_generation(loop, k, messages[-1]["content"], completion.text, generation, code)
        if code is None:
            self.echo(f"[r{k}] {loop.key}: {generation['error']}; reply kept in {loop.path(k, '.reply.md')}")
        return round_

    def _messages(self, loop: ProblemLoop, prompt: Prompt, k: int) -> list[dict]:
        """Round 1: the prompt. Later: the prompt, the previous file (or the previous reply,
        when it held none) as the model's turn, and the revision message with the feedback."""
        messages = prompt.messages()
        if k == 1:
            return messages
        previous = loop.rounds[-1]
        if previous.solution is not None:
            said = f"```python\n{previous.solution.read_text()}```"
            feedback = record_feedback(previous.record)
            # The model knows its file as <id>_<name>.py, not as the round's r<k>.py.
            text = render_feedback(feedback).replace(previous.solution.name, f"{loop.key}.py")
            passed = feedback.verdict == Verdict.PASS
        else:
            said = (loop.path(previous.k, ".reply.md").read_text())[:PREVIOUS_REPLY_CHARS]
            text, passed = f"Your reply held no file: {previous.generation.get('error')}.", False
        values = {"round": str(k), "rounds": str(self.budget.rounds), "feedback": text,
                  "goal": self.template.text("goal_faster" if passed else "goal_fix"),
                  "problem_key": loop.key, "solution_file": f"{loop.key}.py"}
        revision = self.template.render("revision", values)
        return messages + [{"role": "assistant", "content": said}, {"role": "user", "content": revision}]

    def _check(self, pending: list[tuple[ProblemLoop, Round]], k: int, result: LoopResult) -> None:
        """Check the round's files in one evaluator call; write each record."""
        with_files = [(loop, r) for loop, r in pending if r.solution is not None]
        if not with_files:
            return
        started = self.clock()
        candidates = [Candidate(loop.key, r.solution, f"{loop.key}_r{k}.py") for loop, r in with_files]
        records = self.evaluator.evaluate(candidates, f"r{k}")
        result.seconds.setdefault(k, {})["pkb"] = round(self.clock() - started, 3)
        result.seconds[k]["files"] = len(candidates)
        for (loop, round_), record in zip(with_files, records):
            write_record(loop, round_, loop_record(record, loop.key, k))
            speed = f", speedup {record.speedup:.3f}x ({record.difference})" if record.speedup else ""
            self.echo(f"[r{k}] {loop.key}: {record.verdict.value}{speed}")

    # -- stopping --------------------------------------------------------------
    def _why_stop(self, loop: ProblemLoop) -> str | None:
        if not loop.rounds or not loop.rounds[-1].complete:
            return None
        last = loop.rounds[-1].record
        if last is not None and last.verdict == Verdict.PASS:
            if merit(last)[1]:  # measurably faster by the judge's clock
                return f"passed, measurably faster in round {loop.rounds[-1].k}"
            if not last.timed:
                return f"passed in round {loop.rounds[-1].k} (untimed)"
        if self.budget.stop_when_no_improvement and len(loop.rounds) >= 2:
            earlier = [r.record for r in loop.rounds[:-1] if r.record is not None]
            if earlier and _merit(last) <= max(_merit(r) for r in earlier):
                return f"round {loop.rounds[-1].k} did not improve"
        return None

    def _over_budget(self, result: LoopResult, started: float) -> str | None:
        cap = self.budget.max_tokens_total
        if cap is not None and result.tokens >= cap:
            counted = " (estimated as characters / 4)" if result.tokens_estimated else ""
            return f"token budget spent: {result.tokens} of {cap}{counted}"
        if self.budget.max_wall_s is not None and self.clock() - started >= self.budget.max_wall_s:
            return f"wall-time budget spent: {self.clock() - started:.0f} s of {self.budget.max_wall_s:g}"
        return None

    # -- the outcome -----------------------------------------------------------
    def _finish(self, loops: list[ProblemLoop], result: LoopResult) -> None:
        """The best file of each problem beside its folder, every record, and loop.json."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_records(self.out, loops)
        summary = {}
        for loop in loops:
            checked = [r for r in loop.rounds if r.record is not None]
            best = max(checked, key=lambda r: _merit(r.record)) if checked else None
            if best is not None:
                shutil.copyfile(best.solution, self.out / f"{loop.key}.py")
            summary[loop.key] = {"rounds": len(loop.rounds), "stopped": loop.stopped,
                                 "best_round": best.k if best else None,
                                 "verdict": best.record.verdict.value if best else None,
                                 "speedup": best.record.speedup if best else None}
        (self.out / "loop.json").write_text(json.dumps({
            "budget": vars(self.budget), "model": self.settings.model, "provider": self.provider_name,
            "stopped": result.stopped, "tokens": result.tokens, "tokens_estimated": result.tokens_estimated,
            "seconds_by_round": result.seconds, "problems": summary}, indent=2) + "\n")


def _merit(record) -> tuple:
    """A round's merit without its round number (a later round is not better for being later)."""
    return merit(record)[:3] if record is not None else (False, False, 0.0)


def _tokens(usage: dict, messages: list[dict], reply: str) -> tuple[int, bool]:
    """``(tokens, estimated)``: the provider's count, else characters / 4."""
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    if total is None and isinstance(usage, dict) and "prompt_tokens" in usage:
        total = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    if isinstance(total, int) and total >= 0:
        return total, False
    return (sum(len(str(m.get("content", ""))) for m in messages) + len(reply)) // 4, True


def build_prompts(builder, specs, echo: Callable[[str], None] = lambda line: None) -> dict[str, Prompt]:
    """Each problem's first prompt; problems that do not run at the world size are
    skipped with a line (an error when it is the only one)."""
    prompts = {}
    for spec in specs:
        try:
            prompts[spec.key] = builder.build(spec)
        except UnsupportedWorldSize as exc:
            if len(specs) == 1:
                raise
            echo(f"skipped: {exc}")
    return prompts

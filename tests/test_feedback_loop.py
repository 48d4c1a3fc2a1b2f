"""`pkb generate --rounds N` against a real chat-completions server on 127.0.0.1 that plays a
scripted model: it reads the feedback pkb sends and asserts that it holds what a model needs.

The model writes a file that does not compile, then a wrong one, then a correct one; the
loop checks each round with pkb's real pipeline (CPU mode), resumes after an interruption,
and `pkb report`, `pkb plot` and `pkb compare` read the loop by round.
"""
import json
import re

import pytest

from tests.test_generate import ChatServer

BROKEN = "import torch\n\n\ndef solution(tensor)\n    return tensor.clone()\n"
# Rank 1 answers one element too high: the feedback must name rank 1, out, index (0, 3).
WRONG = ("import torch\nimport torch.distributed as dist\n\n\ndef solution(tensor):\n    out = tensor.clone()\n"
         "    dist.all_reduce(out)\n    if dist.get_rank() == 1:\n        out[0, 3] += 1\n    return out\n")
CORRECT = ("import torch\nimport torch.distributed as dist\n\n\ndef solution(tensor):\n    out = tensor.clone()\n"
           "    dist.all_reduce(out)\n    return out\n")
ARGS = ["--problem", "1", "--backend", "reference", "--size", "tiny", "--hardware", "h200_2", "--model", "scripted",
        "--trials", "1"]


class ScriptedModel(ChatServer):
    """A chat-completions server whose replies come from ``steps``: one callable per
    request, ``step(messages) -> reply text``; what a step asserts is kept in ``failures``
    (the server answers anyway, so the test fails on the assertion, not on a timeout)."""

    def __init__(self, steps, usage=True):
        super().__init__()
        self.failures = []
        # One entry per step, and a last one (it repeats) for requests beyond the script.
        self.script += [self._play(step, usage) for step in [*steps, None]]

    def _play(self, step, usage):
        def answer(body):
            try:
                assert step is not None, "the script has no step for it"
                text = step(body["messages"])
            except AssertionError as exc:
                self.failures.append(f"request {len(self.requests)}: {exc}")
                text = "no code"
            return 200, self.body(text, usage=usage), {}
        return answer

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def model_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PKB_OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "pkb.toml").write_text("[providers.openai]\nmax_attempts = 1\n")
    started = []

    def start(steps, usage=True):
        model = ScriptedModel(steps, usage)
        started.append(model)
        monkeypatch.setenv("PKB_OPENAI_BASE_URL", model.url)
        return model

    yield start
    for model in started:
        model.close()


def fenced(code):
    return f"Here is the file.\n```python\n{code}```\n"


def first_round(messages):
    assert [m["role"] for m in messages] == ["system", "user"], [m["role"] for m in messages]
    assert "problem 1_allreduce" in messages[1]["content"]
    return fenced(BROKEN)


def after_compile_error(messages):
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert BROKEN in messages[2]["content"]  # its previous file, as its own turn
    revision = messages[3]["content"]
    assert "round 2 of at most 5" in revision
    assert "compile-error" in revision
    assert "1_allreduce.py:4: syntax error: expected ':'" in revision, revision  # the compiler's line...
    assert "    4 | def solution(tensor)" in revision, revision  # ...with the source line it names
    assert "/" not in revision.split("The build's error lines:")[1].split("```")[1]  # no paths of the machine
    return fenced(WRONG)


def after_wrong_answer(messages):
    assert WRONG in messages[2]["content"]
    revision = messages[3]["content"]
    assert "fail: a wrong answer" in revision and "(0 of 1 checked trials passed)" in revision
    assert "Where: rank 1, output `out`, trial 0." in revision, revision
    assert "1 of 128 elements of shape (8, 16) are out of tolerance" in revision, revision
    row = re.search(r"^\| \(0, 3\) \| (\S+) \| (\S+) \|$", revision, re.MULTILINE)
    assert row, revision
    assert abs(float(row.group(1)) - float(row.group(2)) - 1.0) < 1e-3  # got, expected (6 digits)
    assert "Tolerance: " in revision
    assert "Fix what the verdict names" in revision
    return fenced(CORRECT)


def test_three_rounds_compile_error_then_wrong_then_correct_with_resume(pkb_invoke, model_env, tmp_path):
    model = model_env([first_round, after_compile_error, after_wrong_answer])
    out = tmp_path / "loop"
    # Interrupted after round 1 (a loop of one round), and again before round 1's file was checked.
    first = pkb_invoke("generate", *ARGS, "--rounds", "1", "--out", out)
    assert first.exit_code == 0, first.output
    folder = out / "1_allreduce"
    assert sorted(p.name for p in folder.iterdir()) == ["r1.json", "r1.prompt.md", "r1.py", "r1.record.json",
                                                       "r1.reply.md"]
    record = json.loads((folder / "r1.record.json").read_text())
    assert record["verdict"] == "compile-error" and record["round"] == 1
    (folder / "r1.record.json").unlink()

    result = pkb_invoke("generate", *ARGS, "--rounds", "5", "--out", out)
    assert result.exit_code == 0, result.output
    assert model.failures == []
    assert len(model.requests) == 3  # round 1 was not asked again; the loop stopped at the pass
    assert "1_allreduce: 3 round(s), stopped: passed in round 3 (untimed)" in result.output
    verdicts = [json.loads((folder / f"r{k}.record.json").read_text())["verdict"] for k in (1, 2, 3)]
    assert verdicts == ["compile-error", "fail", "pass"]
    assert judged_as_prompted(folder / "r3.json", json.loads((folder / "r3.record.json").read_text()))
    assert (out / "1_allreduce.py").read_text() == CORRECT  # the best file, where pkb run --solutions finds it
    loop = json.loads((out / "loop.json").read_text())
    assert loop["problems"]["1_allreduce"]["best_round"] == 3 and loop["tokens"] == 360
    assert not loop["tokens_estimated"]
    assert (folder / "r2.prompt.md").read_text().startswith("pkb ran the file you wrote")

    # Reports by round: pass after each round, the best round so far.
    report = pkb_invoke("report", out, "--json")
    by_round = json.loads(report.output)["by_round"]
    assert [(r["round"], r["pass_rate"]) for r in by_round] == [(1, 0.0), (2, 0.0), (3, 1.0)]
    text = pkb_invoke("report", out).output
    assert "By round (pkb generate --rounds)" in text and "Aggregates (each problem's best round)" in text
    compared = pkb_invoke("compare", out, out, "--json")
    assert compared.exit_code == 0
    body = json.loads(compared.output)
    assert [r["solution"] for r in body["rows"]] == ["1_allreduce.py"] and len(body["by_round"]) == 3
    plotted = pkb_invoke("plot", out, "--out", tmp_path / "plots")
    assert plotted.exit_code == 0 and (tmp_path / "plots" / "rounds.png").is_file()


def test_budgets_no_code_feedback_and_estimated_tokens(pkb_invoke, model_env, tmp_path):
    def no_code(messages):
        return "I would write a ring all-reduce."

    def told_no_code(messages):
        assert "Your reply held no file: the reply has no ```python block." in messages[3]["content"]
        assert messages[2]["content"] == "I would write a ring all-reduce."
        return "Still thinking."

    model = model_env([no_code, told_no_code], usage=False)
    out = tmp_path / "loop"
    result = pkb_invoke("generate", *ARGS, "--rounds", "2", "--out", out)
    assert result.exit_code == 0, result.output
    assert model.failures == [] and len(model.requests) == 2
    assert not (out / "records.jsonl").read_text()  # nothing had code: nothing was checked
    # The provider reported no usage: tokens were estimated; resumed with a cap already spent, nothing is asked.
    capped = pkb_invoke("generate", *ARGS, "--rounds", "4", "--out", out, "--max-tokens-total", "1")
    assert capped.exit_code == 0 and len(model.requests) == 2
    loop = json.loads((out / "loop.json").read_text())
    assert loop["tokens_estimated"] and loop["stopped"].startswith("token budget spent")
    assert loop["tokens"] > 1000  # the prompt itself, at characters / 4
    assert "estimated as characters / 4" in capped.output

    # Wall time: a budget of zero asks nothing more.
    again = pkb_invoke("generate", *ARGS, "--rounds", "4", "--out", out, "--max-wall-time", "0")
    assert again.exit_code == 0 and len(model.requests) == 2
    assert "wall-time budget spent" in again.output


def test_loop_options_need_rounds(pkb_invoke, model_env):
    model_env([])
    result = pkb_invoke("generate", *ARGS, "--measure-perf")
    assert result.exit_code == 4 and "--measure-perf only apply with --rounds" in result.output


def test_the_loop_through_the_reward_service(pkb_invoke, model_env, tmp_path):
    from tests.test_serve import Server

    model = model_env([first_round, after_compile_error, after_wrong_answer])
    service = Server(tmp_path / "serve", "--devices", "2", "--timeout", "60")
    try:
        out = tmp_path / "loop"
        result = pkb_invoke("generate", *ARGS, "--rounds", "5", "--out", out, "--server", service.url)
        assert result.exit_code == 0, result.output
    finally:
        service.stop()
    assert model.failures == [] and len(model.requests) == 3
    records = [json.loads((out / "1_allreduce" / f"r{k}.record.json").read_text()) for k in (1, 2, 3)]
    assert [r["verdict"] for r in records] == ["compile-error", "fail", "pass"]
    assert judged_as_prompted(out / "1_allreduce" / "r3.json", records[-1])  # the service's device: CPU mode
    assert not (out / "runs").exists()  # nothing launched on this side


def judged_as_prompted(generation_record, record) -> bool:
    """The prompt's settings (a round's generation record) are those the file was checked at."""
    said = json.loads(generation_record.read_text())["prompt_settings"]
    assert (said["world_size"], said["size"], said["precision"], said["device"]) == \
        (record["world_size"], record["size"], record["dtype"], record["machine"]["device"])
    return True


def _record(**fields):
    from pkb_core.contracts.record import Record

    base = dict(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="triton",
                solution="s.py", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass")
    return Record(**{**base, **fields})


def test_feedback_for_a_flag_a_timeout_and_a_timed_pass():
    from pkb_core.contracts.timing import Floor
    from pkb_core.generate.feedback_text import render_feedback
    from pkb_core.results.feedback import feedback_of

    flagged = feedback_of(_record(verdict="flagged", reason="rank 0: its processes used 35 ms of CPU in the 20 ms "
                                                            "after its trial answer"))
    assert "The rule and the numbers: rank 0: its processes used 35 ms" in render_feedback(flagged)
    hung = feedback_of(_record(verdict="timeout", reason="no result after 30 s (rank 1 did not answer)"),
                       running="trial 2 of 5 (one checked call), command the solution's `trial`")
    text = render_feedback(hung)
    assert "no result after 30 s" in text and "What was running: trial 2 of 5" in text
    timed = feedback_of(_record(reference_ms=2.0, solution_ms=1.0, speedup=2.0, speedup_ci=(1.8, 2.2),
                                difference="faster", timing_mode="latency", trials=5,
                                sol=Floor(floor_ms=0.5, bound="link", link_ms=0.5, hbm_ms=0.1, compute_ms=0.0,
                                          reference_fraction=0.25, solution_fraction=0.5)))
    text = render_feedback(timed)
    assert "reference 2 ms, yours 1 ms" in text and "Speedup 2.000x, 95 % interval [1.800, 2.200]: faster" in text
    assert "Speed of light (the traffic bound, link-bound): 0.5 ms; yours reaches 50 % of it" in text


def test_a_finding_lists_the_first_differing_elements_and_the_worst():
    import torch

    from pkb_core.judge.check import compare

    ref = torch.zeros(4, 8)
    cand = ref.clone()
    cand[0, 1:7] = 1.0
    cand[3, 5] = 9.0
    found = compare([cand], [ref])
    detail = found.detail
    assert found.startswith("out[0]: 7 of 32 elements differ") and detail["output"] == "out[0]"
    assert [e["index"] for e in detail["elements"]] == [[0, 1], [0, 2], [0, 3], [0, 4], [3, 5]]
    assert detail["elements"][-1] == {"index": [3, 5], "got": "9", "expected": "0"}
    assert detail["count"] == 7 and detail["shape"] == [4, 8] and detail["max_abs_err"] == "9"


def test_stop_when_no_improvement(pkb_invoke, model_env, tmp_path):
    model = model_env([lambda messages: fenced(WRONG), lambda messages: fenced(WRONG.replace("+= 1", "+= 2"))])
    result = pkb_invoke("generate", *ARGS, "--rounds", "4", "--out", tmp_path / "loop", "--stop-when-no-improvement")
    assert result.exit_code == 0, result.output
    assert model.failures == [] and len(model.requests) == 2
    assert "1_allreduce: 2 round(s), stopped: round 2 did not improve" in result.output

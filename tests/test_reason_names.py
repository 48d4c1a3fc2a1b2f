"""A reason names the file its reader knows (issue 55): the record's label rather than the copy
pkb read (the reward service's DATA/sources/<digest>/<problem>.py), the file `pkb submit` was
given, in full; a file that is not UTF-8 by its name and byte, not by pkb's line that decoded it."""
from pathlib import Path

import pytest

from pkb_core.contracts.job import Job
from pkb_core.contracts.record import Record
from pkb_core.contracts.serve import JobView
from pkb_core.errors import CompileError
from pkb_core.results.records import job_record

STORED = "/srv/pkb-serve/sources/3f/3fa9c0/1_allreduce.py"


def _job(solution=STORED, label="mine-j7.py") -> Job:
    return Job(key="k", slug="s", problem_id=1, problem="1_allreduce", category="collective",
               problem_path="/p/1_allreduce.py", backend="triton", solution=solution, solution_label=label,
               size="tiny", dtype="fp32", trials=1, mode="eval", measure_perf=False, warmup=3, iters=20,
               min_iters=10, save_outputs=False, timing_modes=("latency",), profile=False, params={})


def test_a_reason_names_the_solution_by_the_records_label_not_the_copy_pkb_read():
    syntax = job_record(_job(), 2, "compile-error", f"{STORED}:3: syntax error: expected ':'")
    assert syntax.reason == "mine-j7.py:3: syntax error: expected ':'" and syntax.solution == "mine-j7.py"
    # The feedback keeps the name the model was told its file has (pkb generate's prompts).
    assert syntax.feedback.summary == "1_allreduce.py:3: syntax error: expected ':'"
    raised = job_record(_job(), 2, "error", "rank 0: RuntimeError: boom (1_allreduce.py:5; raised in "
                                            "helper_1_allreduce.py:9) in 1_allreduce.py")
    assert raised.reason == ("rank 0: RuntimeError: boom (mine-j7.py:5; raised in helper_1_allreduce.py:9) "
                             "in 1_allreduce.py")  # only the file's own places: a longer name is another file
    # pkb run: the file as it was typed (its label), not its resolved path.
    typed = job_record(_job("/home/u/work/sols/1_allreduce.py", "sols/1_allreduce.py"), 2, "compile-error",
                       "/home/u/work/sols/1_allreduce.py:3: syntax error: expected ':'")
    assert typed.reason == "sols/1_allreduce.py:3: syntax error: expected ':'"
    assert job_record(_job(None, "reference"), 2, "pass").reason == ""


def test_a_file_that_is_not_utf8_is_named_with_its_byte(tmp_path):
    from pkb_core.candidate.solution import load_module

    path = tmp_path / "1_allreduce_latin.py"
    path.write_bytes(b'x = "\xff"\n\ndef solution(x):\n    return x\n')
    with pytest.raises(CompileError) as raised:
        load_module(path)
    assert str(raised.value) == (f"{path} is not UTF-8 text (invalid start byte at byte 5); "
                                 "a solution file is UTF-8 Python")


def _view(reason: str, verdict="compile-error") -> JobView:
    record = Record(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="triton",
                    solution="mine-j7.py", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict=verdict,
                    reason=reason)
    return JobView(id="j7", state="done", client="c", priority=0, problem="1_allreduce", backend="triton",
                   world_size=2, submitted_at=0.0, record=record)


def test_pkb_submit_shows_the_reason_in_full_naming_the_file_it_was_given():
    from pkb_core.cli.serve import REASON_LINES, _job_line

    given = Path("work/mine.py")
    long_line = "mine-j7.py:3: syntax error: " + "x" * 150
    assert _job_line(_view(long_line), given) == \
        f"j7  done       1_allreduce  work/mine.py  compile-error  work/mine.py:3: syntax error: {'x' * 150}"
    compiler = "\n".join(["build failed:", "mine-j7.py:9: error: 'foo' was not declared"]
                         + [f"note {i}" for i in range(10)])
    lines = _job_line(_view(compiler), given).splitlines()
    assert lines[0].endswith("compile-error  build failed:")
    assert lines[1] == "    work/mine.py:9: error: 'foo' was not declared"
    assert len(lines) == REASON_LINES + 1 and lines[-1] == \
        f"    ({12 - REASON_LINES} more line(s): pkb submit --wait --json has them)"
    assert _job_line(_view("", "pass"), given) == "j7  done       1_allreduce  work/mine.py  pass"


def test_a_solution_whose_parameters_do_not_fit_is_told_so_not_pointed_at_pkbs_call(tmp_path):
    """A call that never entered the solution's file (its parameters do not take the problem's
    inputs) named pkb's call site (`defaults.py:33`) as its place; it says what is wrong instead.
    An error inside the solution still names the solution's line."""
    import importlib.util

    from pkb_core.errors import describe

    path = tmp_path / "1_allreduce.py"
    path.write_text("def solution(tensor, extra):\n    return tensor\n\n\ndef broken(tensor):\n    return tensor + 'x'\n")
    spec = importlib.util.spec_from_file_location("sol_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.solution(1)
    except TypeError as exc:
        text = describe(exc, str(path))
    assert text.startswith("TypeError: solution() missing 1 required positional argument: 'extra' (where pkb called "
                           "it: its parameters do not take the problem's inputs"), text
    try:
        module.broken(1)
    except TypeError as exc:
        text = describe(exc, str(path))
    assert text.endswith("(1_allreduce.py:6)"), text


def test_a_message_whose_first_line_only_introduces_the_rest_keeps_its_last_line_too():
    """Triton's CompilationError opens with ``at 8:4:`` and quotes the kernel's source before what
    is wrong: the reason said ``CompilationError: at 8:4:`` alone on 2xH200, for every job of two
    candidates."""
    from pkb_core.errors import describe

    class CompilationError(Exception):
        pass

    quoted = ("at 8:4:\ndef kernel(x):\n    while start < n:\n    ^\n"
              "AssertionError('Loop carried variable p changed type')")
    assert describe(CompilationError(quoted)) == \
        "CompilationError: at 8:4: AssertionError('Loop carried variable p changed type')"
    # A first line that says it all stays alone.
    assert describe(RuntimeError("boom\nmore detail")) == "RuntimeError: boom"


def test_a_backends_refusal_that_names_its_own_place_is_placed_at_the_solutions_line_alone(tmp_path):
    """A refusal raised in a backend's code under the solution's call (``pkb_refusal = True``, as
    pkb_triton's GPU compile check sets) gives the solution's line without pkb's; any other
    exception keeps where it was raised."""
    import runpy

    from pkb_core.errors import describe

    class Refused(Exception):
        pkb_refusal = True

    def refuse():
        raise Refused("the kernel's own line is in the message")

    def fail():
        raise RuntimeError("boom")

    solution = tmp_path / "1_allreduce.py"
    solution.write_text("def solution(launch):\n    return launch()\n")
    call = runpy.run_path(str(solution))["solution"]
    described = {}
    for launch in (refuse, fail):
        try:
            call(launch)
        except Exception as exc:  # noqa: BLE001 - what the test describes
            described[launch.__name__] = describe(exc, solution)
    assert described["refuse"] == "Refused: the kernel's own line is in the message (1_allreduce.py:2)"
    assert described["fail"].startswith("RuntimeError: boom (1_allreduce.py:2; raised in test_reason_names.py:")

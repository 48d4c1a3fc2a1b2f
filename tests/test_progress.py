"""`pkb run`'s progress: plain `[i/n]` lines on stderr when not on a terminal."""
from pkb_core.cli.progress import JobProgress
from pkb_core.contracts.record import Record


def _record(problem, solution, verdict, **timing):
    return Record(key=f"{problem}|{solution}", problem_id=int(problem.split("_")[0]), problem=problem,
                  category="collective", backend="triton", solution=solution, world_size=2, size="tiny",
                  dtype="fp32", mode="eval", verdict=verdict, **timing)


def test_plain_lines_when_not_a_terminal(capsys):
    progress = JobProgress(4)
    progress.start()  # stderr is captured, not a TTY: no bar
    progress(_record("1_allreduce", "a.py", "pass", speedup=1.5, speedup_ci=(1.2, 1.8), difference="faster"))
    progress(_record("1_allreduce", "c.py", "pass", difference="too few rounds to tell"))
    progress(_record("1_allreduce", "d.py", "pass", speedup=0.003272))  # an old record: no interval, no number
    progress(_record("2_allgather", "b.py", "fail"))
    progress.close()
    assert capsys.readouterr().err.splitlines() == ["[1/4] 1_allreduce  a.py  pass  1.50x [1.20, 1.80]  faster",
                                                    "[2/4] 1_allreduce  c.py  pass  too few rounds to tell",
                                                    "[3/4] 1_allreduce  d.py  pass",
                                                    "[4/4] 2_allgather  b.py  fail"]


def test_a_job_that_did_not_pass_says_why_on_its_line(capsys):
    """`pkb bench`'s table has no reason column: a new user saw only `error` for a failed job of a
    sweep and had to read records.jsonl for why. Its line carries the reason, on one line and cut."""
    progress = JobProgress(3)
    progress(_record("1_allreduce", "a.py", "error", reason="the judge's processes failed\n(judge rank 0: open)"))
    progress(_record("1_allreduce", "b.py", "fail", reason="x" * 1000))
    progress(_record("1_allreduce", "c.py", "pass", reason="ignored"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[1/3] 1_allreduce  a.py  error  the judge's processes failed (judge rank 0: open)"
    assert lines[1].startswith("[2/3] 1_allreduce  b.py  fail  xxx") and lines[1].endswith("...") and len(lines[1]) < 300
    assert lines[2] == "[3/3] 1_allreduce  c.py  pass"


def test_quiet_prints_nothing(capsys):
    progress = JobProgress(1, quiet=True)
    progress.start()
    progress(_record("1_allreduce", "a.py", "pass"))
    progress.close()
    assert capsys.readouterr().err == "" and progress.done == 1


def test_build_lines_go_above_the_bar_on_a_terminal(capsys):
    """Issue 55: the compile phase's `build [i/n]` lines were written past rich, onto the bar's own line."""
    import io
    import re

    from rich.console import Console

    from pkb_core.cli.run import BuildLines
    from pkb_core.contracts.build import BuildResult

    screen = io.StringIO()
    progress = JobProgress(1, console=Console(file=screen, force_terminal=True, width=100))
    progress.start()
    BuildLines(progress.echo).pkb_report_build(solution="/s/a.py", result=BuildResult(True, seconds=1.25),
                                               done=1, total=1)
    progress(_record("1_allreduce", "a.py", "pass"))
    progress.close()
    assert capsys.readouterr().err == ""  # nothing went past the bar's console
    # The terminal as drawn: each line whole on a line of its own, the bar (then removed) apart.
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    assert "build [1/1] a.py  built  1.2 s" in lines and "[1/1] 1_allreduce  a.py  pass" in lines

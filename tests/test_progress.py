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


def test_quiet_prints_nothing(capsys):
    progress = JobProgress(1, quiet=True)
    progress.start()
    progress(_record("1_allreduce", "a.py", "pass"))
    progress.close()
    assert capsys.readouterr().err == "" and progress.done == 1

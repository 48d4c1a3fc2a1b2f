"""`pkb run`'s progress: plain `[i/n]` lines on stderr when not on a terminal."""
from pkb_core.cli.progress import JobProgress


def test_plain_lines_when_not_a_terminal(capsys):
    progress = JobProgress(2)
    progress.start()  # stderr is captured, not a TTY: no bar
    progress({"problem": "1_allreduce", "solution": "a.py", "verdict": "pass", "speedup": 1.5})
    progress({"problem": "2_allgather", "solution": "b.py", "verdict": "fail"})
    progress.close()
    assert capsys.readouterr().err.splitlines() == ["[1/2] 1_allreduce  a.py  pass  1.50x",
                                                    "[2/2] 2_allgather  b.py  fail"]


def test_quiet_prints_nothing(capsys):
    progress = JobProgress(1, quiet=True)
    progress.start()
    progress({"problem": "1_allreduce", "solution": "a.py", "verdict": "pass"})
    progress.close()
    assert capsys.readouterr().err == "" and progress.done == 1

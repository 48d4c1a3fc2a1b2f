"""The docs' commands run as written: every fenced shell command of docs/ and README.md that can
run on CPU is run here, in a temporary directory, and must exit 0; every other one is named in
:data:`NOT_RUN` with why (a GPU, a cluster, a model server, a long time, a file only the reader has).

Commands are the lines of ```` ``` ````, ```` ```bash ```` and ```` ```sh ```` blocks that read as
shell (the first line a command, or ``$ `` prompts in a transcript; diagrams and output are not),
continuation lines and ``for ... done`` loops joined. Each page's commands run in order in one
folder of their own, as a reader would type them; the walkthrough pages (:data:`SETUP`) first get
what the page has the reader make: its files (code blocks whose first line is ``# <path>``), built
and installed as pip would (a wheel unpacked into a folder on ``PYTHONPATH``, never into this
Python). ``PKB_DOCS_LONG=1`` also runs the commands marked ``long`` (minutes on CPU).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
#: Seconds one command may take (the slowest runnable ones are single CPU-mode jobs).
TIMEOUT = 300

#: A fenced block: its language and its text.
_FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```", re.S | re.M)
_SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
#: How a line that is a command starts (a block whose first line does not is a diagram or output).
_COMMAND = re.compile(r"^(\$ |pkb\b|python3?\b|pip\b|\.\w*/|export\b|mkdir\b|for\b|torchrun\b|ray\b|srun\b|"
                      r"cd\b|[A-Z][A-Z0-9_]*=)")


@dataclass(frozen=True)
class Command:
    page: str  # relative to the repository
    text: str

    def __str__(self):
        return f"{self.page}: {self.text}"


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def shell_commands(page: Path) -> list[Command]:
    """The page's commands, in order (see the module docstring)."""
    commands = []
    for language, body in _FENCE.findall(page.read_text()):
        if language not in _SHELL_LANGUAGES:
            continue
        lines = [line for line in body.splitlines() if line.strip()]
        if language in ("bash", "sh", "shell"):  # a script as it ran: one command
            commands.append(Command(page_name(page), "\n".join(lines)))
            continue
        lines = [line for line in lines if not line.startswith("#")]  # comment lines
        if not lines or not _COMMAND.match(lines[0]):
            continue  # a diagram, a table, output
        if lines[0].startswith("$ "):  # a transcript: the prompted lines are the commands
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        if " [--" in lines[0]:  # a synopsis: the command's options, over as many lines as it takes
            commands.append(Command(page_name(page), "\n".join(lines)))
            continue
        commands += [Command(page_name(page), text) for text in _logical_lines(lines)]
    return commands


def _logical_lines(lines: list[str]) -> list[str]:
    """Lines joined where a backslash continues them or a loop is open (``for``/``while`` ... ``done``)."""
    out, current, depth = [], [], 0
    for line in lines:
        current.append(line)
        words = re.findall(r"\b(for|while|done)\b", line.split(" #")[0])
        depth += sum(1 for w in words if w in ("for", "while")) - words.count("done")
        if line.rstrip().endswith("\\") or depth > 0:
            continue
        out.append("\n".join(current))
        current = []
    if current:
        out.append("\n".join(current))
    return out


# -- what is not run here, and why: one table ------------------------------------------------------------

GPU, CLUSTER, MODEL, LONG, SERVICE, YOURS, SYNOPSIS, INSTALL, RECORD = (
    "gpu", "cluster", "model server", "long", "service", "the reader's files", "synopsis", "installs", "record")

#: (page pattern, command pattern, kind, why): the first row whose patterns both match (``re.search``)
#: a command keeps it from running here. Every row must match some command (a stale row fails).
NOT_RUN = [
    (r"", r"\[--", SYNOPSIS, "the command's options in brackets, not a command"),
    (r"^docs/benchmarks/", r"", RECORD,
     "a benchmark's record: the commands as they ran on the machine it names (GPUs, or minutes of CPU)"),
    (r"^README\.md$", r"^\./scripts/install && python3 -m pytest", INSTALL,
     "installs every distribution into this Python, then runs this very suite"),
    (r"^README\.md$", r"^\./scripts/install && pkb run --backend triton --measure-perf", INSTALL,
     "installs every distribution into this Python (the README's main job: about 3 minutes on 2 cores)"),
    (r"^README\.md$", r"^pkb run --backend reference --problem collective --measure-perf", GPU,
     "the NCCL self-check on every GPU (on CPU: eight timed jobs, minutes)"),
    (r"^README\.md$", r"^pkb run --backend triton --measure-perf", LONG,
     "every Triton sample timed: minutes under Triton's interpreter on CPU"),
    (r"", r"--backend (cuda|nvshmem|nvshmem4py|parallelkittens)\b", GPU, "the backend needs an NVIDIA GPU"),
    (r"^docs/backends/cuda\.md$", r"compile_check\.py", GPU, "needs nvcc (the CUDA toolkit)"),
    (r"^docs/backends/cuda\.md$", r"^torchrun", GPU, "a smoke test on two GPUs"),
    (r"^docs/backends/nvshmem\.md$", r"(wheels/\*\.whl|nvshmem-3\.8\.0\.txz|PKB_NVSHMEM4PY_HOME=)", YOURS,
     "the NVSHMEM wheels and tarball the page has the reader download"),
    (r"^docs/backends/parallelkittens\.md$", r"^export THUNDERKITTENS_ROOT", YOURS,
     "the reader's ThunderKittens checkout"),
    (r"^docs/backends/triton\.md$", r"^pkb run --backend triton( --nproc 3)? +#", LONG,
     "every Triton sample (twelve jobs) under Triton's interpreter: minutes on CPU"),
    (r"^docs/cluster\.md$", r"(srun|--executor slurm)", CLUSTER, "a SLURM allocation"),
    (r"^docs/cluster\.md$", r"--executor submitit-local", LONG,
     "eight collective problems in submitit shards: minutes on CPU (tests/test_fanout.py runs a small one)"),
    (r"^docs/cluster\.md$", r"^\.ci/start-slurm --install", CLUSTER, "installs and starts SLURM, as root"),
    (r"^docs/cluster\.md$", r"^python3 -m pytest", CLUSTER, "tests of this suite that need the SLURM above"),
    (r"^docs/generation\.md$", r"^pkb generate", MODEL, "asks a model through a chat-completions server"),
    (r"^docs/generation\.md$", r"^PKB_OPENAI_BASE_URL=", MODEL, "asks a model through a chat-completions server"),
    (r"^docs/generation\.md$", r"(gen/triton|runs/gen|loops/)", MODEL, "reads what `pkb generate` wrote"),
    (r"^docs/pkb-trees\.md$", r"import-pkb (~/pkb-trees|pkb-checkout)", YOURS,
     "a checkout of ParallelKernelBench's solution trees (tests/test_pkb_import.py imports a fixture tree)"),
    (r"^docs/reports\.md$", r"(sols/|runs/main|runs/pr|runs/x)", YOURS,
     "the reader's solutions and earlier run directories (tests/test_compare.py, tests/test_inspect.py)"),
    (r"^docs/serve\.md$", r"^pkb serve( |$)", SERVICE, "serves until stopped (tests/test_serve.py starts one)"),
    (r"^docs/serve\.md$", r"^PKB_SERVE_TOKEN=\.\.\.", SERVICE, "serves until stopped, on every interface"),
    (r"^docs/serve\.md$", r"^pkb (submit|cancel)\b", SERVICE,
     "talks to a running `pkb serve` about the reader's files (tests/test_serve.py does, to one it starts)"),
    (r"^docs/serve\.md$", r"^ray start", CLUSTER, "a Ray cluster"),
    (r"^docs/timing\.md$", r"^for i in 1 2 3", GPU, "issue 22's targets: problems 1-8, every mode, on 2xH200"),
    (r"^docs/timing\.md$", r"^pkb calibrate --force", LONG, "the noise floor: minutes of timed jobs on CPU"),
]


def not_run(command: Command) -> tuple[str, str] | None:
    """``(kind, why)`` of the first :data:`NOT_RUN` row matching ``command``, or None (it runs)."""
    for page, pattern, kind, why in NOT_RUN:
        if re.search(page, command.page) and re.search(pattern, command.text):
            return kind, why
    return None


# -- what a page has the reader make before its commands ---------------------------------------------------

#: A solution file the reader brings to the walkthroughs: an all-reduce through torch.distributed.
ALLREDUCE = '''import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


def page_files(page: Path) -> dict[str, str]:
    """The page's files: its code blocks whose first line is ``# <path>`` (a file name with a suffix)."""
    files = {}
    for _, body in _FENCE.findall(page.read_text()):
        first, _, rest = body.partition("\n")
        match = re.fullmatch(r"# ([\w./-]+\.\w+)", first.strip())
        if match:
            files[match.group(1)] = rest
    return files


def install(project: Path, site: Path) -> None:
    """What ``pip install`` does with ``project``, into ``site`` instead of this Python: build its wheel
    (pip refuses a project it cannot build) and unpack it."""
    wheels = project.parent / f"{project.name}-wheel"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-cache-dir", "-w", str(wheels), "."], cwd=project, capture_output=True, text=True,
                           timeout=TIMEOUT)
    assert built.returncode == 0, f"pip refuses the page's project:\n{built.stdout}\n{built.stderr}"
    site.mkdir(exist_ok=True)
    for wheel in wheels.glob("*.whl"):
        zipfile.ZipFile(wheel).extractall(site)


def setup_backend_page(page: Path, home: Path, work: Path) -> list[Path]:
    """docs/writing-a-backend.md: the example backend's files, a sample, and the reader's solution file."""
    project = home / "pkb-tracing"
    for name, text in page_files(page).items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (project / "pkb_tracing" / "samples").mkdir()
    (project / "pkb_tracing" / "samples" / "1_allreduce.py").write_text(ALLREDUCE)
    install(project, home / "site")
    (work / "1_allreduce_mine.py").write_text(ALLREDUCE)
    return [home / "site"]


def setup_problem_page(page: Path, home: Path, work: Path) -> list[Path]:
    """docs/writing-a-problem.md: the pack of its example problem (the first code block)."""
    project = home / "my-pack"
    for name, text in page_files(page).items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    example = _FENCE.search(page.read_text().split("## A worked example", 1)[1]).group(2)
    (project / "my_pack" / "problems").mkdir()
    (project / "my_pack" / "problems" / "1001_allreduce_max.py").write_text(example)  # where the page says
    install(project, home / "site")
    return [home / "site"]


def setup_triton_page(page: Path, home: Path, work: Path) -> list[Path]:
    """docs/backends/triton.md: the reader's solution file (the backend's own all-reduce sample)."""
    sample = ROOT / "backends" / "triton" / "pkb_triton" / "samples" / "1_allreduce.py"
    shutil.copy(sample, work / "1_allreduce_mine.py")
    return []


#: page -> ``setup(page, home, work) -> folders to put on PYTHONPATH``.
SETUP = {"docs/writing-a-backend.md": setup_backend_page, "docs/writing-a-problem.md": setup_problem_page,
         "docs/backends/triton.md": setup_triton_page}


# -- the tests ------------------------------------------------------------------------------------------------

def every_command() -> list[Command]:
    return [command for page in PAGES for command in shell_commands(page)]


def runs_here(command: Command) -> bool:
    """Not in :data:`NOT_RUN`, or marked ``long`` while ``PKB_DOCS_LONG=1``."""
    why = not_run(command)
    return why is None or (why[0] == LONG and os.environ.get("PKB_DOCS_LONG") == "1")


def test_every_command_runs_or_is_named_with_why():
    commands = every_command()
    assert len(commands) > 50, "the parser found too few commands"
    unused = [row[:2] for row in NOT_RUN
              if not any(re.search(row[0], c.page) and re.search(row[1], c.text) for c in commands)]
    assert not unused, f"rows of NOT_RUN that match no command any more: {unused}"
    assert any(runs_here(c) for c in commands)


#: Pages with commands that run here; a command in several pages without a setup runs once.
RUN_PAGES = sorted({c.page for c in every_command() if runs_here(c)})


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_commands_of_a_page_run_as_written(page, tmp_path, ran_already):
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ)
    setup = SETUP.get(page)
    if setup:
        paths = setup(ROOT / page, tmp_path, work)
        env["PYTHONPATH"] = os.pathsep.join([str(p) for p in paths] + [env.get("PYTHONPATH", "")])
    for command in (c for c in shell_commands(ROOT / page) if runs_here(c)):
        said = re.sub(r"\s+#.*$", "", command.text)  # the same command, whatever its comment says
        if not setup and said in ran_already:
            continue
        ran_already.add(said)
        result = subprocess.run(["bash", "-c", command.text], cwd=work, env=env, capture_output=True, text=True,
                                timeout=TIMEOUT)
        assert result.returncode == 0, f"{command}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def ran_already():
    """Commands already run by a page without a setup (``pkb backends`` is on five pages)."""
    return set()

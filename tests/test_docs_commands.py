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

Python blocks (```` ```python ````) are each a script or a file of its own: the blocks that run here
do not build on one another (each imports what it uses), so each runs alone, in a folder of its own,
in a new Python, as the page has the reader use it: a script run with ``python3``, against
a ``pkb serve`` the test starts where it talks to one; a plugin installed as a distribution and
reached through pkb's commands; a solution file judged by ``pkb run``; a test suite run by pytest.
:data:`PYTHON_RUN` names the test that runs each, :data:`PYTHON_NOT_RUN` every other one with why
(a GPU, a model server, the reader's own code, or run by another test: the page's commands here, or
``tests/test_serve.py``). Every block, run or not, must parse, and what it imports from pkb's
packages must exist (where the package imports on this machine).
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
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
    (r"^docs/timing\.md$", r"^W=\"--timing-mode window", GPU,
     "issue 53's window-clock targets: the A/A, the ruler and the cuda samples on 2xH200 (about 25 minutes)"),
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


#: A line that starts a file in a code block: ``# <path>`` (a file name with a suffix).
_FILE_LINE = re.compile(r"^# ([\w./-]+\.\w+)[ \t]*\n", re.M)


def block_files(body: str) -> dict[str, str]:
    """The files of a code block whose first line is ``# <path>``; a later ``# <path>`` line after a
    blank line starts the next file (docs/writing-a-backend.md's ``tests/conftest.py`` and
    ``tests/test_contract.py``). A block that starts otherwise holds no file."""
    starts = [m for m in _FILE_LINE.finditer(body) if m.start() == 0 or body[:m.start()].endswith("\n\n")]
    if not starts or starts[0].start() != 0:
        return {}
    ends = [m.start() for m in starts[1:]] + [len(body)]
    return {m.group(1): body[m.end():end].rstrip("\n") + "\n" for m, end in zip(starts, ends)}


def page_files(page: Path) -> dict[str, str]:
    """The page's files: its code blocks' (:func:`block_files`)."""
    files = {}
    for _, body in _FENCE.findall(page.read_text()):
        files.update(block_files(body))
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
    """docs/backends/triton.md: the reader's solution file, the page's complete example (its Python block)."""
    example = page.read_text().split("## A complete example", 1)[1]
    (work / "1_allreduce_mine.py").write_text(re.search(r"^```python\n(.*?)^```", example, re.S | re.M).group(1))
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


# -- the Python blocks --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """A page's ``number``-th ```` ```python ```` block."""
    page: str  # relative to the repository
    number: int
    text: str

    def __str__(self):
        return f"{self.page}, Python block {self.number} ({self.text.strip().splitlines()[0]})"


def python_blocks(page: Path) -> list[Block]:
    bodies = [body for language, body in _FENCE.findall(page.read_text()) if language in ("python", "py")]
    return [Block(page_name(page), number, body) for number, body in enumerate(bodies, 1)]


def every_block() -> list[Block]:
    return [block for page in PAGES for block in python_blocks(page)]


def _matches(row, block: Block) -> bool:
    return bool(re.search(row[0], block.page) and re.search(row[1], block.text, re.M))


ELSEWHERE = "run elsewhere"

#: (page pattern, block pattern, the test below that runs the block): the blocks run here.
PYTHON_RUN = [
    (r"^docs/serve\.md$", r"^with Client\(\) as pkb:", "test_serve_md_client_block_runs_against_a_local_service"),
    (r"^docs/generation\.md$", r"^def prompt\(\):", "test_generation_md_prompt_block_reaches_pkb_prompt"),
    (r"^docs/writing-a-backend\.md$", r"^# tests/conftest\.py", "test_writing_a_backend_md_contract_suite_passes"),
    (r"^docs/writing-a-backend\.md$", r"handle_of\(tensor\)", "test_writing_a_backend_md_heap_solution_passes"),
]

#: (page pattern, block pattern, kind, why): the blocks not run here. Every block matches exactly one
#: row of this table or :data:`PYTHON_RUN`, and every row matches some block (a stale row fails).
PYTHON_NOT_RUN = [
    (r"^docs/benchmarks/", r"", RECORD, "a benchmark's record: a script as it ran on the GPU machine it names"),
    (r"^docs/backends/cuda\.md$", r"^import pkb_cuda", GPU,
     "nvcc and GPUs; the kernel's source and the binding's body are elided (`...`)"),
    (r"^docs/backends/nvshmem\.md$", r"", GPU, "NVSHMEM (or nvshmem4py and Numba) on GPUs"),
    (r"^docs/backends/parallelkittens\.md$", r"", GPU, "ThunderKittens on Hopper GPUs; the launch code is elided"),
    (r"^docs/backends/triton\.md$", r"^def solution", ELSEWHERE,
     "the page's commands judge it: it is the reader's 1_allreduce_mine.py (setup_triton_page)"),
    (r"^docs/generation\.md$", r"^result = refine\(", MODEL, "asks a model through a chat-completions server"),
    (r"^docs/generation\.md$", r"call_my_api\(", YOURS, "a provider around the reader's own API (call_my_api)"),
    (r"^docs/serve\.md$", r"^async def rewards", ELSEWHERE,
     "tests/test_serve.py runs it as written against its service (test_the_grpo_reward_function_...)"),
    (r"^docs/serve\.md$", r"^import ray", CLUSTER,
     "a Ray cluster with GPUs (device=\"cuda\"), and the first block's sources; tests/test_serve_ray.py runs "
     "the pool on CPU"),
    (r"^docs/writing-a-backend\.md$", r"^# pkb_tracing/plugin\.py", ELSEWHERE,
     "the page's plugin: its commands here install it and run `pkb run --backend tracing`"),
    (r"^docs/writing-a-problem\.md$", r"^ID = 1001", ELSEWHERE,
     "the page's problem: its commands here install it in the page's pack and run it"),
    (r"^docs/writing-a-problem\.md$", r"^# my_pack/__init__\.py", ELSEWHERE,
     "the page's pack: its commands here install it and run its problem"),
]


def block_run_by(test: str) -> Block:
    """The one block that :data:`PYTHON_RUN` gives ``test`` to run."""
    row = next(row for row in PYTHON_RUN if row[2] == test)
    found = [block for block in every_block() if _matches(row, block)]
    assert len(found) == 1, f"{row} matches {len(found)} blocks"
    return found[0]


def test_every_python_block_runs_or_is_named_with_why():
    blocks = every_block()
    assert len(blocks) > 15, "the parser found too few Python blocks"
    rows = PYTHON_RUN + PYTHON_NOT_RUN
    for block in blocks:
        matching = [row[:2] for row in rows if _matches(row, block)]
        assert len(matching) == 1, f"{block}: matched by {len(matching)} rows of PYTHON_RUN and PYTHON_NOT_RUN"
    unused = [row[:2] for row in rows if not any(_matches(row, block) for block in blocks)]
    assert not unused, f"rows that match no Python block any more: {unused}"
    assert all(callable(globals().get(row[2])) for row in PYTHON_RUN)


def pkb_names(block: Block) -> list[tuple[str, list[str]]]:
    """``(module, names)``: what ``block`` takes from pkb's packages: ``from pkb_x import a, b``, and the
    attributes it reads of a module imported whole (``import pkb_cuda``: ``pkb_cuda.compile``)."""
    tree = ast.parse(block.text, str(block))
    found, whole = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.startswith("pkb"):
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            whole.update({alias.asname or alias.name: alias.name for alias in node.names
                          if alias.name.startswith("pkb") and (alias.asname or "." not in alias.name)})
    for name, module in whole.items():
        read = {node.attr for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name}
        if read:
            found.append((module, sorted(read)))
    return found


#: Run in a new Python: every ``(block, module, names)`` of its stdin; prints what is missing. A module or a
#: name that needs what this machine lacks (nvshmem4py's Numba) is passed over: its blocks need a GPU anyway.
_CHECK_NAMES = """
import importlib, json, sys

def lacks(block, module, name=None):
    try:
        found = importlib.import_module(module)
        if name is not None:
            getattr(found, name)
    except AttributeError:
        return f"{block}: {module} has no {name}"
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("pkb"):
            return f"{block}: no module {exc.name}"
    return None

checks = json.load(sys.stdin)
missing = [lacks(block, module, name) for block, module, names in checks for name in [None, *names]]
print(json.dumps(sorted(set(filter(None, missing)))))
"""


def test_every_python_block_parses_and_names_what_pkb_has():
    checks = [(str(block), module, names) for block in every_block() for module, names in pkb_names(block)]
    assert any(module == "pkb_core" for _, module, _ in checks)
    result = subprocess.run([sys.executable, "-c", _CHECK_NAMES], input=json.dumps(checks), capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def environment(*paths: Path, **variables: str) -> dict:
    """This process's environment, ``paths`` first on ``PYTHONPATH``, ``variables`` set."""
    python_path = os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": python_path, **variables}


def run_python(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """``python3 ARGS`` in ``cwd``; asserts exit status 0."""
    result = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, f"python3 {' '.join(map(str, args))}\nexit {result.returncode}\n" \
                                   f"{result.stdout}\n{result.stderr}"
    return result


@contextlib.contextmanager
def pkb_serve(data: Path):
    """A ``pkb serve`` on a free localhost port (CPU mode: two rank slots), as tests/test_serve.py starts one;
    yields its URL and stops it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url, log = f"http://127.0.0.1:{port}", data.parent / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PKB_SERVE_TOKEN", "PKB_SERVER")}
    with open(log, "wb") as stderr:
        service = subprocess.Popen([sys.executable, "-m", "pkb_core", "serve", "--port", str(port), "--data",
                                    str(data), "--devices", "2"], stderr=stderr, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert service.poll() is None, log.read_text()
            try:
                urllib.request.urlopen(url + "/v1/health", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"pkb serve did not start: {log.read_text()}"
                time.sleep(0.2)
        yield url
    finally:
        service.terminate()
        service.wait(timeout=60)


def test_serve_md_client_block_runs_against_a_local_service(tmp_path):
    """The script of docs/serve.md's "From Python": the client against a service, then ``evaluate`` alone."""
    block = block_run_by("test_serve_md_client_block_runs_against_a_local_service")
    (tmp_path / "client.py").write_text(block.text)
    with pkb_serve(tmp_path / "data") as url:
        result = run_python(["client.py"], tmp_path, environment(PKB_SERVER=url))
    assert result.stdout.startswith("pass "), result.stdout  # print(record.verdict, record.claimed_speedup)


def install_plugin(site: Path, name: str, files: dict[str, str], entry_points: str) -> None:
    """What pip leaves of a distribution ``name`` with ``files`` and ``entry_points`` (entry_points.txt's text)
    in ``site``: the files and the distribution's metadata."""
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_generation_md_prompt_block_reaches_pkb_prompt(tmp_path):
    """docs/generation.md's backend module, as the plugin of a backend whose samples are two files that pass:
    ``pkb prompt`` gives its instructions and an example."""
    block = block_run_by("test_generation_md_prompt_block_reaches_pkb_prompt")
    samples = ROOT / "backends" / "triton" / "pkb_triton" / "samples"
    files = {"pkb_mybackend/__init__.py": "", "pkb_mybackend/plugin.py": block.text}
    files.update({f"pkb_mybackend/samples/{name}": (samples / name).read_text()
                  for name in ("1_allreduce.py", "2_allgather.py")})
    install_plugin(tmp_path / "site", "pkb-mybackend", files, "[pkb.backends]\nmybackend = pkb_mybackend.plugin\n")
    result = run_python(["-m", "pkb_core", "prompt", "--backend", "mybackend", "--problem", "3"], tmp_path,
                        environment(tmp_path / "site"))
    instructions = re.search(r'^INSTRUCTIONS = """\\\n(.*?)"""', block.text, re.S | re.M).group(1)
    assert instructions.strip() in result.stdout, result.stdout
    assert "problem 1_allreduce" in result.stdout and (samples / "1_allreduce.py").read_text() in result.stdout


@pytest.fixture(scope="module")
def tracing(tmp_path_factory):
    """docs/writing-a-backend.md's backend, installed as the page has the reader install it:
    ``(its project folder, the environment that sees it)``."""
    home = tmp_path_factory.mktemp("writing-a-backend")
    (home / "work").mkdir()
    paths = setup_backend_page(ROOT / "docs" / "writing-a-backend.md", home, home / "work")
    return home / "pkb-tracing", environment(*paths)


def test_writing_a_backend_md_contract_suite_passes(tracing):
    """The page's test files in its backend's project, run by pytest as the reader runs them."""
    project, env = tracing
    block = block_run_by("test_writing_a_backend_md_contract_suite_passes")
    files = block_files(block.text)
    assert sorted(files) == ["tests/conftest.py", "tests/test_contract.py"]
    for path, text in files.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(text)
    env = {name: value for name, value in env.items() if not name.startswith("PYTEST_")}  # this suite's pytest's
    result = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], project, env)
    assert re.search(r"\b4 passed\b", result.stdout), result.stdout


def test_writing_a_backend_md_heap_solution_passes(tracing, tmp_path):
    """The page's solution file that reads its peers' inputs through the heap, judged under its backend."""
    _, env = tracing
    block = block_run_by("test_writing_a_backend_md_heap_solution_passes")
    (tmp_path / "1_allreduce_heap.py").write_text(block.text)
    result = run_python(["-m", "pkb_core", "run", "--backend", "tracing", "--solution", "1_allreduce_heap.py"],
                        tmp_path, env)
    assert re.search(r"^1_allreduce +1_allreduce_heap\.py +2 +tiny +fp32 +pass\b", result.stdout, re.M), result.stdout

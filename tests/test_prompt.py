"""`pkb prompt`: what the prompt states, per backend; templates; BackendInfo.prompt."""
import json

import pytest

from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.backend_prompt import BackendPrompt, PromptExample
from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.problem.describe import describe_inputs
from pkb_core.plugin.manager import backend_infos, get_plugin_manager
from pkb_core.problem.contract import read_spec
from pkb_core.problem.registry import build_registry

#: Text of each built-in backend's helper API that its prompt must carry.
HELPER_API = {
    "reference": ["pkb_core.symmetric.handle_of(tensor)", "torch.ops.symm_mem", "get_buffer(rank, sizes, dtype"],
    "triton": [":func:`peers` ``(tensor) -> Peers``", ":func:`barrier` ``(pads, rank, WORLD: constexpr, channel)``",
               ":func:`workspace`", "from pkb_triton import barrier, peer_ptr, peers"],
    "cuda": ["pkb_cuda.compile(name, cuda_source, cpp_source", "pkb::barrier_block(", "class Peers(NamedTuple)",
             "max_blocks: int"],
}
RULES = ["All 4 ranks call `solution` at the same time", "fresh random inputs",
         "Never write into an input", "never write into an input (the inputs are read back",
         "float16 (the working dtype): rtol=0.002, atol=0.001", "Integer and boolean outputs must be equal",
         "Do not replace or patch functions of pkb or torch"]


def _prompt(pkb_invoke, *args, pm=None):
    result = pkb_invoke("prompt", *args, pm=pm)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("backend", sorted(HELPER_API))
def test_prompt_states_problem_inputs_machine_api_and_rules(pkb_invoke, pkb_pm, backend):
    if backend not in backend_infos(pkb_pm):
        pytest.skip(f"backend {backend} is not installed")
    text = _prompt(pkb_invoke, "--problem", "7", "--backend", backend, "--precision", "fp16",
                   "--hardware", "h100_8", "--nproc", "4", "--size", "default")
    # the problem: docstring, reference source, signature, file to write
    assert "Reduce-scatter (sum) of a row-blocked matrix." in text
    assert "dist.reduce_scatter_tensor(out, tensor.contiguous())" in text
    assert "defines `solution(tensor)`" in text and "`7_reducescatter.py`" in text
    # the inputs at this size and world size: (W*M, N) = (4*1024, 1024), fp16
    assert "size `default` (m=1024, n=1024), world size 4 and working dtype float16" in text
    assert "- `tensor`: tensor (4096, 1024) float16" in text
    # the machine: 4 of the preset's 8 H100s, NVSwitch
    assert "8 x NVIDIA H100 80GB HBM3 (SXM5); the solution runs on 4 of them" in text
    assert "NVSwitch" in text
    # the backend's own part: helper API and an example pair (never for problem 7 itself)
    for snippet in HELPER_API[backend]:
        assert snippet in text, snippet
    assert "## Worked example: problem 1_allreduce" in text
    assert "Worked example: problem 7_" not in text
    for rule in RULES:
        assert rule in text, rule
    if backend == "reference":
        assert "You may call torch.distributed" in text and "no NCCL, no gloo" not in text
    else:
        assert "no NCCL, no gloo" in text


def test_example_for_the_problem_asked_is_replaced_by_another(pkb_invoke):
    text = _prompt(pkb_invoke, "--problem", "1", "--backend", "triton", "--size", "tiny", "--hardware", "h200_2")
    assert "Worked example: problem 2_allgather" in text
    assert "_allreduce[(grid,)]" not in text  # the problem-1 sample's kernel launch is not given away
    assert "2 x NVIDIA H200" in text and "world size 2 and working dtype float32" in text  # CPU mode's dtype


def test_json_has_system_and_user_messages_and_settings(pkb_invoke):
    out = json.loads(_prompt(pkb_invoke, "--problem", "allreduce", "--backend", "reference", "--size", "tiny",
                             "--hardware", "h200_2", "--json"))
    assert [m["role"] for m in out["messages"]] == ["system", "user"]
    assert out["settings"] == {"problem": "1_allreduce", "backend": "reference", "precision": "fp32",
                               "size": "tiny", "world_size": 2, "device": "cpu", "hardware": "h200_2",
                               "template": "default", "inputs_built": True}


def test_auto_hardware_without_gpu_says_it_assumed_a_preset(pkb_invoke):
    text = _prompt(pkb_invoke, "--problem", "1", "--backend", "reference", "--size", "tiny")
    assert "no GPU on the machine that wrote this prompt: preset h100_8 assumed" in text
    assert "world size 2" in text  # judged here, in CPU mode: pkb run's 2 ranks, not the preset's 8


def test_shapes_that_vary_by_rank_and_groups_are_described():
    registry = build_registry(get_plugin_manager())
    scatter = describe_inputs(registry.get("5").load(), size="tiny", world_size=3, precision="fp32")
    assert "`tensor`: *varies* by rank or trial; rank 0: tensor (3, 8, 16) float32; " \
           "rank 2 in another trial: tensor (8, 16) float32" in scatter.text
    assert "`src`: int 0" in scatter.text
    clip = describe_inputs(registry.get("22").load(), size="tiny", world_size=8, precision="bf16")
    assert "rank 0: a torch.distributed process group over ranks [0, 1, 2, 3]" in clip.text
    assert "`fsdp_group`: None (the default process group: all ranks)" in clip.text


def test_inputs_that_need_a_process_group_fall_back_to_sizes(tmp_path):
    path = tmp_path / "951_needs_dist.py"
    path.write_text('''"""Needs torch.distributed while building inputs."""
import torch.distributed as dist

ID = 951
NAME = "needs_dist"
CATEGORY = "other"
ORIGIN = "test"
WORLD_SIZE = "any W >= 2"
SIZES = {"tiny": {"n": 4}, "default": {"n": 64}, "large": {"n": 64}}


def inputs(ctx):
    return (ctx.randn(ctx.params["n"] * dist.get_world_size()),)


def reference(x):
    return x


def traffic(params, world_size, itemsize):
    return {}
''')
    described = describe_inputs(read_spec(path).load(), size="default", world_size=2, precision="bf16")
    assert not described.built
    assert "could not build the inputs without a process group" in described.text
    assert "{'n': 64}" in described.text


def test_template_override_from_a_file_and_from_pkb_toml(pkb_invoke, tmp_path, monkeypatch):
    mine = tmp_path / "mine.toml"
    mine.write_text("system = ''\nuser = 'Solve ${problem_key} on ${world_size} ranks: ${inputs}'\n")
    args = ["--problem", "1", "--backend", "triton", "--size", "tiny", "--hardware", "h200_2"]
    assert _prompt(pkb_invoke, *args, "--template", mine).strip() == \
        "Solve 1_allreduce on 2 ranks: - `tensor`: tensor (8, 16) float32"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text('[prompt]\ntemplate = "mine.toml"\n')
    out = json.loads(_prompt(pkb_invoke, *args, "--json"))
    assert out["messages"] == [{"role": "user", "content": "Solve 1_allreduce on 2 ranks: - `tensor`: "
                                                            "tensor (8, 16) float32"}]
    assert out["settings"]["template"] == "mine.toml"


@pytest.mark.parametrize("content, message", [
    ("user = 'hi ${nonsense}'\n", "unknown placeholder ${nonsense} in 'user'"),
    ("usr = 'hi'\n", "unknown key(s) usr"),
    ("max_examples = 'two'\n", "max_examples must be an integer"),
])
def test_bad_template_is_one_line(pkb_invoke, tmp_path, content, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(content)
    result = pkb_invoke("prompt", "--problem", "1", "--backend", "reference", "--size", "tiny",
                        "--hardware", "h200_2", "--template", bad)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("Error: prompt template ")
    assert message in result.output


@pytest.mark.parametrize("args, message", [
    (["--problem", "1", "--nproc", "16", "--hardware", "h100_8"], "--nproc 16 but the h100_8 machine has 8 GPU(s)"),
    (["--problem", "33", "--nproc", "3", "--hardware", "h100_8", "--size", "tiny"],
     "problem 33_ulysses_all_to_all_tensor_primitive does not run with 3 ranks: M = 16 rows do not split"),
    (["--problem", "9999", "--hardware", "h100_8"], "unknown problem '9999'"),
])
def test_bad_requests_are_one_line(pkb_invoke, args, message):
    result = pkb_invoke("prompt", "--backend", "reference", *args)
    assert result.exit_code == 1
    assert message in result.output.strip().splitlines()[-1]


class _ThirdPartyBackend:
    """A backend from another distribution, without prompt material."""

    @hookimpl
    def pkb_backend_info(self):
        return BackendInfo(name="thirdparty", devices=("cuda",), description="Kernels in ThirdPartyLang")


def _thirdparty_prompt():
    return BackendPrompt(instructions="Use tpl.launch(kernel, grid) for everything.",
                         examples=(PromptExample("1", "def solution(tensor):\n    return tpl_allreduce(tensor)\n",
                                                 notes="One call does it."),))


class _ThirdPartyWithPrompt:
    """The same backend with ``BackendInfo.prompt``."""

    @hookimpl
    def pkb_backend_info(self):
        return BackendInfo(name="thirdparty", devices=("cuda",), description="Kernels in ThirdPartyLang",
                           prompt=_thirdparty_prompt)


def test_third_party_backend_gets_a_prompt_without_the_hook(pkb_invoke):
    pm = get_plugin_manager(extra_plugins=[_ThirdPartyBackend()])
    text = _prompt(pkb_invoke, "--problem", "2", "--backend", "thirdparty", "--hardware", "h200_2",
                   "--device", "cuda", pm=pm)  # a GPU-only backend: judged on GPUs, at their defaults
    assert "Kernels in ThirdPartyLang" in text
    assert "contributes no further instructions" in text
    assert "- `tensor`: tensor (1024, 1024) bfloat16" in text and "no NCCL, no gloo" in text
    assert "Worked example" not in text


def test_backend_prompt_supplies_instructions_and_examples(pkb_invoke):
    pm = get_plugin_manager(extra_plugins=[_ThirdPartyWithPrompt()])
    text = _prompt(pkb_invoke, "--problem", "2", "--backend", "thirdparty", "--hardware", "h200_2", pm=pm)
    assert "Use tpl.launch(kernel, grid) for everything." in text
    assert "## Worked example: problem 1_allreduce for the `thirdparty` backend" in text
    assert "One call does it." in text and "return tpl_allreduce(tensor)" in text
    assert "dist.all_reduce(out)" in text  # the example's reference, read from the registry
    # the material belongs to its own backend
    assert "tpl.launch" not in _prompt(pkb_invoke, "--problem", "2", "--backend", "reference",
                                       "--hardware", "h200_2", "--size", "tiny", pm=pm)


def test_problem_specific_rules_name_mutated_arguments_and_tolerance(pkb_invoke):
    clip = _prompt(pkb_invoke, "--problem", "21", "--backend", "reference", "--size", "tiny", "--hardware", "h200_2")
    assert "Never write into an input, except `grad_tensors`, which the reference updates in place" in clip
    quantized = _prompt(pkb_invoke, "--problem", "44", "--backend", "triton", "--size", "tiny", "--hardware", "h200_2",
                        "--precision", "bf16")
    assert "This problem sets TOLERANCE = {'rtol': 0.01, 'atol': 0.0001}, which replaces the defaults." in quantized
    assert "bfloat16 (the working dtype): rtol=0.01, atol=0.0001" in quantized

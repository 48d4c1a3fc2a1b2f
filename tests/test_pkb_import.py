"""`pkb import-pkb SRC --out DST`: PKB solution folders into pkb's <id>_<name>.py naming.

The trees here are synthetic PKB-style files written by the tests: each defines
``solution`` with the argument names of the problem it is meant for (taken from
pkb's own references), so the signature checks see what real trees show.
"""
import json

import pytest

from pkb_core.problem.pkb_import import (
    EARLY_NAMES,
    parse_file_name,
    plan_import,
    problems_from_specs,
)
from pkb_core.plugin.manager import get_plugin_manager
from pkb_core.problem.registry import build_registry


@pytest.fixture(scope="module")
def problems():
    return problems_from_specs(build_registry(get_plugin_manager()))


def solution_file(params, body="return None", helper=True):
    head = "from utils.cuda_helpers import compile_cuda_extension\n\n" if helper else ""
    return f"{head}def solution({', '.join(params)}):\n    {body}\n"


def write_tree(folder, files: dict, problems):
    """``files``: {file name: today's problem id whose signature it has (or a tuple of names)}."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, meant in files.items():
        params = meant if isinstance(meant, tuple) else problems[meant].params
        (folder / name).write_text(solution_file(params))


def early_tree(folder, problems, backend="cuda"):
    files = {
        f"1_allreduce_{backend}.py": 1,
        f"11_gemm_allgather_AT_{backend}.py": 11,
        f"12_gemm_allgather_{backend}.py": 12,
        f"14_gemm_allscatter_{backend}.py": 14,
        f"18_rms_norm_{backend}.py": 18,
        f"32_fused_moe_fwd_lora_{backend}.py": 32,
        f"34_ulysses_all_to_all_tensor_primitive_{backend}.py": 33,
        f"41_ddp_{backend}.py": 40,
        f"47_fsdp_adamw_sharded_{backend}.py": ("flat_param_shard", "flat_grad_shard", "lr"),
        f"51_{backend}.py": 50,  # no name: 49, 50, 51 share a signature; the folder's numbering decides
        f"48_step_{backend}.py": 47,  # a name no problem has: early 48 is today's 47 by signature
        f"33_mystery_{backend}.py": 33,  # no 33 in the early numbering
        f"88_conv2d_boundary_exchange_{backend}.py": 87,
    }
    write_tree(folder, files, problems)
    return files


def today_tree(folder, problems, backend="triton"):
    files = {
        f"1_allreduce_{backend}.py": 1,
        f"11_allgather_gemm_AT_{backend}.py": 11,
        f"12_gemm_allgather_{backend}.py": 14,  # name says 14 today, id says 12: 14's signature decides
        f"18_tp_rms_norm_{backend}.py": 18,
        f"33_ulysses_all_to_all_tensor_primitive_{backend}.py": 33,
        f"46_gemv_decode_{backend}.py": 46,
        f"50_{backend}.py": 50,
        f"87_conv2d_boundary_exchange_{backend}.py": 87,
        f"99_nothing_{backend}.py": 1,
        f"40_thing_{backend}.py": ("a", "b", "c"),  # neither today's 40 nor early 40 (today's 39)
    }
    write_tree(folder, files, problems)
    return files


def by_source(plan):
    return {p.source.name: p for p in plan.placed}, {u.source.name: u.reason for u in plan.unplaced}


def test_file_names_parse_into_id_name_backend():
    assert parse_file_name("12_gemm_allgather_cuda") == (12, "gemm_allgather", "cuda")
    assert parse_file_name("2_allgather_parallelkittens") == (2, "allgather", "parallelkittens")
    assert parse_file_name("51_triton") == (51, "", "triton")
    assert parse_file_name("7_reducescatter") == (7, "reducescatter", None)
    assert parse_file_name("run_local") is None


def test_early_numbering_is_detected_and_mapped(problems, tmp_path):
    early_tree(tmp_path / "src", problems)
    plan = plan_import(tmp_path / "src", problems)
    (folder,) = plan.folders
    assert folder.numbering == "early"
    placed, unplaced = by_source(plan)
    expected = {
        "1_allreduce_cuda.py": "1_allreduce", "11_gemm_allgather_AT_cuda.py": "11_allgather_gemm_AT",
        "12_gemm_allgather_cuda.py": "12_allgather_gemm", "14_gemm_allscatter_cuda.py": "14_gemm_allgather",
        "18_rms_norm_cuda.py": "18_tp_rms_norm", "32_fused_moe_fwd_lora_cuda.py": "32_fused_moe_fwd_lora",
        "34_ulysses_all_to_all_tensor_primitive_cuda.py": "33_ulysses_all_to_all_tensor_primitive",
        "41_ddp_cuda.py": "40_ddp", "51_cuda.py": "50_moe_ep_wide", "48_step_cuda.py": "47_fsdp_step_e2e",
        "88_conv2d_boundary_exchange_cuda.py": "87_conv2d_boundary_exchange",
    }
    assert {name: p.dest.as_posix() for name, p in placed.items()} == {k: f"{v}.py" for k, v in expected.items()}
    assert placed["41_ddp_cuda.py"].numbering == "early"
    assert "by signature" in placed["51_cuda.py"].how and "by signature" in placed["48_step_cuda.py"].how
    assert set(unplaced) == {"47_fsdp_adamw_sharded_cuda.py", "33_mystery_cuda.py"}
    assert "PKB dropped fsdp_adamw_sharded" in unplaced["47_fsdp_adamw_sharded_cuda.py"]
    assert "no problem 33 in the early numbering" in unplaced["33_mystery_cuda.py"]
    assert set(EARLY_NAMES) == {11, 12, 14, 18}


def test_todays_numbering_and_what_cannot_be_mapped(problems, tmp_path):
    today_tree(tmp_path / "src", problems)
    plan = plan_import(tmp_path / "src", problems)
    (folder,) = plan.folders
    assert folder.numbering == "today"
    placed, unplaced = by_source(plan)
    assert {name: p.problem.key for name, p in placed.items()} == {
        "1_allreduce_triton.py": "1_allreduce", "11_allgather_gemm_AT_triton.py": "11_allgather_gemm_AT",
        "12_gemm_allgather_triton.py": "14_gemm_allgather", "18_tp_rms_norm_triton.py": "18_tp_rms_norm",
        "33_ulysses_all_to_all_tensor_primitive_triton.py": "33_ulysses_all_to_all_tensor_primitive",
        "46_gemv_decode_triton.py": "46_gemv_decode", "50_triton.py": "50_moe_ep_wide",
        "87_conv2d_boundary_exchange_triton.py": "87_conv2d_boundary_exchange",
    }
    assert "solution(A, B)" in placed["12_gemm_allgather_triton.py"].how
    assert set(unplaced) == {"99_nothing_triton.py", "40_thing_triton.py"}
    assert "no problem 99" in unplaced["99_nothing_triton.py"]
    assert "solution(a, b, c) matches none of" in unplaced["40_thing_triton.py"]


def test_nested_trees_keep_their_folders_and_mixed_backends_split(problems, tmp_path):
    src = tmp_path / "pkb-checkout"
    early_tree(src / "solutions_cuda_bf16_h100_8_someone_model-a", problems)
    today_tree(src / "runs" / "solutions_triton_bf16_h100_8_someone_model-b", problems)
    write_tree(src / "reference", {"1_allreduce.py": 1}, problems)
    write_tree(src / "utils", {"cuda_helpers.py": ("name", "cuda_src")}, problems)
    write_tree(src / "mixed", {"1_allreduce_cuda.py": 1, "1_allreduce_triton.py": 1, "2_allgather_cuda.py": 2},
               problems)
    plan = plan_import(src, problems)
    dests = {p.dest.as_posix() for p in plan.placed}
    assert "solutions_cuda_bf16_h100_8_someone_model-a/40_ddp.py" in dests
    assert "runs/solutions_triton_bf16_h100_8_someone_model-b/46_gemv_decode.py" in dests
    assert {"mixed/cuda/1_allreduce.py", "mixed/triton/1_allreduce.py", "mixed/cuda/2_allgather.py"} <= dests
    assert not any(d.startswith("reference") or d.startswith("utils") for d in dests)
    assert any(s.source.as_posix() == "reference" for s in plan.skipped)
    assert any(s.source.as_posix() == "utils/cuda_helpers.py" for s in plan.skipped)


def test_two_files_for_one_problem_keep_the_exact_name(problems, tmp_path):
    write_tree(tmp_path / "src", {"12_allgather_gemm_cuda.py": 12, "12_gemm_allgather_cuda.py": 12}, problems)
    placed, unplaced = by_source(plan_import(tmp_path / "src", problems))
    assert list(placed) == ["12_allgather_gemm_cuda.py"]
    assert "already maps to 12_allgather_gemm.py" in unplaced["12_gemm_allgather_cuda.py"]


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------

def test_command_copies_reports_and_refuses_to_overwrite(pkb_invoke, problems, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    early_tree(src / "solutions_cuda_x", problems)
    today_tree(src / "solutions_triton_y", problems)
    result = pkb_invoke("import-pkb", src, "--out", dst)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert "solutions_cuda_x: early 88-problem numbering; 11 mapped, 2 not mapped" in lines
    assert "solutions_triton_y: today's numbering; 8 mapped, 2 not mapped" in lines
    not_mapped = [line for line in lines if "not mapped: " in line]
    assert len(not_mapped) == 4 and all(line.count(": ") >= 2 for line in not_mapped)
    assert lines[-1] == f"copied 19 files into {dst} from 2 folders; 4 not mapped"
    copied = dst / "solutions_cuda_x" / "33_ulysses_all_to_all_tensor_primitive.py"
    original = src / "solutions_cuda_x" / "34_ulysses_all_to_all_tensor_primitive_cuda.py"
    assert copied.read_bytes() == original.read_bytes()
    manifest = json.loads((dst / "pkb-import.json").read_text())
    assert len(manifest["files"]) == 19 and len(manifest["not_mapped"]) == 4
    # the copies are what `pkb run --solutions` pairs with the problems
    registry = build_registry(get_plugin_manager())
    for path in (dst / "solutions_cuda_x").glob("*.py"):
        assert registry.get(path.stem).key == path.stem

    again = pkb_invoke("import-pkb", src, "--out", dst)
    assert again.exit_code == 1
    assert again.output.strip().splitlines()[-1].startswith("Error: ")
    assert "already exist" in again.output and "--force" in again.output and "Traceback" not in again.output
    forced = pkb_invoke("import-pkb", src, "--out", dst, "--force")
    assert forced.exit_code == 0, forced.output


def test_links_and_special_files_in_a_tree_are_neither_read_nor_copied(pkb_invoke, problems, tmp_path):
    """A tree's link to a file only root may read was copied into a world-readable solution, and one
    to /dev/zero read until the machine ran out of memory (a hostile review, 2026-12-02)."""
    import os

    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, {"1_allreduce_triton.py": 1}, problems)
    secret = tmp_path / "secret.py"
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    os.symlink(secret, src / "2_allgather_triton.py")
    os.symlink("/dev/zero", src / "3_broadcast_triton.py")
    os.mkfifo(src / "4_reduce_triton.py")
    plan = plan_import(src, problems)
    skipped = {u.source.name: u.reason for u in plan.skipped}
    assert skipped == {"2_allgather_triton.py": "a symbolic link: not read or copied",
                       "3_broadcast_triton.py": "a symbolic link: not read or copied",
                       "4_reduce_triton.py": "not a regular file: not read or copied"}, skipped
    result = pkb_invoke("import-pkb", src, "--out", dst)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in dst.rglob("*.py")) == ["1_allreduce.py"]


def test_dry_run_writes_nothing(pkb_invoke, problems, tmp_path):
    today_tree(tmp_path / "src", problems)
    result = pkb_invoke("import-pkb", tmp_path / "src", "--out", tmp_path / "dst", "--dry-run", "-v")
    assert result.exit_code == 0, result.output
    assert "would copy 8 files" in result.output and "1_allreduce_triton.py -> " in result.output
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("case", ["missing", "file", "empty"])
def test_bad_input_is_one_clear_line(pkb_invoke, tmp_path, case):
    src = tmp_path / "src"
    if case == "file":
        src.write_text("not a folder")
    elif case == "empty":
        src.mkdir()
    result = pkb_invoke("import-pkb", src, "--out", tmp_path / "dst")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    expected = {"missing": "does not exist", "file": "is not a directory", "empty": "no solution files"}[case]
    assert expected in lines[0]

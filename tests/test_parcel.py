"""Parcels (pkb_core.harness.parcel) carry every tensor a problem or a solution can produce,
degenerate ones included, and read back exactly what was packed."""
import pytest
import torch

from pkb_core.harness.parcel import (TRUSTED, UNTRUSTED, ParcelError, pack, pack_into, packed_size, skeleton_end,
                                     stand_in_outputs, tensor_bytes, unpack, unpack_from)

_BASE = torch.arange(24, dtype=torch.float32).reshape(4, 6)

DEGENERATE = {
    "zero elements": torch.empty(0),
    "a zero-size dimension": torch.empty(3, 0, 2, dtype=torch.int64),
    "0-d": torch.tensor(3.5),
    "0-d complex": torch.tensor(1 + 2j, dtype=torch.complex64),
    "empty complex": torch.empty(0, 2, dtype=torch.complex128),
    "a transposed view": _BASE.t(),
    "a strided slice": _BASE[:, ::2],
    "expanded strides": torch.tensor([1.0, 2.0]).expand(5, 2),
    "an expanded empty tensor": torch.empty(1, 0).expand(4, 0),
    "a bfloat16 view": _BASE.bfloat16()[1:3],
    "empty bool": torch.empty(0, dtype=torch.bool),
}


@pytest.mark.parametrize("where", ["alone", "last", "first"])
@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_a_degenerate_tensor_reads_back_wherever_it_lies(tmp_path, name, where):
    # "last" is the case that broke problem 85: an empty tensor after 32 bytes of data was
    # given an aligned offset past the end of the file, and the read-back refused it.
    value = DEGENERATE[name]
    before = [torch.ones(8)] if where == "last" else []
    after = [torch.ones(3, dtype=torch.int32)] if where == "first" else []
    tree = {"out": before + [value] + after}
    path = tmp_path / "parcel"
    back = unpack(pack(tree, str(path)), str(path), limits=UNTRUSTED)["out"]
    got = back[len(before)]
    assert got.dtype == value.dtype and got.shape == value.shape
    assert torch.equal(got, value)


def test_an_empty_parcel_holds_only_empty_tensors(tmp_path):
    path = tmp_path / "parcel"
    skeleton = pack([torch.empty(0), torch.empty(2, 0)], str(path))
    assert path.stat().st_size == 0
    assert [t.shape for t in unpack(skeleton, str(path))] == [torch.Size([0]), torch.Size([2, 0])]


def test_an_offset_past_the_end_is_still_refused(tmp_path):
    path = tmp_path / "parcel"
    skeleton = pack([torch.ones(8)], str(path))
    skeleton["v"][0]["at"] = 64  # 32 bytes claimed beyond a 32-byte file
    with pytest.raises(ParcelError, match="lie outside the 32-byte parcel"):
        unpack(skeleton, str(path))


def test_a_fifo_where_the_parcel_should_be_is_refused_at_once(tmp_path):
    """A candidate that made its output path a FIFO held the judge's read until the job's deadline
    (no writer ever comes) and its job ended as the judge's error."""
    import os
    import threading

    skeleton = pack({"out": torch.ones(4)}, tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    refused = []
    reader = threading.Thread(target=lambda: refused.append(pytest.raises(ParcelError, unpack, skeleton,
                                                                          tmp_path / "fifo")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "the read blocked on the FIFO"
    assert "not a plain file" in str(refused[0].value)


@pytest.mark.parametrize("outputs", [[torch.zeros(10)], [torch.zeros(4096, dtype=torch.bfloat16)],
                                     (torch.zeros(1, dtype=torch.int8), {"x": torch.zeros(999)}), []])
@pytest.mark.parametrize("shapes", [[(1024,)], [(3, 5), (7,)], [(1,)], [(100_000,), (33,)]])
def test_the_harness_stand_in_exports_as_many_bytes_as_the_outputs_it_stands_for(outputs, shapes):
    """The ``harness`` batch exports a stand-in beside the placed set: laid out in front of the same
    arguments it fills the bytes the real outputs do, to the byte (they take whole alignments
    there), and nothing where the outputs are no tensor bytes."""
    args = [torch.zeros(shape, dtype=torch.bfloat16) for shape in shapes]
    fill = packed_size({"out": outputs, "args": args})
    stand_in = stand_in_outputs(args, fill, torch.device("cpu"))
    assert packed_size({"out": stand_in, "args": args}) == fill
    buffer = torch.zeros(fill, dtype=torch.uint8)
    skeleton = pack_into({"out": stand_in, "args": args}, buffer)
    assert skeleton_end(skeleton) == fill
    assert (stand_in is None) == (packed_size(outputs) == 0)


def test_a_layer_read_as_views_holds_what_is_written_after_it_was_read():
    """A ``torch.nn.Linear`` read from a slot as views (window mode reads a set before its gate
    and its bytes arrive after) takes its weight and bias from the slot's bytes as they are when
    it computes, not as they were when it was read; the launcher counts its tensors like any
    (``tensor_bytes``: the weight, then the bias), and a layer whose weight does not fit its
    features is refused."""
    layer = torch.nn.Linear(3, 2, dtype=torch.float32)
    tree = [torch.ones(4), layer]
    buffer = torch.zeros(packed_size(tree), dtype=torch.uint8)
    skeleton = pack_into([torch.zeros(4), torch.nn.Linear(3, 2)], buffer)  # what the slot held before
    read = unpack_from(skeleton, buffer, limits=TRUSTED, copy=False)
    pack_into(tree, buffer)  # the set arrives
    x = torch.randn(5, 3)
    assert torch.equal(read[1](x), layer(x)) and torch.equal(read[0], torch.ones(4))
    assert tensor_bytes(skeleton) == [16, 24, 8]
    skeleton["v"][1]["in"] = 2
    with pytest.raises(ParcelError, match=r"a Linear\(2, 2\) with a weight of shape \[2, 3\]"):
        unpack_from(skeleton, buffer, limits=TRUSTED)

"""What window mode's record says of each side's batches (pkb_core.conduct.window_rounds.Batches):
the warm-up batches are not the timed ones."""
from pkb_core.conduct.window_rounds import Batches
from pkb_core.contracts.commands_judge import Armed, WindowTimes


class _Run:
    """A judge of one rank whose timekeeper answers each batch as told (GPU, host engine)."""

    candidates = reference_group = None
    set_bytes = 64
    deadline = float("inf")

    def __init__(self, queued_ahead: list):
        self.queued_ahead = list(queued_ahead)

    def ask_judge(self, request):
        if type(request).__name__ == "ArmWindows":
            return [Armed(skeletons=[], region={"key": f"null.{len(self.queued_ahead) % 2}"})]
        return [WindowTimes(times_ns=[1000] * 4, status="ok", engine="host", queued_ahead=self.queued_ahead.pop(0))]


def test_the_share_queued_ahead_is_the_timed_batches():
    """A warm-up batch whose calls were not queued ahead (its first launches wait for the device)
    is not in ``queued_ahead_share``; a timed one that was not is its least."""
    batches = Batches(_Run([0, 4, 4, 2]), calls=3)
    batches.batch("null", "window/warm0")
    for i in range(3):
        batches.batch("null", f"window/{i}/null")
    found = batches.diagnostics()["null"]
    assert found["queued_ahead_share"] == [1.0, 0.5]
    assert found["gate_regions"] == 2


class _DrawingRun(_Run):
    """A judge whose timekeeper copies out the windows it was told to, each copy 500 us inside
    its window (the host engine's snapshot of large outputs), the others 10 us."""

    set_bytes = 1 << 20  # a batch's sets over SNAPSHOT_ALL_BYTES: its snapshots are drawn

    def __init__(self):
        super().__init__([])
        self.drawn = []

    def ask_judge(self, request):
        if type(request).__name__ == "ArmWindows":
            return [Armed(skeletons=[], region={"key": "null.0"})]
        self.drawn.append(request.snapshots)
        k = 12
        return [WindowTimes(times_ns=[(500_000 if w in request.snapshots else 10_000) for w in range(k)],
                            status="ok", engine="host")]


def test_a_window_drawn_for_a_snapshot_is_not_timed():
    """A batch whose snapshots are drawn times the windows not drawn: the copy into the snapshot is
    in a drawn window alone, and a batch's median moved with how many were drawn (at 8 MiB on
    2xH200 a median of 1.9 ms for one side, 0.46 ms for the other)."""
    run = _DrawingRun()
    batches = Batches(run, calls=11)
    for i in range(20):
        timed = batches.batch("null", f"window/{i}/null")
        drawn = run.drawn[-1]
        assert drawn, "a large batch draws its snapshots"
        expected = [10.0] * len([w for w in range(1, 12) if w not in drawn])
        assert timed == (expected or [500.0 if w in drawn else 10.0 for w in range(1, 12)])

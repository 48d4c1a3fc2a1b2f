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

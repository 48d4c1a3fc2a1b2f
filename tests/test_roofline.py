"""The physics floor (pkb_core.machine.roofline): a rate the machine does not have gives no floor."""
import pytest

from pkb_core.contracts.calibration import Calibration
from pkb_core.machine.roofline import below_floor, speed_of_light

TRAFFIC = {"link_bytes": 2e9, "hbm_bytes": 4e9, "flops": 0}


def _calibration(link_gbps: float) -> Calibration:
    return Calibration(link_gbps=link_gbps, hbm_gbps=4000.0, matmul_tflops=700.0, matmul_dtype="bf16",
                       method="test")


def test_the_slowest_term_is_the_floor():
    floor = speed_of_light(TRAFFIC, _calibration(400.0))
    assert floor.bound == "link" and floor.floor_ms == pytest.approx(5.0) and floor.hbm_ms == pytest.approx(1.0)
    assert below_floor(3.0, floor) is not None and below_floor(4.5, floor) is None


def test_a_machine_with_no_link_gives_the_link_no_floor():
    """A one-GPU machine's calibration measured no link (0 GB/s): the memory term bounds the call,
    never a division by zero (a job at one rank ended `error` that way on one H200)."""
    floor = speed_of_light(TRAFFIC, _calibration(0.0))
    assert floor.link_ms == 0.0 and floor.bound == "memory" and floor.floor_ms == pytest.approx(1.0)

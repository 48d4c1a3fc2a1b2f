"""Speed of light: a problem's traffic model at this machine's calibrated rates.

``floor_ms = max(link_bytes / link rate, hbm_bytes / memory rate, flops / matmul rate)``
is the least time any implementation can take; the term that dominates names
the bound. A measured time far below it is a measurement error or cheating
(rigor rule 17): such candidates are flagged.
"""
from __future__ import annotations

from pkb_core.contracts.calibration import Calibration
from pkb_core.contracts.timing import Floor

#: A candidate faster than this fraction of the floor is rejected.
FLOOR_MARGIN = 0.8


def speed_of_light(traffic: dict, calibration: Calibration) -> Floor:
    """The floor of one call, and the time each term alone would take."""
    terms = {
        "link": _ms(traffic.get("link_bytes", 0), calibration.link_gbps * 1e9),
        "memory": _ms(traffic.get("hbm_bytes", 0), calibration.hbm_gbps * 1e9),
        "compute": _ms(traffic.get("flops", 0), calibration.matmul_tflops * 1e12),
    }
    bound = max(terms, key=terms.get)
    return Floor(floor_ms=terms[bound], bound=bound, link_ms=terms["link"], hbm_ms=terms["memory"],
                 compute_ms=terms["compute"])


def _ms(amount: float, rate_per_s: float) -> float:
    """Milliseconds ``amount`` takes at ``rate_per_s``; 0 (no floor from this term) where the
    machine has no such rate (a calibration of one GPU measured no link)."""
    return amount / rate_per_s * 1e3 if rate_per_s > 0 else 0.0


def below_floor(median_ms: float, sol: Floor) -> str | None:
    """A reason when ``median_ms`` is impossible under the floor, else None."""
    if sol.floor_ms > 0 and median_ms < FLOOR_MARGIN * sol.floor_ms:
        return (f"measured {median_ms:.4g} ms is below the physical floor {sol.floor_ms:.4g} ms "
                f"({sol.bound}-bound at the calibrated rates)")
    return None

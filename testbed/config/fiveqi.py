"""The standardized 5QIs and their default priority levels (3GPP TS 23.501, Table 5.7.4-1)."""

from __future__ import annotations

from typing import Literal

ResourceType = Literal["GBR", "non-GBR", "delay-critical GBR"]

# 5QI -> (resource type, default priority level); a lower level is served first
FIVE_QI: dict[int, tuple[ResourceType, int]] = {
    # GBR
    1: ("GBR", 20), 2: ("GBR", 40), 3: ("GBR", 30), 4: ("GBR", 50),
    65: ("GBR", 7), 66: ("GBR", 20), 67: ("GBR", 15),
    71: ("GBR", 56), 72: ("GBR", 56), 73: ("GBR", 56), 74: ("GBR", 56),
    75: ("GBR", 25),  # V2X messages (Release 15; later releases moved V2X to 79)
    76: ("GBR", 56),
    # non-GBR
    5: ("non-GBR", 10), 6: ("non-GBR", 60), 7: ("non-GBR", 70), 8: ("non-GBR", 80),
    9: ("non-GBR", 90), 69: ("non-GBR", 5), 70: ("non-GBR", 55), 79: ("non-GBR", 65),
    80: ("non-GBR", 68),
    # delay-critical GBR
    82: ("delay-critical GBR", 19), 83: ("delay-critical GBR", 22),
    84: ("delay-critical GBR", 24), 85: ("delay-critical GBR", 21),
    86: ("delay-critical GBR", 18), 87: ("delay-critical GBR", 25),
    88: ("delay-critical GBR", 25), 89: ("delay-critical GBR", 25),
    90: ("delay-critical GBR", 25),
}
DEFAULT_FIVE_QI = 9  # a UE group's 5QI unless it names one: best-effort internet


def priority_level(five_qi: int) -> int:
    """The default priority level of a standardized 5QI; KeyError for one the table lacks."""
    return FIVE_QI[five_qi][1]


def undefined_message(five_qi: int) -> str:
    """The one line a 5QI outside Table 5.7.4-1 gets at load."""
    known = ", ".join(str(q) for q in sorted(FIVE_QI))
    return (f"5QI {five_qi} is not a standardized 5QI of 3GPP TS 23.501 Table 5.7.4-1 "
            f"(defined: {known})")

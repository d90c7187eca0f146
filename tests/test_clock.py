"""ScenarioClock: the one place scenario and wall time convert."""

import pytest

from testbed.clock import REAL_TIME, ScenarioClock


def test_scenario_and_wall_time_convert_both_ways():
    clock = ScenarioClock(16)
    assert clock.wall(30.0) == 30.0 / 16 and clock.scenario(clock.wall(30.0)) == 30.0
    assert REAL_TIME.real_time and not clock.real_time
    assert REAL_TIME.wall(7.0) == REAL_TIME.scenario(7.0) == 7.0
    assert clock.argv() == ["--time-scale", "16"]


@pytest.mark.parametrize("scale", [0, -1, float("nan"), float("inf")])
def test_a_time_scale_that_is_not_a_positive_number_is_refused(scale):
    with pytest.raises(ValueError, match="positive number"):
        ScenarioClock(scale)


def test_the_balancer_judges_a_latency_with_only_the_network_part_divided():
    """30 ms wall of which 20 in the replica, at time scale 4: 20 + 10/4 against the wall SLO;
    without a replica's time, or in real time, nothing is compressed."""
    clock = ScenarioClock(4)
    assert clock.compresses(30.0, 20.0) and clock.compressed(30.0, 20.0) == 22.5
    assert not clock.compresses(30.0, None)
    assert not clock.compresses(30.0, 40.0)  # a replica's clock ahead of the balancer's: as measured
    assert not REAL_TIME.compresses(30.0, 20.0)


def test_no_module_converts_time_with_a_raw_time_scale():
    """DESIGN.md, "Pace and the clock": nothing outside testbed/clock.py multiplies or divides by
    a time scale; each converts through a ScenarioClock (one home for what a scale compresses)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "testbed"

    def names_a_time_scale(node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        return name in ("time_scale", "ts")

    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div)
                    and (names_a_time_scale(node.left) or names_a_time_scale(node.right))):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found


def test_a_request_is_placed_on_the_compressed_schedule_and_held_by_what_it_took_off():
    """Due at 100, arrived at 100.004 (4 ms of path) at time scale 4: placed 1 ms after its due
    moment and its answer held the other 3 ms, so the client sees the path's 4 ms once; in real
    time, or with a due moment at or after the arrival (a skewed clock), as it arrived."""
    placed, hold = ScenarioClock(4).placed(100.0, 100.004)
    assert placed == pytest.approx(100.001) and hold == pytest.approx(0.003)
    assert REAL_TIME.placed(100.0, 100.004) == (100.004, 0.0)
    assert ScenarioClock(4).placed(100.01, 100.004) == (100.004, 0.0)
    assert ScenarioClock(4).placed(float("nan"), 100.004) == (100.004, 0.0)

"""The live view tells the truth: the cell it shows is the one starting, the whole run's time
left, and plain lines (no redrawn frames) when the output is not a terminal."""

import io
from types import SimpleNamespace

from rich.console import Console

from testbed.metrics.window import WindowMetrics
from testbed.scenario.live import LiveView


def _cell(i: int):
    return SimpleNamespace(index=i, label=f"service={['imgcls', 'tts', 'chatbot'][i]}")


def _render(view: LiveView) -> str:
    out = Console(file=io.StringIO(), width=200)
    out.print(view)
    return out.file.getvalue()


def test_a_new_cell_shows_none_of_the_previous_cells_services():
    view = LiveView(Console(file=io.StringIO()), [_cell(0), _cell(1)], 1, enabled=False)
    view.set_phase(_cell(0), 0, "running", 15)
    view.update([("imgcls", WindowMetrics("imgcls", 5, 150, 150, 0, 0.5, 6, 110.0), 6, 6)], 3.0)
    assert "imgcls" in _render(view)
    view.set_phase(_cell(1), 0, "starting replicas")
    text = _render(view)
    assert "imgcls" not in text.split("starting replicas")[1] and "service=tts" in text
    assert "req/s (scenario time" in text


def test_the_whole_runs_time_left_follows_finished_cells():
    view = LiveView(Console(file=io.StringIO()), [_cell(i) for i in range(3)], 2, enabled=False)
    assert view.run_eta_s() is None  # nothing to go by before a cell has finished
    view.set_phase(_cell(0), 0, "running")
    view._cell_started -= 20  # the first cell took 20 s
    view.set_phase(_cell(0), 1, "running")
    eta = view.run_eta_s()
    assert eta is not None and 95 <= eta <= 100.1  # 5 cells of ~20 s left
    assert "whole run ~1.7 min left" in _render(view)


def test_piped_output_gets_plain_lines_not_a_live_view():
    piped = Console(file=io.StringIO(), force_terminal=False)
    view = LiveView(piped, [_cell(0)], 1, enabled=True)
    assert not view.enabled
    view.set_phase(_cell(0), 0, "running", 15)
    assert piped.file.getvalue() == "cell 1 (service=imgcls), rep 1: running\n"
    assert LiveView(Console(file=io.StringIO(), force_terminal=True), [_cell(0)], 1).enabled

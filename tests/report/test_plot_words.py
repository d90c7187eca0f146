"""What the report's figures say beside their data: all-zero SLO panels are labelled, over-time
figures name their cell, rate axes start at zero."""

import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from testbed.report import plots


def test_an_all_zero_panel_says_no_violations_and_a_nonzero_one_does_not():
    fig, (zero, some) = plt.subplots(1, 2)
    plots._note_if_all_zero(zero, [0.0, 0.0])
    plots._note_if_all_zero(some, [0.0, 0.02])
    assert [t.get_text() for t in zero.texts] == ["no violations"]
    assert list(some.texts) == []
    plt.close(fig)


def test_slicing_bars_label_an_all_zero_slo_panel(tmp_path: Path, monkeypatch):
    rows = [{"service": "tts", "iperf_flows": 40, "slicing": s, "slo_violation_rate": 0.0,
             "mean_latency_ms": 300.0} for s in (True, False)]
    seen = []
    real = plots._note_if_all_zero
    monkeypatch.setattr(plots, "_note_if_all_zero",
                        lambda ax, values, what="no violations": (seen.append(list(values)),
                                                                  real(ax, values, what)))
    (path,) = plots.slicing_bars(rows, tmp_path)
    assert path.exists() and seen == [[0.0, 0.0]]


def test_over_time_figure_names_its_cell_and_starts_rates_at_zero(tmp_path: Path, monkeypatch):
    cell = tmp_path / "cells" / "00-base" / "rep-0"
    cell.mkdir(parents=True)
    (cell / "samples.jsonl").write_text("".join(json.dumps(
        {"t": t, "service": "imgcls", "ready": 1, "desired": 1, "arrivals_total": 30 * t,
         "violations_total": 0, "utilization": 0.5, "mean_latency_ms": 100.0}) + "\n"
        for t in range(1, 20)))
    titles, ylims = [], []
    real_savefig = plt.Figure.savefig

    def spy(fig, *a, **k):
        titles.append(fig._suptitle.get_text() if fig._suptitle else None)
        ylims.append(fig.axes[1].get_ylim())
        return real_savefig(fig, *a, **k)
    monkeypatch.setattr(plt.Figure, "savefig", spy)
    assert plots.timeseries(cell, tmp_path, "00-base", title="cell base, rep 1") is not None
    (low, high), = ylims
    # from zero, padded a little below it: a rate of 0 would lie on the frame
    assert titles == ["cell base, rep 1"] and -0.05 * high < low < 0


@pytest.mark.parametrize("worst", [0.0, 0.02, 0.5, 1.0])
def test_every_violation_line_lies_inside_the_frame(worst: float):
    """A cell whose every request missed its SLO drew its 100 % line on the frame (issue 43)."""
    low, high = plots.violation_ylim(worst)
    assert low < 0 < 100 * worst < high or (worst == 0 and low < 0 < high)
    assert high >= 10  # a small rate stays visible

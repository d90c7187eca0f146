"""Threshold tuning: values stay in Tables 4.7/4.8's grids and the best trial is reported."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.load.trace import Trace
from testbed.profiles import paper

pytest.importorskip("optuna")

from testbed.train.tune import tune


def _on_grid(value: float, start: float, end: float, step: float) -> bool:
    k = (value - start) / step
    return start - 1e-9 <= value <= end + 1e-9 and abs(k - round(k)) < 1e-6


def _wave() -> Trace:
    return Trace("wave", np.ones(3600), 20 + 15 * np.sin(np.arange(3600) / 600.0))


def test_tune_v2_searches_table_4_8_and_reports_the_best_trial():
    seen: list[float] = []
    result = tune("chatbot", _wave(), rule="v2", trials=4, progress=lambda n, v: seen.append(v))
    assert len(seen) == 4 and result.trials == 4
    assert result.best_reward == pytest.approx(max(seen))
    for name, value in result.best_params.items():
        assert _on_grid(value, *paper.RULE_V2_SEARCH[name]), (name, value)
    assert result.paper_params == paper.RULE_V2_THRESHOLDS["chatbot"]


def test_tune_v1_keeps_the_dependent_ranges_ordered():
    result = tune("tts", _wave(), rule="v1", trials=3)
    p = result.best_params
    assert p["inst_util_high_2"] >= p["inst_util_high_1"]
    assert p["inst_util_low_1"] >= p["inst_util_low_2"]


def test_tune_rejects_an_unknown_rule():
    with pytest.raises(ConfigError, match="rule"):
        tune("tts", _wave(), rule="v3", trials=1)

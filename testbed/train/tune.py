"""Optuna search of rule-based thresholds over Tables 4.7/4.8 ranges, scored by Eq. 3.2 on a trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.profiles import paper
from testbed.scaler.policies import RuleV1, RuleV2
from testbed.train.evaluate import evaluate


@dataclass(frozen=True)
class TuneResult:
    service: str
    rule: str
    best_params: dict[str, float]
    best_reward: float
    paper_params: dict[str, float]
    paper_reward: float  # the paper's thresholds scored on the same trace
    trials: int


def _suggest(trial, space: dict, name: str, chosen: dict[str, float]) -> float:
    lo, hi, step = space[name]
    lo = round(chosen[lo], 6) if isinstance(lo, str) else lo  # a grid value, without float noise
    hi = round(lo + int((hi - lo) / step + 1e-9) * step, 6)
    return trial.suggest_float(name, lo, hi, step=step) if hi - lo >= step else lo


def tune(
    service: str,
    trace: Trace,
    *,
    rule: str = "v2",
    trials: int = 100,
    ratio: float | None = None,
    total_units: int = paper.TOTAL_UNITS,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> TuneResult:
    """Maximise the mean reward of rule `v1` or `v2` for `service` alone on `trace` (Section 4.4.4)."""
    try:
        import optuna
    except ImportError:
        raise MissingRequirement("tuning needs optuna: pip install 'testbed[drl]'") from None
    if rule not in ("v1", "v2"):
        raise ConfigError([ConfigProblem("<tune>", None, "rule", f"unknown rule {rule!r}; use v1 or v2")])
    cls, space, table = (
        (RuleV1, paper.RULE_V1_SEARCH, paper.RULE_V1_THRESHOLDS)
        if rule == "v1"
        else (RuleV2, paper.RULE_V2_SEARCH, paper.RULE_V2_THRESHOLDS)
    )
    ratio = paper.DEFAULT_RATIOS[service] if ratio is None else ratio

    def score(params: dict[str, float]) -> float:
        policy = cls(**params)
        return evaluate(
            {service: policy}, {service: trace}, {service: ratio}, total_units=total_units, seed=seed
        )[service].reward

    def objective(trial) -> float:
        chosen: dict[str, float] = {}
        for name in space:
            chosen[name] = _suggest(trial, space, name, chosen)
        value = score(chosen)
        if progress is not None:
            progress(trial.number + 1, value)
        return value

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=trials)
    return TuneResult(
        service,
        f"rule_{rule}",
        dict(study.best_params),
        float(study.best_value),
        dict(table[service]),
        score(dict(table[service])),
        trials,
    )

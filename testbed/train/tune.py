"""Optuna search of rule-based thresholds over Tables 4.7/4.8 ranges, scored by Eq. 3.2 on a trace.

The study lives in an Optuna storage: a journal file by default (several processes on one machine,
or on machines sharing the file system, can work on it at once), or any database URL Optuna
accepts (`sqlite:///…`, `postgresql://…`) for machines that share a database. Workers that name
the same storage and study share its trials, Optuna's own distributed mode; `trials` caps the
study's finished trials whichever worker ran them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles, paper
from testbed.scaler.policies import RuleV1, RuleV2
from testbed.train.evaluate import default_ratio, evaluate


@dataclass(frozen=True)
class TuneResult:
    service: str
    rule: str
    best_params: dict[str, float]
    best_reward: float
    paper_params: dict[str, float]  # the profile's thresholds: Tables 4.9/4.10 for the paper's three
    paper_reward: float  # those thresholds scored on the same trace
    trials: int  # finished trials in the study (every worker's)
    storage: str = ""
    study: str = ""


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
    storage: str | None = None,
    study_name: str | None = None,
    profile: ServiceProfile | None = None,
) -> TuneResult:
    """Maximise the mean reward of rule `v1` or `v2` for `service` alone on `trace` (Section 4.4.4).

    `storage`: a database URL (`scheme://…`) or the path of a journal file; None keeps the study
    in memory. `study_name` joins the study of that name when the storage has it. `profile`: the
    service's profile in use (default the registry's); its `rule:` thresholds are the start the
    result compares with (the paper's Tables 4.9/4.10 for its three services)."""
    try:
        import optuna
    except ImportError:
        raise MissingRequirement("tuning needs optuna: pip install 'testbed[drl]'") from None
    profile = profile or default_profiles()[service]
    cls, space, start = _rule_search(rule, profile)
    ratio = default_ratio(service) if ratio is None else ratio

    def score(params: dict[str, float]) -> float:
        policy = cls(**params)
        return evaluate(
            {service: policy}, {service: trace}, {service: ratio}, total_units=total_units, seed=seed,
            profiles={service: profile},
        )[service].reward

    def objective(trial) -> float:
        chosen: dict[str, float] = {}
        for name in space:
            chosen[name] = _suggest(trial, space, name, chosen)
        value = score(chosen)
        if progress is not None:
            progress(trial.number + 1, value)
        return value

    name = study_name or f"tune-{service}-rule_{rule}"
    study, done = _joined_study(optuna, storage, name, seed)
    if done < trials:
        study.optimize(objective, n_trials=trials - done, callbacks=[
            optuna.study.MaxTrialsCallback(trials, states=(optuna.trial.TrialState.COMPLETE,))])
    return TuneResult(
        service,
        f"rule_{rule}",
        dict(study.best_params),
        float(study.best_value),
        dict(start),
        score(dict(start)),
        _finished(study),
        storage or "",
        name,
    )


def _rule_search(rule: str, profile: ServiceProfile) -> tuple[type, dict, dict[str, float]]:
    """Rule `v1` or `v2`: its policy class, its search space (Tables 4.7/4.8) and the profile's
    thresholds the search starts from."""
    if rule not in ("v1", "v2"):
        raise ConfigError([ConfigProblem("<tune>", None, "rule", f"unknown rule {rule!r}; use v1 or v2")])
    if rule == "v1":
        return RuleV1, paper.RULE_V1_SEARCH, profile.rule.v1()
    return RuleV2, paper.RULE_V2_SEARCH, profile.rule.v2()


def _joined_study(optuna, storage: str | None, name: str, seed: int):  # type: ignore[no-untyped-def]
    """The study `name` in `storage` (made, or joined where it exists) and how many trials it has
    finished, its sampler seeded for this worker."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", storage=open_storage(storage), study_name=name,
                                load_if_exists=True)
    done = _finished(study)
    # a worker joining a study samples from its own seed, or it would repeat the first's trials
    study.sampler = optuna.samplers.TPESampler(seed=seed + done)
    return study, done


def open_storage(storage: str | None):  # type: ignore[no-untyped-def]
    """None (in memory), a database URL as Optuna takes it, or a journal file's path."""
    import optuna

    if storage is None or "://" in storage:
        return storage
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(storage))


def _finished(study) -> int:  # type: ignore[no-untyped-def]
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))

"""The options of `testbed train`, declared once: each field of `TrainOptions` carries its default,
its help and how the command line writes it (`Opt`). The command's options (testbed.cli.train),
the `--config` file's fields (testbed.train.config_file), the PPO run's `TrainConfig` (its
research part is `PpoOptions`) and a model's manifest (`ModelMeta`: the config plus results) all
derive from these fields, and `command_line` writes a run back as the options that rerun it.

Plain dataclasses and typing only: `testbed --help` reads them without pydantic or numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, ConfigProblem
from testbed.train.trainers import TRAINERS, choices_help

RESEARCH = "Research options (also by name in a --config file)"  # --help's panel of them


@dataclass(frozen=True)
class Opt:
    """How the command line and the --config file show one option: its help; `panel` (--help's
    group; None: the everyday options); `flag` (a switch such as `--shared`); `path` (a file or
    folder: relative to the --config file); `text`, `parse`, `show` (an option the command line
    writes as text, e.g. `--scales 8,128`: its default there, how it is read and written);
    `argument` (positional); `ge`/`le`/`choices` (the file's bounds; the command line's are checked
    where the option is used); `envvar`."""

    help: str
    panel: str | None = None
    flag: str | None = None
    path: bool = False
    text: str | None = None
    parse: Callable[[str], Any] | None = None
    show: Callable[[Any], str] | None = None
    argument: bool = False
    ge: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None
    envvar: str | None = None


def option(default: Any, help: str, **how: Any) -> Any:
    """A dataclass field with its `Opt` (keywords: Opt's fields) as metadata.

    default: the library's default; help: --help's text."""
    return field(default=default, metadata={"opt": Opt(help, **how)})


def _numbers(name: str, cast: Callable[[str], Any], valid: Callable[[Any], bool], what: str
             ) -> Callable[[str], list[Any] | None]:
    def parse(text: str) -> list[Any] | None:
        if text.strip().lower() in ("", "none"):
            return None
        try:
            values = sorted({cast(x) for x in text.split(",") if x.strip()})
        except ValueError:
            values = []
        if not values or not all(valid(v) for v in values):
            raise ConfigError([ConfigProblem(f"--{name.replace('_', '-')}", None, name,
                                             f"{text!r}: {what}, or none")])
        return values
    return parse


def _range(text: str) -> tuple[float, float] | None:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        lo = hi = -1.0
    if not 0 < lo <= hi:
        raise ConfigError([ConfigProblem("--load-scales", None, "load_scales",
                                         f"{text!r}: LO,HI with 0 < LO <= HI, e.g. 1,8")])
    return lo, hi


def _commas(values: Any) -> str:
    return ",".join(f"{v:g}" for v in values) if values else "none"


@dataclass
class PpoOptions:
    """The research options of a Maskable PPO run (TrainConfig's, recorded in its model's
    manifest). `stop_at` ends training after that many steps while the learning rate still decays
    over `steps`. `scales`: pool sizes drawn per episode, the ratio scaled with them
    (testbed.train.wrappers.EpisodeDraws); validation then averages the smallest and the largest.
    `init_from`: a model file whose weights start training (an agent of fewer observation inputs
    gets zero weights on the new ones); its own validation is the first one (step 0). `loads` and
    `shared`: EpisodeDraws and SharedPool; validation covers each load, shared the same way.
    `pool_reward`, `partners`, `validate_pool`: shared episodes' reward, partner agents and
    checkpoint choice. `release_below` (needs `init_from`): the starting agent is first taught to
    scale down where its offered load per instance reads below this (testbed.train.distill).
    `hold_largest` (needs `init_from` and two `scales`): PPO trains the smaller pool sizes, each
    checkpoint is fitted to act at the largest as the starting agent does (distill.HeldScale).
    `like_testbed`: the share of episodes run with the local testbed's clients and balancer.
    `resume` (needs `checkpoints`): go on from the newest checkpoint up to `steps`."""

    tensorboard: str | None = option(None, "Directory for TensorBoard logs (ppo).", panel=RESEARCH)
    stop_at: int | None = option(
        None, "Stop after this many steps; the learning rate still decays over --steps.",
        panel=RESEARCH, ge=1)
    scales: list[int] | None = option(
        None, "ppo: pool sizes (units) drawn per episode, the ratio scaled with them, e.g. "
        "8,16,32,64,128; 'none' trains at 8 units only (the paper).", panel=RESEARCH,
        text="none", parse=_numbers("scales", int, lambda n: n >= 1, "comma-separated unit counts"),
        show=_commas)
    init_from: Path | None = option(
        None, "ppo: start from this model's weights (e.g. an agent of the 25-float observation).",
        panel=RESEARCH, path=True)
    loads: list[float] | None = option(
        None, "ppo: ratio multipliers drawn per 8-unit episode, e.g. 1,2 (Table 5.1's and 5.2's "
        "loads); 'none' keeps the ratio.", panel=RESEARCH, text="none",
        parse=_numbers("loads", float, lambda m: m > 0, "comma-separated multipliers > 0"),
        show=_commas)
    shared: bool = option(
        False, "ppo: 8-unit episodes and validation run the three services sharing the pool as "
        "the tables do (the other two on rule v2) instead of one service with randomised free "
        "units.", panel=RESEARCH, flag="--shared")
    pool_reward: bool = option(
        False, "ppo, with --shared: shared episodes reward (and validate) the three services' "
        "Eq. 3.2 together, so holding units another service needs costs the agent.",
        panel=RESEARCH, flag="--pool-reward")
    partners: Path | None = option(
        None, "ppo, with --shared: a folder of agents (SERVICE.zip, e.g. models) that decide the "
        "other two services in shared episodes instead of rule v2.", panel=RESEARCH, path=True)
    validate_pool: bool = option(
        False, "ppo, with --shared: choose checkpoints on the three services' rewards together in "
        "shared validation (training keeps the agent's own reward).", panel=RESEARCH,
        flag="--validate-pool")
    checkpoints: Path | None = option(
        None, "ppo: also write every validated model to this folder (SERVICE-STEPS.zip).",
        panel=RESEARCH, path=True)
    ent_coef: float = option(
        0.0, "ppo: entropy bonus of the PPO loss (sb3's ent_coef; 0, sb3's default, as the "
        "paper's Table 4.6 names none); more keeps a fine-tuned agent trying actions it rarely "
        "takes.", panel=RESEARCH, ge=0)
    release_below: float | None = option(
        None, "ppo, with --init-from: before training, teach the starting agent to scale down by "
        "one wherever its offered load per instance (the observation's request rate) reads below "
        "this, e.g. 0.13; PPO then fine-tunes that model.", panel=RESEARCH)
    hold_largest: bool = option(
        False, "ppo, with --init-from and two --scales or more: PPO trains the smaller pool sizes "
        "only and every checkpoint is fitted to act at the largest as the starting agent does.",
        panel=RESEARCH, flag="--hold-largest")
    like_testbed: float = option(
        0.0, "ppo: share of training episodes whose clients and balancer run as on the local "
        "testbed (testbed.sim.cluster.TESTBED_OPTIONS), e.g. 0.5; validation then adds that "
        "setup.", panel=RESEARCH, ge=0, le=1)
    resume: bool = option(
        False, "ppo, with --checkpoints DIR: go on from the newest DIR/SERVICE-STEPS.zip of an "
        "interrupted run (its steps and validations) up to --steps, with the same options.",
        panel=RESEARCH, flag="--resume")


@dataclass
class TrainOptions(PpoOptions):
    """Every option of `testbed train`: the everyday ones (service, traces, out, steps, seed, ...),
    the PPO run's research options (PpoOptions) and the share trainers' `load_scales`."""

    service: str | None = option(
        None, "A registered service or one of --profiles (ppo; ddpg and inss take the paper's "
        "three).", argument=True)
    policy: str = option("ppo", choices_help(), choices=tuple(TRAINERS))
    traces: Path | None = option(
        None, "Trace directory with train/, val/ and test/ (DURATION COUNT files). Default: the "
        "paper's traces, shipped with testbed (testbed/traces).", path=True,
        envvar="TESTBED_TRACES")
    trace: list[Path] | None = option(
        None, "A training trace of your own ('DURATION COUNT' lines or CSV, docs/traces.md; "
        "repeatable), in place of --traces' train/*.txt.", path=True)
    val_trace: Path | None = option(
        None, "The validation trace, in place of --traces' val/day6.txt (needed with --trace "
        "when --traces has no val/day6.txt).", path=True)
    trace_time_unit: str | None = option(
        None, "The time (or interval) unit of --trace/--val-trace CSV files whose header states "
        "none: ms, s, min, h.")
    trace_rate_unit: str | None = option(
        None, "The rate unit of --trace/--val-trace CSV files whose header states none: per_s, "
        "per_min, per_h.")
    profiles: Path | None = option(
        None, "Profile file merged over the registry's (services.yaml's format): it may change a "
        "service's fields or add services of your own.", path=True)
    out: Path | None = option(None, "Model file (default models/SERVICE.zip or models/POLICY.zip).",
                              path=True)
    steps: int | None = option(None, "Step budget (ppo: the paper's 300000; ddpg/inss: 12000).",
                               ge=1)
    seed: int = option(0, "Training seed.")
    gpus: int = option(2, "ddpg/inss: GPUs of the training cluster (Table 5.1: 8 units = 2).", ge=1)
    load_scales: tuple[float, float] | None = option(
        None, "ddpg/inss: LO,HI: train at Table 5.1's ratios times a factor drawn log-uniformly "
        "in [LO, HI] per episode and validate at both (default: 1 +- 30 %).", panel=RESEARCH,
        parse=_range, show=lambda v: f"{v[0]:g},{v[1]:g}")

    def ppo(self) -> dict[str, Any]:
        """The PPO run's research options (PpoOptions' fields) by name, for TrainConfig."""
        return {f.name: getattr(self, f.name) for f in fields(PpoOptions)}


# the command line's order: the everyday options, then the research panel
ORDER = [f.name for f in fields(TrainOptions) if f.name not in {g.name for g in fields(PpoOptions)}
         ] + [f.name for f in fields(PpoOptions)]
ORDER.insert(ORDER.index("gpus") + 1, ORDER.pop(ORDER.index("load_scales")))


def opt(name: str) -> Opt:
    """The Opt of TrainOptions' field `name`."""
    return TRAIN_FIELDS[name].metadata["opt"]


TRAIN_FIELDS = {f.name: f for f in fields(TrainOptions)}


def default(name: str) -> Any:
    """TrainOptions' default of `name`."""
    d = TRAIN_FIELDS[name].default
    return None if d is MISSING else d


def command_line(values: dict[str, Any], *, traces: str = "--traces TRACES") -> str:
    """The `testbed train` command that reruns a run of these options (every one not at its
    default, in --help's order), e.g. a model's manifest's `command`.

    values: options by TrainOptions' names (the service among them); traces: how the command
    names its traces (`--traces TRACES`, or the run's own `--trace`/`--val-trace` files)."""
    words = ["testbed", "train", str(values["service"]), traces]
    for name in ORDER:
        o, value = opt(name), values.get(name, default(name))
        if name in ("service", "traces", "trace", "val_trace", "trace_time_unit",
                    "trace_rate_unit", "out", "profiles", "policy",
                    "tensorboard", "checkpoints", "resume", "gpus", "load_scales"):
            continue  # where the run read and wrote, not what it trained
        if name in ("steps", "seed") or name == "scales":  # always written: the run's size
            words.append(f"--{name.replace('_', '-')} {o.show(value) if o.show else value}")
        elif value != default(name) and value is not None:
            flag = o.flag or f"--{name.replace('_', '-')}"
            words.append(flag if o.flag else
                         f"{flag} {o.show(value) if o.show else _word(value)}")
    return " ".join(words)


def _word(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)

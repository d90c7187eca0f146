"""Training commands: `train` (Maskable PPO for one service, or a share allocator) and `tune`."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from testbed.cli import TracesOpt, app, checks, console, show_traces
from testbed.cli.sim_inputs import ProfilesOpt, chosen_services, known_profiles, progress_bar
from testbed.errors import ConfigError, ConfigProblem
from testbed.paths import RUNS_DIR
from testbed.profiles import paper

if TYPE_CHECKING:
    from testbed.load.trace import Trace
    from testbed.train.config import TrainConfig

SCALES_DEFAULT = "none"

# `train`'s options, declared once here so that the command's signature reads as a list
ServiceArg = typer.Argument(None, help="A registered service or one of --profiles (ppo; ddpg and "
                            "inss take the paper's three).")
# the options a research run sets, often together: a --config file holds them by name
# (models/SERVICE.train.yaml); --help lists them apart from the everyday ones
RESEARCH_PANEL = "Research options (also by name in a --config file)"
TrainTraceOpt = typer.Option(
    None, "--trace", help="A training trace of your own ('DURATION COUNT' lines; repeatable), in "
    "place of --traces' train/*.txt.")
ValTraceOpt = typer.Option(
    None, help="The validation trace, in place of --traces' val/day6.txt (needed with --trace "
    "when --traces has no val/day6.txt).")
PolicyOpt = typer.Option("ppo", help="ppo (Maskable PPO), ddpg (sb3 DDPG) or inss (sb3 TD3).")
OutOpt = typer.Option(None, help="Model file (default models/SERVICE.zip or models/POLICY.zip).")
StepsOpt = typer.Option(None, help="Step budget (ppo: the paper's 300000; ddpg/inss: 12000).")
SeedOpt = typer.Option(0, help="Training seed.")
GpusOpt = typer.Option(2, help="ddpg/inss: GPUs of the training cluster (Table 5.1: 8 units = 2).")
TensorboardOpt = typer.Option(None, help="Directory for TensorBoard logs (ppo).",
                              rich_help_panel=RESEARCH_PANEL)
StopAtOpt = typer.Option(
    None, help="Stop after this many steps; the learning rate still decays over --steps.",
    rich_help_panel=RESEARCH_PANEL,
)
ScalesOpt = typer.Option(
    SCALES_DEFAULT,
    help="ppo: pool sizes (units) drawn per episode, the ratio scaled with them, e.g. "
    "8,16,32,64,128; 'none' trains at 8 units only (the paper).",
    rich_help_panel=RESEARCH_PANEL,
)
InitFromOpt = typer.Option(
    None, help="ppo: start from this model's weights (e.g. an agent of the 25-float observation).",
    rich_help_panel=RESEARCH_PANEL,
)
LoadScalesOpt = typer.Option(
    None, help="ddpg/inss: LO,HI: train at Table 5.1's ratios times a factor drawn log-uniformly "
    "in [LO, HI] per episode and validate at both (default: 1 +- 30 %).",
    rich_help_panel=RESEARCH_PANEL,
)
LoadsOpt = typer.Option(
    "none",
    help="ppo: ratio multipliers drawn per 8-unit episode, e.g. 1,2 (Table 5.1's and 5.2's "
    "loads); 'none' keeps the ratio.",
    rich_help_panel=RESEARCH_PANEL,
)
SharedOpt = typer.Option(
    False,
    "--shared",
    help="ppo: 8-unit episodes and validation run the three services sharing the pool as the "
    "tables do (the other two on rule v2) instead of one service with randomised free units.",
    rich_help_panel=RESEARCH_PANEL,
)
PoolRewardOpt = typer.Option(
    False,
    "--pool-reward",
    help="ppo, with --shared: shared episodes reward (and validate) the three services' "
    "Eq. 3.2 together, so holding units another service needs costs the agent.",
    rich_help_panel=RESEARCH_PANEL,
)
PartnersOpt = typer.Option(
    None,
    help="ppo, with --shared: a folder of agents (SERVICE.zip, e.g. models) that decide the "
    "other two services in shared episodes instead of rule v2.",
    rich_help_panel=RESEARCH_PANEL,
)
ValidatePoolOpt = typer.Option(
    False,
    "--validate-pool",
    help="ppo, with --shared: choose checkpoints on the three services' rewards together in "
    "shared validation (training keeps the agent's own reward).",
    rich_help_panel=RESEARCH_PANEL,
)
CheckpointsOpt = typer.Option(
    None, help="ppo: also write every validated model to this folder (SERVICE-STEPS.zip).",
    rich_help_panel=RESEARCH_PANEL,
)
EntCoefOpt = typer.Option(
    0.0, help="ppo: entropy bonus of the PPO loss (sb3's ent_coef; 0, sb3's default, as the "
    "paper's Table 4.6 names none); more keeps a fine-tuned agent trying actions it rarely takes.",
    rich_help_panel=RESEARCH_PANEL,
)
ReleaseBelowOpt = typer.Option(
    None,
    help="ppo, with --init-from: before training, teach the starting agent to scale down by one "
    "wherever its offered load per instance (the observation's request rate) reads below this, "
    "e.g. 0.13; PPO then fine-tunes that model.",
    rich_help_panel=RESEARCH_PANEL,
)
HoldLargestOpt = typer.Option(
    False,
    "--hold-largest",
    help="ppo, with --init-from and two --scales or more: PPO trains the smaller pool sizes only "
    "and every checkpoint is fitted to act at the largest as the starting agent does.",
    rich_help_panel=RESEARCH_PANEL,
)
LikeTestbedOpt = typer.Option(
    0.0,
    help="ppo: share of training episodes whose clients and balancer run as on the local "
    "testbed (testbed.sim.cluster.TESTBED_OPTIONS), e.g. 0.5; validation then adds that setup.",
    rich_help_panel=RESEARCH_PANEL,
)
ResumeOpt = typer.Option(
    False,
    "--resume",
    help="ppo, with --checkpoints DIR: go on from the newest DIR/SERVICE-STEPS.zip of an "
    "interrupted run (its steps and validations) up to --steps, with the same options.",
    rich_help_panel=RESEARCH_PANEL,
)


ConfigOpt = typer.Option(
    None, "--config", help="A YAML file of these options by name (init_from: ..., scales: [8, 128]; "
    "paths relative to it), e.g. models/imgcls.train.yaml, the shipped agent's run; an option "
    "given here wins over the file's.")


@app.command("train")
def train_cmd(
    ctx: typer.Context,
    service: str = ServiceArg,
    policy: str = PolicyOpt,
    traces: Path = TracesOpt,
    trace: list[Path] = TrainTraceOpt,
    val_trace: Path = ValTraceOpt,
    profiles_path: Path = ProfilesOpt,
    out: Path = OutOpt,
    steps: int = StepsOpt,
    seed: int = SeedOpt,
    gpus: int = GpusOpt,
    tensorboard: str = TensorboardOpt,
    stop_at: int = StopAtOpt,
    scales: str = ScalesOpt,
    init_from: Path = InitFromOpt,
    load_scales: str = LoadScalesOpt,
    loads: str = LoadsOpt,
    shared: bool = SharedOpt,
    pool_reward: bool = PoolRewardOpt,
    partners: Path = PartnersOpt,
    validate_pool: bool = ValidatePoolOpt,
    checkpoints: Path = CheckpointsOpt,
    ent_coef: float = EntCoefOpt,
    release_below: float = ReleaseBelowOpt,
    hold_largest: bool = HoldLargestOpt,
    like_testbed: float = LikeTestbedOpt,
    resume: bool = ResumeOpt,
    config_file: Path = ConfigOpt,
) -> None:
    """Train a policy on the simulator, keeping the best validated model: Maskable PPO for one
    service (Section 4.4.3), or a share allocator for all three on the GPU simulator (ddpg: the
    DDPG-MPS slides; inss: InSS's TD3 local stage). ddpg/inss take minutes here and write an entry
    in models/manifest.json. ppo shows the training episodes' and validation rewards as it goes
    (sums over an episode's periods, and per period: the tables' scale) and writes the learning
    curve beside the model (OUT.curve.json, OUT.curve.png).

    Example: testbed train chatbot --traces ../shared/traces --steps 300000
    Example: testbed train --policy ddpg --traces ../shared/traces --steps 12000
    Example: testbed train mysvc --profiles mysvc.yaml --trace day1.txt --val-trace day2.txt
    Example: testbed train --config models/imgcls.train.yaml --traces ../shared/traces --out new.zip
    """
    options = {k: v for k, v in locals().items() if k not in ("ctx", "config_file")}
    if config_file is not None:
        options.update(_file_options(ctx, config_file))
    _train(**options)


def _file_options(ctx: typer.Context, path: Path) -> dict[str, Any]:
    """The options `--config FILE` sets that the command line did not."""
    from testbed.train.config_file import load_train_file

    def defaulted(name: str) -> bool:  # by name: typer may bring its own click's ParameterSource
        source = ctx.get_parameter_source(name)
        return source is None or source.name in ("DEFAULT", "DEFAULT_MAP")

    return {k: v for k, v in load_train_file(path).items() if defaulted(k)}


def _train(*, service: str | None, policy: str, traces: Path, trace: list[Path] | None,
           val_trace: Path | None, profiles_path: Path | None, out: Path | None, steps: int | None,
           seed: int, gpus: int, tensorboard: str | None, stop_at: int | None, scales: str,
           init_from: Path | None, load_scales: str | None, loads: str, shared: bool,
           pool_reward: bool, partners: Path | None, validate_pool: bool, checkpoints: Path | None,
           ent_coef: float, release_below: float | None, hold_largest: bool, like_testbed: float,
           resume: bool) -> None:
    """`train` with its options merged: a share allocator, or Maskable PPO for one service."""
    scales_range = _load_scales(load_scales)  # checked before anything is read or started
    known = known_profiles(profiles_path)
    train_tr, val_tr = _training_days(traces, trace, val_trace)
    if policy in ("ddpg", "inss"):
        show_traces([*train_tr, *val_tr], console)
        _train_share(policy, train_tr, val_tr, out, steps=steps or 12_000, seed=seed, gpus=gpus,
                     load_scales=scales_range, profiles={s: known[s] for s in paper.TABLE_5_1.ratios})
        return
    if policy != "ppo":
        raise ConfigError(
            [ConfigProblem("--policy", None, "policy", f"unknown policy {policy!r}; use ppo, ddpg or inss")]
        )
    # numpy and the trainer: only once the arguments are checked
    from testbed.train.ppo import TrainConfig

    if service is None:
        raise ConfigError([ConfigProblem("SERVICE", None, "service", "ppo trains one service: name it")])
    svc = _one_service(service, known)
    config = TrainConfig(
        svc, steps=steps or paper.MAX_TRAIN_STEPS, seed=seed, tensorboard=tensorboard,
        stop_at=stop_at, scales=_scales(scales), init_from=init_from, loads=_loads(loads),
        shared=shared, pool_reward=pool_reward, partners=partners, validate_pool=validate_pool,
        checkpoints=checkpoints, ppo_params={"ent_coef": ent_coef} if ent_coef else None,
        release_below=release_below, hold_largest=hold_largest, like_testbed=like_testbed,
        resume=resume, profile=known[svc],
    )
    show_traces([*train_tr, *val_tr], console)  # stdout: stderr is for the error alone
    _train_ppo(config, train_tr, val_tr, out or Path("models") / f"{svc}.zip",
               bool(trace or val_trace))


def _one_service(service: str, known: dict) -> str:
    """The one service `train`/`tune` names, from the profiles in use."""
    chosen = chosen_services(service, known)
    if len(chosen) != 1:
        raise ConfigError([ConfigProblem("SERVICE", None, "service",
                                         f"one service, got {', '.join(chosen)}")])
    return chosen[0]


def _training_days(traces: Path, own: list[Path] | None = None,
                   val: Path | None = None) -> tuple[list[Trace], list[Trace]]:
    """The training traces (`own`, else train/*.txt of `traces`) and the validation trace
    (`val`, else val/day6.txt of `traces`); a missing file is one line."""
    from testbed.load.trace import load_trace  # numpy: loaded only when this command runs

    files = list(own) if own else sorted((traces / "train").glob("*.txt"))
    if not files:
        raise ConfigError([ConfigProblem(str(traces / "train"), None, "",
                                         "no training traces (*.txt); or pass --trace FILE")])
    val = val or traces / "val" / "day6.txt"
    for path in [*files, val]:
        if not path.is_file():
            hint = (" (pass --val-trace FILE with --trace)" if own and path == val
                    else "")
            raise ConfigError([ConfigProblem(str(path), None, "", "no such trace file" + hint)])
    return [load_trace(p) for p in files], [load_trace(val)]


def _train_ppo(config: TrainConfig, train_tr: list[Trace], val_tr: list[Trace], out: Path,
               own_traces: bool = False) -> None:
    """Train with a progress bar, then print the best validation and what was written."""
    from testbed.train.ppo import curve_paths, train

    svc = config.service
    with progress_bar() as bar:
        task = bar.add_task(f"training {svc}", total=config.steps)
        meta = train(
            config, train_tr, val_tr, out,
            progress=lambda st: bar.update(
                task, completed=st.steps, description=f"training {svc} {st.line()}".rstrip()
            ),
            command=_command_line(config, train_tr, val_tr if own_traces else None),
        )
    curve_json, curve_png = curve_paths(out)
    periods = json.loads(curve_json.read_text())["validation_periods"]
    console.print(
        f"{svc}: best validation reward {meta.best_validation_reward:.3f} at step {meta.steps} on "
        f"{val_tr[0].name} "
        f"({meta.best_validation_reward / periods:.4f} per period over {periods}, the tables' scale); "
        f"wrote {out}, learning curve {curve_png} and {curve_json.name}"
    )


def _command_line(config: TrainConfig, train_tr: list[Trace] | None = None,
                  val_tr: list[Trace] | None = None) -> str:
    """The `testbed train` command that reruns `config` (the manifest's `command`); with
    `val_tr`, the run's own trace files by name."""
    c = config
    where = ("--traces TRACES" if val_tr is None else
             " ".join(f"--trace {t.name}" for t in train_tr or []) + f" --val-trace {val_tr[0].name}")
    return (
        f"testbed train {c.service} {where} --steps {c.steps} --seed {c.seed}"
        + (f" --stop-at {c.stop_at}" if c.stop_at is not None else "")
        + f" --scales {','.join(map(str, c.scales)) if c.scales else 'none'}"
        + (f" --init-from {c.init_from}" if c.init_from is not None else "")
        + (f" --loads {','.join(f'{m:g}' for m in c.loads)}" if c.loads else "")
        + (" --shared" if c.shared else "")
        + (" --pool-reward" if c.pool_reward else "")
        + (f" --partners {c.partners}" if c.partners is not None else "")
        + (" --validate-pool" if c.validate_pool else "")
        + (f" --ent-coef {c.ent_coef:g}" if c.ent_coef else "")
        + (f" --release-below {c.release_below:g}" if c.release_below is not None else "")
        + (" --hold-largest" if c.hold_largest else "")
        + (f" --like-testbed {c.like_testbed:g}" if c.like_testbed else "")
    )


def _sorted_numbers(text: str, option: str, parse: Callable[[str], Any],
                    valid: Callable[[Any], bool], what: str) -> list[Any] | None:
    """A comma-separated option's distinct values, sorted; None for "none" (or nothing)."""
    if text.strip().lower() in ("", "none"):
        return None
    try:
        values = sorted({parse(x) for x in text.split(",") if x.strip()})
    except ValueError:
        values = []
    if not values or not all(valid(v) for v in values):
        raise ConfigError([ConfigProblem(option, None, option.removeprefix("--"),
                                         f"{text!r}: {what}, or none")])
    return values


def _scales(text: str) -> list[int] | None:
    return _sorted_numbers(text, "--scales", int, lambda n: n >= 1, "comma-separated unit counts")


def _load_scales(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        lo = hi = -1.0
    if not 0 < lo <= hi:
        raise ConfigError([ConfigProblem("--load-scales", None, "load_scales",
                                         f"{text!r}: LO,HI with 0 < LO <= HI, e.g. 1,8")])
    return lo, hi


def _loads(text: str) -> list[float] | None:
    return _sorted_numbers(text, "--loads", float, lambda m: m > 0,
                           "comma-separated multipliers > 0")


def _train_share(policy, train_tr, val_tr, out, *, steps, seed, gpus, load_scales=None,
                 profiles=None) -> None:
    # gymnasium, numpy and the GPU simulator: loaded only for ddpg/inss training (fast CLI start)
    from testbed.train.share import train_share

    out = out or Path("models") / f"{policy}.zip"
    command = "testbed " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with progress_bar() as bar:
        task = bar.add_task(f"training {policy}", total=steps)
        meta = train_share(
            policy,
            profiles,
            train_tr,
            val_tr,
            paper.TABLE_5_1.ratios,
            out,
            gpus=gpus,
            steps=steps,
            seed=seed,
            command=command,
            progress=lambda n, best: bar.update(task, completed=n),
            load_scales=load_scales,
        )
    console.print(
        f"{policy}: best validation reward {meta.best_validation_reward:.4f} per step at step {meta.steps} "
        f"({meta.train_seconds:.0f} s); wrote {out} and {out.parent / 'manifest.json'}"
    )


@app.command("tune")
def tune_cmd(
    service: str = typer.Argument(..., help="A registered service or one of --profiles."),
    trials: int = typer.Option(100, help="Finished trials the study should reach, every worker's "
                               "counted (the paper: 100)."),
    rule: str = typer.Option("v2", help="v1 or v2."),
    traces: Path = TracesOpt,
    trace: Path = typer.Option(None, "--trace", help="A trace file of your own ('DURATION COUNT' "
                               "lines) in place of --traces' validation day, val/day6.txt."),
    profiles_path: Path = ProfilesOpt,
    seed: int = typer.Option(0, help="Seed for the sampler and the simulator."),
    storage: str | None = typer.Option(
        None, help="Where the study lives: a journal file's path (default: study.log in the run "
        "directory), or any database URL Optuna accepts (sqlite:///…, postgresql://…) for "
        "workers on several machines."),
    study: str | None = typer.Option(None, help="The study's name: workers that give the same "
                                     "--storage and --study share its trials."),
    out: Path = typer.Option(RUNS_DIR, help="Parent folder of the run directory (tune.json)."),
) -> None:
    """Tune rule-based thresholds with Optuna on the validation day (Section 4.4.4); the study is
    kept in an Optuna storage, so more workers can join it and a stopped search resumes.

    Example: testbed tune imgcls --trials 100 --traces ../shared/traces
    Several workers: testbed tune imgcls --storage sqlite:///tune.db --study imgcls-v2  (on each)
    """
    # numpy and the simulator (optuna when tuning starts): loaded only when this command runs
    from testbed.load.trace import load_trace
    from testbed.paths import new_run_dir
    from testbed.train.tune import tune

    known = known_profiles(profiles_path)
    svc = _one_service(service, known)
    if trials < 1:
        raise checks.bad("--trials", f"must be >= 1, got {trials}")
    day = trace or traces / "val" / "day6.txt"
    if not day.is_file():
        raise ConfigError([ConfigProblem(str(day), None, "", "no such trace file" + (
            "" if trace else ": pass --traces DIR (with val/day6.txt) or --trace FILE"))])
    trace_ = load_trace(day)
    show_traces([trace_], console)
    checks.writable_dir("--out", out)
    run_dir = new_run_dir(out, f"tune-{svc}")
    storage = storage or str(run_dir / "study.log")
    with progress_bar() as bar:
        task = bar.add_task(f"tuning {svc} rule {rule}", total=trials)
        result = tune(svc, trace_, rule=rule, trials=trials, seed=seed, storage=storage,
                      study_name=study, progress=lambda n, _v: bar.update(task, completed=n),
                      profile=known[svc])
    (run_dir / "tune.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    table = Table(title=f"{svc} {result.rule}: {result.trials} trials on {trace_.name} "
                        f"(study {result.study})")
    # the thresholds it started from: the paper's (Tables 4.9/4.10) for its three on its day
    start = "paper" if svc in paper.RULE_V2_THRESHOLDS and trace is None else "profile's rule:"
    for col in ("parameter", "tuned", start):
        table.add_column(col, justify="right")
    for name, value in result.best_params.items():
        table.add_row(name, f"{value:.4g}", f"{result.paper_params.get(name, float('nan')):.4g}")
    table.add_row("reward", f"{result.best_reward:.5f}", f"{result.paper_reward:.5f}")
    console.print(table)
    console.print(f"study: {storage} ({result.study}); result: {run_dir / 'tune.json'}")

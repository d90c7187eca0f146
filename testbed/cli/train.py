"""Training commands: `train` (Maskable PPO for one service, or a share allocator) and `tune`."""

from __future__ import annotations

import inspect
import json
import shlex
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import typer
from rich.table import Table

from testbed.cli import TracesOpt, app, checks, console, show_traces
from testbed.cli.sim_inputs import (
    ProfilesOpt,
    TraceRateUnitOpt,
    TraceTimeUnitOpt,
    chosen_services,
    known_profiles,
    progress_bar,
)
from testbed.errors import ConfigError, ConfigProblem
from testbed.paths import RUNS_DIR
from testbed.profiles import paper
from testbed.train.options import ORDER, TrainOptions, command_line, default, opt
from testbed.train.trainers import trainer

if TYPE_CHECKING:
    from testbed.load.trace import Trace
    from testbed.train.config import TrainConfig

def _cli_option(name: str) -> Any:
    """`train`'s typer Option (or Argument) for TrainOptions' field `name`, from its Opt."""
    o, value = opt(name), default(name)
    if o.argument:
        return typer.Argument(value, help=o.help)
    decls = [o.flag or f"--{name.replace('_', '-')}"]
    return typer.Option(o.text if o.text is not None else value, *decls, help=o.help,
                        rich_help_panel=o.panel, envvar=o.envvar,
                        show_default=o.envvar is None and value is not None and value is not False)


def _cli_type(name: str) -> Any:
    """The type typer reads option `name` as: text for what `Opt.parse` reads (comma lists), else
    TrainOptions' own."""
    if opt(name).parse is not None:
        return str | None
    return _HINTS[name]


ConfigOpt = typer.Option(
    None, "--config", help="A YAML file of these options by name (init_from: ..., scales: [8, 128]; "
    "paths relative to it), e.g. models/imgcls.train.yaml, the shipped agent's run; an option "
    "given here wins over the file's.")


def train_cmd(ctx: typer.Context, config_file: Path | None = None, **given: Any) -> None:
    """Train a policy on the simulator, keeping the best validated model: Maskable PPO for one
    service (Section 4.4.3), or a share allocator for all three on the GPU simulator (ddpg: the
    DDPG-MPS slides; inss: InSS's TD3 local stage). ddpg/inss take minutes here and write an entry
    in models/manifest.json. ppo shows the training episodes' and validation rewards as it goes
    (sums over an episode's periods, and per period: the tables' scale) and writes the learning
    curve beside the model (OUT.curve.json, OUT.curve.png).

    Example: testbed train chatbot --steps 300000
    Example: testbed train --policy ddpg --steps 12000
    Example: testbed train mysvc --profiles mysvc.yaml --trace day1.txt --val-trace day2.txt
    Example: testbed train --config models/imgcls.train.yaml --out new.zip
    """
    _train(_options(ctx, given, config_file))


# the command's parameters are TrainOptions' fields (testbed.train.options), then --config
_HINTS = get_type_hints(TrainOptions)
_PARAMS = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
_PARAMS += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=_cli_option(name),
                              annotation=_cli_type(name)) for name in ORDER]
_PARAMS.append(inspect.Parameter("config_file", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                 default=ConfigOpt, annotation=Path | None))
train_cmd.__signature__ = inspect.Signature(_PARAMS)  # type: ignore[attr-defined]
train_cmd.__annotations__ = {p.name: p.annotation for p in _PARAMS} | {"return": None}
app.command("train")(train_cmd)


def _options(ctx: typer.Context, given: dict[str, Any], config_file: Path | None) -> TrainOptions:
    """The run's options: the command line's (read as `Opt.parse` says), over `--config FILE`'s
    (those the command line left at their defaults), over TrainOptions' defaults."""
    values = {name: opt(name).parse(v) if opt(name).parse and isinstance(v, str) else v
              for name, v in given.items()}
    if config_file is not None:
        from testbed.train.config_file import load_train_file

        def defaulted(name: str) -> bool:  # by name: typer may bring its own click's ParameterSource
            source = ctx.get_parameter_source(name)
            return source is None or source.name in ("DEFAULT", "DEFAULT_MAP")

        values.update({k: v for k, v in load_train_file(config_file).items() if defaulted(k)})
    return TrainOptions(**values)


def _train(o: TrainOptions) -> None:
    """`train` with its options merged: a share allocator, or Maskable PPO for one service."""
    from testbed.traces import traces_folder

    known = known_profiles(o.profiles)
    checks.trace_units(o.trace_time_unit, o.trace_rate_unit)
    train_tr, val_tr = _training_days(traces_folder(o.traces), o.trace, o.val_trace,
                                      units=_units(o.trace_time_unit, o.trace_rate_unit))
    chosen = trainer(o.policy)
    if chosen.scope == "paper":
        show_traces([*train_tr, *val_tr], console)
        _train_share(o.policy, train_tr, val_tr, o.out, steps=o.steps or chosen.default_steps,
                     seed=o.seed, gpus=o.gpus, load_scales=o.load_scales,
                     profiles={s: known[s] for s in paper.TABLE_5_1.ratios})
        return
    # numpy and the trainer: only once the arguments are checked
    from testbed.train.ppo import TrainConfig

    if o.service is None:
        raise ConfigError([ConfigProblem("SERVICE", None, "service", "ppo trains one service: name it")])
    svc = _one_service(o.service, known)
    config = TrainConfig(service=svc, steps=o.steps or paper.MAX_TRAIN_STEPS, seed=o.seed,
                         profile=known[svc], **o.ppo())
    show_traces([*train_tr, *val_tr], console)  # stdout: stderr is for the error alone
    _train_ppo(config, train_tr, val_tr, o.out or Path("models") / f"{svc}.zip",
               bool(o.trace or o.val_trace),
               units=_unit_words(o.trace_time_unit, o.trace_rate_unit))


def _one_service(service: str, known: dict) -> str:
    """The one service `train`/`tune` names, from the profiles in use."""
    chosen = chosen_services(service, known)
    if len(chosen) != 1:
        raise ConfigError([ConfigProblem("SERVICE", None, "service",
                                         f"one service, got {', '.join(chosen)}")])
    return chosen[0]


def _units(time_unit: str | None, rate_unit: str | None) -> dict[str, str | None]:
    """load_trace's keywords for a CSV trace's units given on the command line."""
    return {"time_unit": time_unit, "rate_unit": rate_unit}


def _unit_words(time_unit: str | None, rate_unit: str | None) -> str:
    """The unit options as a rerun writes them."""
    return "".join(f" --trace-{kind}-unit {unit}" for kind, unit in
                   (("time", time_unit), ("rate", rate_unit)) if unit)


def _training_days(traces: Path, own: list[Path] | None = None, val: Path | None = None,
                   units: dict[str, str | None] | None = None) -> tuple[list[Trace], list[Trace]]:
    """The training traces (`own`, else train/*.txt of `traces`) and the validation trace
    (`val`, else val/day6.txt of `traces`), read with `units` (a CSV's, where its header states
    none); a missing file is one line."""
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
    units = units or {}
    return [load_trace(p, **units) for p in files], [load_trace(val, **units)]


def _train_ppo(config: TrainConfig, train_tr: list[Trace], val_tr: list[Trace], out: Path,
               own_traces: bool = False, units: str = "") -> None:
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
            command=_command_line(config, train_tr, val_tr if own_traces else None, units),
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
                  val_tr: list[Trace] | None = None, units: str = "") -> str:
    """The `testbed train` command that reruns `config` (the manifest's `command`); with
    `val_tr`, the run's own trace files by name (and `units`, their unit options)."""
    where = ("--traces TRACES" if val_tr is None else
             " ".join(f"--trace {t.name}" for t in train_tr or [])
             + f" --val-trace {val_tr[0].name}{units}")
    return command_line({f.name: getattr(config, f.name) for f in fields(config)}, traces=where)


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
                               "lines or CSV, docs/traces.md) in place of --traces' validation "
                               "day, val/day6.txt."),
    trace_time_unit: str | None = TraceTimeUnitOpt,
    trace_rate_unit: str | None = TraceRateUnitOpt,
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

    Example: testbed tune imgcls --trials 100
    Several workers: testbed tune imgcls --storage sqlite:///tune.db --study imgcls-v2  (on each)
    """
    # numpy and the simulator (optuna when tuning starts): loaded only when this command runs
    from testbed.load.trace import load_trace
    from testbed.paths import new_run_dir
    from testbed.train.tune import tune

    known = known_profiles(profiles_path)
    svc = _one_service(service, known)
    checks.trace_units(trace_time_unit, trace_rate_unit)
    if trials < 1:
        raise checks.bad("--trials", f"must be >= 1, got {trials}")
    from testbed.traces import traces_folder

    day = trace or traces_folder(traces) / "val" / "day6.txt"
    if not day.is_file():
        raise ConfigError([ConfigProblem(str(day), None, "", "no such trace file" + (
            "" if trace else ": pass --traces DIR (with val/day6.txt) or --trace FILE"))])
    trace_ = load_trace(day, **_units(trace_time_unit, trace_rate_unit))
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

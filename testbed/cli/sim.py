"""Simulator and scaler commands: `sim eval`, `sim tables`, `train`, `tune`."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.cli import app, console
from testbed.errors import ConfigError, ConfigProblem
from testbed.sim import paper

sim_app = typer.Typer(
    help="The fast simulator: evaluate policies, reproduce Tables 5.1-5.3.", no_args_is_help=True
)
app.add_typer(sim_app, name="sim")

TRACES_HELP = "Trace directory with train/, val/ and test/ (DURATION COUNT files)."


def _services(service: str) -> list[str]:
    chosen = list(paper.SERVICES) if service == "all" else [s.strip() for s in service.split(",")]
    unknown = [s for s in chosen if s not in paper.PROFILES]
    if unknown:
        raise ConfigError(
            [
                ConfigProblem(
                    "--service",
                    None,
                    "service",
                    f"unknown {', '.join(unknown)}; known: {', '.join(paper.SERVICES)}, all",
                )
            ]
        )
    return chosen


RATE_LIMIT_HELP = (
    "profile: the per-instance rate limits of the profiles (the dissertation's published "
    "simulator's, not in its text; they explain Table 5.2's figures); none: no rate limit."
)
MODELS_DIR = Path(__file__).resolve().parents[2] / "models"  # the agents shipped with the repository


def _profiles(rate_limit: str, services: list[str]) -> dict[str, paper.ServiceProfile]:
    if rate_limit not in ("profile", "none"):
        raise ConfigError(
            [ConfigProblem("--rate-limit", None, "rate_limit", f"{rate_limit!r}; use profile or none")]
        )
    if rate_limit == "none":
        return {s: replace(paper.PROFILES[s], rate_limit=None) for s in services}
    return {s: paper.PROFILES[s] for s in services}


def _test_traces(traces: Path, services: list[str]):
    """The test day for `services`, or one line naming the missing file and where traces are."""
    from testbed.sim.evaluate import test_day_traces

    for s in services:
        path = traces / "test" / f"day7-shift{paper.TEST_SHIFT_HOURS[s]}h.txt"
        if not path.is_file():
            raise ConfigError(
                [
                    ConfigProblem(
                        str(path),
                        None,
                        "",
                        "no such trace file: pass --traces DIR, a folder with test/, train/ and "
                        "val/ (the paper's traces are in the team's shared folder, ../shared/traces)",
                    )
                ]
            )
    return test_day_traces(traces, services)


def _drl_policies(models: Path, services: list[str]) -> dict:
    """One loaded agent per service from `models` (a directory of SERVICE.zip or, for one service,
    a file); a missing or mismatched model is one ConfigError line naming it."""
    from testbed.scaler.ppo import MaskablePpoPolicy

    if not models.exists() and models.suffix != ".zip":
        raise ConfigError(
            [
                ConfigProblem(
                    str(models),
                    None,
                    "",
                    "no such model directory: the agents ship in the repository's models/; "
                    "train one with `testbed train SERVICE --traces ../shared/traces`",
                )
            ]
        )
    return {s: MaskablePpoPolicy.load(_model_for(str(models), s), s) for s in services}


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


@sim_app.command("eval")
def sim_eval(
    policy: str = typer.Option("rule_v2", help="rule_v1, rule_v2, static, hpa, random or ppo."),
    service: str = typer.Option("all", help="Service(s), comma-separated, or all (they share the units)."),
    ratio: float = typer.Option(None, help="Request ratio for every chosen service (default: the paper's)."),
    load: float = typer.Option(1.0, help="Multiply the paper's ratios (2 = Table 5.2's load)."),
    units: int = typer.Option(paper.TOTAL_UNITS, help="Total resource units."),
    trace: Path = typer.Option(
        None, help="One trace file for all chosen services (default: test day, shifted)."
    ),
    traces: Path = typer.Option(Path("traces"), help=TRACES_HELP),
    model: str = typer.Option(
        None, help="PPO model file, or a directory holding SERVICE.zip files (default: models/)."
    ),
    seed: int = typer.Option(0, help="Simulation seed."),
    rate_limit: str = typer.Option("profile", help=RATE_LIMIT_HELP),
    with_oracle: bool = typer.Option(
        True, "--oracle/--no-oracle", help="Also compute the oracle bound (one static run per count)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per service."),
) -> None:
    """Run a policy on the simulator and print SLO violation, instances, processing time, reward,
    and the oracle bound's reward with the policy's gap to it (policy minus oracle).

    Example: testbed sim eval --policy rule_v2 --service all --traces ../shared/traces --json
    """
    from testbed.scaler.policies import make_policy
    from testbed.sim.evaluate import evaluate
    from testbed.sim.oracle import shared_pool_oracles
    from testbed.sim.trace import read_trace

    chosen = _services(service)
    profiles = _profiles(rate_limit, chosen)
    tr = {s: read_trace(trace) for s in chosen} if trace else _test_traces(traces, chosen)
    ratios = {s: ratio if ratio is not None else paper.DEFAULT_RATIOS[s] * load for s in chosen}
    if policy == "ppo":
        policies = _drl_policies(Path(model) if model else MODELS_DIR, chosen)
    else:
        policies = {
            s: make_policy(policy, s, total_units=units, seed=seed, model=_model_for(model, s))
            for s in chosen
        }
    results = evaluate(policies, tr, ratios, total_units=units, seed=seed, profiles=profiles)
    bounds = {}
    if with_oracle:
        with console.status("oracle bound: one static run per instance count"):
            bounds = shared_pool_oracles(profiles, tr, ratios, total_units=units, seed=seed)
    if as_json:
        for s, r in results.items():
            row = r.as_json()
            if s in bounds:
                row["oracle_reward"] = bounds[s].reward
                row["gap"] = r.reward - bounds[s].reward
            typer.echo(json.dumps(row))
        return
    table = Table(title=f"{policy} on the simulator ({units} units)")
    cols = ["service", "ratio", "SLO violation", "instances", "proc time (s)", "reward"]
    cols += ["oracle reward", "gap"] if bounds else []
    for col in [*cols, "steps/s"]:
        table.add_column(col, justify="right")
    for s, r in results.items():
        cells = [
            s,
            f"{ratios[s]:g}",
            f"{r.slo_violation_rate:.4f}",
            f"{r.instances:.4f}",
            f"{r.proc_time:.4f}",
            f"{r.reward:.4f}",
        ]
        if bounds:
            cells += [f"{bounds[s].reward:.4f}", f"{r.reward - bounds[s].reward:+.4f}"]
        table.add_row(*cells, f"{r.steps_per_second:,.0f}")
    console.print(table)


def _model_for(model: str | None, service: str) -> str | None:
    if model and Path(model).is_dir():
        return str(Path(model) / f"{service}.zip")
    return model


@sim_app.command("tables")
def sim_tables(
    models: Path = typer.Option(
        MODELS_DIR, help="Directory with chatbot.zip, imgcls.zip, tts.zip (default: the shipped agents)."
    ),
    drl: bool = typer.Option(True, "--drl/--no-drl", help="Also run the DRL agents (default)."),
    traces: Path = typer.Option(Path("traces"), help=TRACES_HELP),
    table: list[str] = typer.Option(["5.1", "5.2", "5.3"], help="Which tables (repeatable)."),
    seed: int = typer.Option(0, help="Simulation seed."),
    rate_limit: str = typer.Option("profile", help=RATE_LIMIT_HELP),
    with_oracle: bool = typer.Option(
        False, "--oracle/--no-oracle", help="Add the oracle bound and each policy's gap (slow at 128 units)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="One JSON object per table, policy and service instead of tables."
    ),
) -> None:
    """Reproduce Tables 5.1-5.3 (DRL agents and rule-based v2) beside the paper.

    Example: testbed sim tables --traces ../shared/traces --table 5.3 --json
    """
    from testbed.scaler.policies import RuleV2
    from testbed.sim.evaluate import evaluate
    from testbed.sim.oracle import shared_pool_oracles

    known = [k for k in paper.PAPER_TABLES if k != "4.11"]
    for key in table:
        if key not in known:
            raise ConfigError(
                [ConfigProblem("--table", None, "table", f"unknown {key!r}; use {', '.join(known)}")]
            )
    services = list(paper.SERVICES)
    tr = _test_traces(traces, services)
    profiles = _profiles(rate_limit, services)
    runs: dict[str, dict] = {"rule_v2": {s: RuleV2.for_service(s) for s in services}}
    if drl:
        runs = {"drl": _drl_policies(models, services), **runs}
    for key in table:
        spec = paper.PAPER_TABLES[key]
        bounds = {}
        if with_oracle:
            with console.status(f"{spec.name}: oracle bound"):
                bounds = shared_pool_oracles(
                    profiles, tr, spec.ratios, total_units=spec.total_units, seed=seed
                )
        out = Table(
            title=f"{spec.name}: {spec.total_units} units, ratios "
            + ", ".join(f"{s} {r:g}" for s, r in spec.ratios.items())
        )
        for col in ("service", "policy", "metric", "ours", "paper", "diff", "gap to oracle"):
            out.add_column(col, justify="right")
        for s, b in bounds.items():
            out.add_row(s, "oracle", "reward", f"{b.reward:.4f}", "-", "-", "-")
        for name, policies in runs.items():
            with console.status(f"{spec.name}: {name}"):
                ours = evaluate(
                    policies, tr, spec.ratios, total_units=spec.total_units, seed=seed, profiles=profiles
                )
            for s in services:
                theirs = spec.results[name][s]
                cells = (
                    ("SLO violation", ours[s].slo_violation_rate, theirs.slo_violation_rate),
                    ("instances", ours[s].instances, theirs.instances),
                    ("proc time (s)", ours[s].proc_time, theirs.proc_time_s),
                    ("reward", ours[s].reward, theirs.reward),
                )
                if as_json:
                    row = {"table": key, **ours[s].as_json(), "policy": name}
                    row["paper"] = asdict(theirs)
                    row["reward_diff"] = (ours[s].reward - theirs.reward) / abs(theirs.reward)
                    if s in bounds:
                        row["oracle_reward"] = bounds[s].reward
                    typer.echo(json.dumps(row))
                    continue
                for metric, mine, ref in cells:
                    diff = f"{(mine - ref) / abs(ref):+.1%}" if ref else "-"
                    gap = f"{mine - bounds[s].reward:+.4f}" if metric == "reward" and bounds else ""
                    out.add_row(s, name, metric, f"{mine:.4f}", f"{ref:.4f}", diff, gap)
        if not as_json:
            console.print(out)


@app.command("train")
def train_cmd(
    service: str = typer.Argument(..., help="chatbot, imgcls or tts."),
    traces: Path = typer.Option(Path("traces"), help=TRACES_HELP),
    out: Path = typer.Option(None, help="Model file to write (default models/SERVICE.zip)."),
    steps: int = typer.Option(paper.MAX_TRAIN_STEPS, help="Step budget (the paper: 300000)."),
    seed: int = typer.Option(0, help="Training seed."),
    tensorboard: str = typer.Option(None, help="Directory for TensorBoard logs."),
    stop_at: int = typer.Option(
        None, help="Stop after this many steps; the learning rate still decays over --steps."
    ),
) -> None:
    """Train a Maskable PPO agent on the simulator (Section 4.4.3), keeping the best validated model.

    Example: testbed train chatbot --traces ../shared/traces --steps 300000
    """
    from testbed.scaler.ppo import train
    from testbed.sim.trace import read_trace

    (svc,) = _services(service)
    train_tr = [read_trace(p) for p in sorted((traces / "train").glob("*.txt"))]
    if not train_tr:
        raise ConfigError([ConfigProblem(str(traces / "train"), None, "", "no training traces (*.txt)")])
    val_tr = [read_trace(traces / "val" / "day6.txt")]
    out = out or Path("models") / f"{svc}.zip"
    with _progress() as bar:
        task = bar.add_task(f"training {svc}", total=steps)
        meta = train(
            svc,
            train_tr,
            val_tr,
            out,
            steps=steps,
            seed=seed,
            tensorboard=tensorboard,
            progress=lambda n, best: bar.update(task, completed=n),
            command=f"testbed train {svc} --traces TRACES --steps {steps} --seed {seed}"
            + (f" --stop-at {stop_at}" if stop_at is not None else ""),
            stop_at=stop_at,
        )
    console.print(
        f"{svc}: best validation reward {meta.best_validation_reward:.3f} at step {meta.steps}; wrote {out}"
    )


@app.command("tune")
def tune_cmd(
    service: str = typer.Argument(..., help="chatbot, imgcls or tts."),
    trials: int = typer.Option(100, help="Optuna trials (the paper: 100)."),
    rule: str = typer.Option("v2", help="v1 or v2."),
    traces: Path = typer.Option(Path("traces"), help=TRACES_HELP),
    seed: int = typer.Option(0, help="Seed for the sampler and the simulator."),
) -> None:
    """Tune rule-based thresholds with Optuna on the validation day (Section 4.4.4).

    Example: testbed tune imgcls --trials 100 --traces ../shared/traces
    """
    from testbed.scaler.tune import tune
    from testbed.sim.trace import read_trace

    (svc,) = _services(service)
    trace = read_trace(traces / "val" / "day6.txt")
    with _progress() as bar:
        task = bar.add_task(f"tuning {svc} rule {rule}", total=trials)
        result = tune(
            svc,
            trace,
            rule=rule,
            trials=trials,
            seed=seed,
            progress=lambda n, _v: bar.update(task, completed=n),
        )
    out = Table(title=f"{svc} {result.rule}: {trials} trials on {trace.name}")
    for col in ("parameter", "tuned", "paper"):
        out.add_column(col, justify="right")
    for name, value in result.best_params.items():
        out.add_row(name, f"{value:.4g}", f"{result.paper_params.get(name, float('nan')):.4g}")
    out.add_row("reward", f"{result.best_reward:.5f}", f"{result.paper_reward:.5f}")
    console.print(out)

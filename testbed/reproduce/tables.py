"""Tables 5.1-5.4 beside the paper: the simulator tables (with the oracle bound), Table 5.4's
testbed rows with their run-to-run noise, and the tolerance each cell is judged by."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.judge.outcome import FAIL, NOT_RUN, PASS, Outcome
from testbed.judge.verdict import run_verdict
from testbed.load.trace import load_trace
from testbed.profiles import default_profiles
from testbed.profiles.paper import PAPER_POLICY, PAPER_TABLES, SERVICES, TABLE_5_4
from testbed.reproduce.artefacts import model_files, trace_files
from testbed.scaler.factory import make_policy
from testbed.train.evaluate import EvalRun, evaluate
from testbed.train.oracle import shared_pool_oracles

# Tolerances (stated in every report): issue 11's fidelity floors for the simulator. Table 5.1's
# rule-based cells, the text's baseline, within 3 % of the paper's reward and 5 % of its
# instances; every other cell of Tables 5.1-5.3 (DRL, and rule v2 at other loads) within 15 %.
SIM_RULE_51_REWARD_REL = 0.03
SIM_RULE_51_INSTANCES_REL = 0.05
SIM_REWARD_REL = 0.15
# Table 5.4 on the local testbed: a window of the test day, not the whole day, on emulated
# replicas. A cell passes when it is within 2 run-to-run standard deviations of the paper or
# within this absolute reward / SLO distance, whichever is wider.
TB_REWARD_ABS = 0.005
TB_SLO_ABS = 0.005
# What a Table 5.4 run must cover to decide (docs/table-5.4.md). Beside the paper: the whole test
# day, as the dissertation ran it (windows of even 8 h stay 0.010-0.014 away from the day's
# reward). DRL against rule v2: the day, or 20 minutes (from 13:30 the simulator puts them
# 0.02-0.04 apart, 20 times the run-to-run noise) with 2 repetitions (to measure that noise);
# --quick's 2 minutes after a warm-up hold no decision in which the two policies differ.
T54_DECIDES_PAPER_S = 86400
T54_DECIDES_ORDER_S = 1200
T54_DECIDES_ORDER_REPS = 2
METRICS = ("slo_violation_rate", "instances", "proc_time_s", "reward")


@dataclass
class Cell:
    """One (service, policy) of a table: ours (mean and sd over runs), the paper's, a verdict."""

    service: str
    policy: str  # "ppo" or "rule_v2" (the paper's DRL / rule-based columns)
    ours: dict[str, float | None]
    paper: dict[str, float]
    sd: dict[str, float | None] = field(default_factory=dict)
    runs: int = 1
    passed: bool | None = None
    why: str = ""


@dataclass
class Check:
    """A check across cells (the oracle bound, DRL against rule v2)."""

    text: str
    passed: bool
    detail: str
    decided_by: str = ""  # non-empty: this run is too small to decide it; what would


@dataclass
class TableResult:
    key: str  # "5.1" ... "5.4"
    title: str
    cells: list[Cell]
    oracle: dict[str, float] = field(default_factory=dict)  # service -> oracle reward
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    # non-empty: the run is too small to compare its cells with the paper's; what would
    decided_by: str = ""

    @property
    def verdict(self) -> str:
        """The one rule's verdict (testbed.judge.verdict) over `outcomes()`: FAIL on a cell
        without figures, a failed check this size decides, or (when this size judges them) a
        cell outside its tolerance; NOT RUN when this size judges nothing (the cells and every
        check need a longer window: not judged against the paper, listed apart, never a pass);
        else PASS. What this size cannot judge is `not_run()`."""
        return run_verdict(self.outcomes()).verdict

    def outcomes(self) -> list[Outcome]:
        """Each cell beside the paper and each check as an Outcome: PASS or FAIL where this size
        judges it, NOT RUN where it needs a longer window (a cell without figures FAILs)."""
        out = []
        for c in self.cells:
            text = f"{c.service} {c.policy} beside the paper"
            if c.ours.get("reward") is None:
                out.append(Outcome(text, FAIL, None, None, "no figures"))
            elif self.decided_by or c.passed is None:
                out.append(Outcome(text, NOT_RUN, None, None, decided_by=self.decided_by))
            else:
                out.append(Outcome(text, PASS if c.passed else FAIL, None, None, c.why))
        for k in self.checks:
            verdict = NOT_RUN if k.decided_by else PASS if k.passed else FAIL
            out.append(Outcome(k.text, verdict, None, None, k.detail, k.decided_by))
        return out

    def not_run(self) -> list[str]:
        """What this size does not judge, each with the size that would."""
        return self.undecided_by()

    def undecided_by(self) -> list[str]:
        """What would decide what this run leaves undecided."""
        out = [f"the cells beside the paper: {self.decided_by}"] if self.decided_by else []
        return out + [f"{c.text}: {c.decided_by}" for c in self.checks if c.decided_by]


def _paper_cell(key: str, policy: str, service: str) -> dict[str, float]:
    if key == "5.4":
        return dict(TABLE_5_4[service][policy])
    r = PAPER_TABLES[key].results[PAPER_POLICY[policy]][service]
    return {"slo_violation_rate": r.slo_violation_rate, "instances": r.instances,
            "proc_time_s": r.proc_time_s, "reward": r.reward}


def sim_table(key: str, *, traces_dir: Path, models_dir: Path | None, seed: int = 0,
              oracle: bool = True, max_steps: int | None = None,
              progress: Callable[[str], None] | None = None) -> TableResult:
    """Table 5.1, 5.2 or 5.3 through the simulator on the test day (shifted 0/8/16 h)."""

    spec = PAPER_TABLES[key]
    traces = {s: load_trace(p) for s, p in trace_files(traces_dir).items()}
    profiles = {s: default_profiles()[s] for s in SERVICES}
    policies = ["rule_v2"] + (["ppo"] if models_dir is not None else [])
    cells = []
    for policy in policies:
        if progress:
            progress(f"Table {key}: {policy} on the simulator")
        models = model_files(models_dir) if models_dir is not None else {}
        pol = {s: make_policy(policy, s, total_units=spec.total_units, profiles=profiles,
                              model=str(models[s]) if policy == "ppo" else None)
               for s in SERVICES}
        res = evaluate(pol, traces, spec.ratios, total_units=spec.total_units, seed=seed,
                       profiles=profiles, run=EvalRun(max_steps=max_steps))
        for s in SERVICES:
            r = res[s]
            ours = {"slo_violation_rate": r.slo_violation_rate, "instances": r.instances,
                    "proc_time_s": r.proc_time, "reward": r.reward}
            cells.append(judge_sim_cell(key, policy, s, ours))
    bounds = {}
    if oracle:
        if progress:
            progress(f"Table {key}: oracle bound")
        bounds = {s: b.reward for s, b in shared_pool_oracles(
            profiles, traces, spec.ratios, total_units=spec.total_units, seed=seed).items()}
    table = judge_sim_table(key, cells, bounds)
    if max_steps is not None:
        table.notes.append(f"first {max_steps} steps of the test day only (--quick)")
    return table


def judge_sim_cell(key: str, policy: str, service: str,
                   ours: dict[str, float | None]) -> Cell:
    """One simulator cell (policy "ppo" or "rule_v2") beside the paper's, by the tolerances that
    `testbed reproduce` and `testbed sim tables` both apply."""
    return _judged_sim_cell(key, policy, service, ours, _paper_cell(key, policy, service))


def judge_sim_table(key: str, cells: list[Cell], oracle: dict[str, float]) -> TableResult:
    """Table 5.1-5.3's verdict from its judged cells and (when computed) the oracle bound."""
    spec = PAPER_TABLES[key]
    table = TableResult(key, f"{spec.name}: simulator, {spec.total_units} units, ratios "
                        + ", ".join(f"{s} {v:g}" for s, v in spec.ratios.items()), cells)
    table.oracle = dict(oracle)
    for c in cells:
        if c.service in oracle:
            b = oracle[c.service]
            ok = (c.ours["reward"] or 0) <= b + 1e-9
            table.checks.append(Check(f"{c.service} {c.policy} reward <= oracle bound", ok,
                                      f"{c.ours['reward']:.4f} vs {b:.4f}"))
    _ordering(table)
    return table


def _judged_sim_cell(key: str, policy: str, service: str, ours: dict[str, float | None],
                     paper: dict[str, float]) -> Cell:
    rule_51 = key == "5.1" and policy == "rule_v2"
    limits = {"reward": SIM_RULE_51_REWARD_REL if rule_51 else SIM_REWARD_REL}
    if rule_51:
        limits["instances"] = SIM_RULE_51_INSTANCES_REL
    why = []
    for m, limit in limits.items():
        rel = ((ours[m] or 0.0) - paper[m]) / abs(paper[m])
        if abs(rel) > limit:
            why.append(f"{m} {rel:+.1%} from the paper (tolerance {limit:.0%})")
    return Cell(service, policy, ours, paper, passed=not why, why="; ".join(why))


def _ordering(table: TableResult, decided_by: str = "", rule: str = "rule_v2") -> None:
    """Where the paper's DRL beat its rule by more than 5 %, ours should not be worse (a check;
    `decided_by`: this run is too small to decide it; `rule`: our policy in the paper's rule
    column)."""
    for s in SERVICES:
        d = next((c for c in table.cells if c.service == s and c.policy == "ppo"), None)
        r = next((c for c in table.cells if c.service == s and c.policy == rule), None)
        if d is None or r is None or d.ours["reward"] is None or r.ours["reward"] is None:
            continue
        gain = (d.paper["reward"] - r.paper["reward"]) / abs(r.paper["reward"])
        if gain < 0.05:
            continue
        margin = 2 * max(d.sd.get("reward") or 0.0, r.sd.get("reward") or 0.0)
        ok = d.ours["reward"] >= r.ours["reward"] - margin
        label = rule.replace("_", " ")
        table.checks.append(Check(f"{s}: DRL reward >= {label} (paper: {gain:+.1%})", ok,
                                  f"{d.ours['reward']:.4f} vs {r.ours['reward']:.4f}"
                                  + (f" (2 sd = {margin:.4f})" if margin else ""), decided_by))


def testbed_table(rows: list[dict[str, Any]], *, window: str, duration_s: float,
                  repetitions: int, rule: str = "rule_v2") -> TableResult:
    """Table 5.4 from a testbed run's result rows (matrix `policy`, any repetitions), judged as far
    as a window of `duration_s` seconds run `repetitions` times can decide; `rule` is the policy
    judged against the paper's rule-based column (rule_v2, the dissertation's; rule_v1, the one
    its published testbed code runs, tu-nv/drafas drl/drl.py:225)."""
    cells = []
    for s in SERVICES:
        for policy in ("ppo", rule):
            mine = [r for r in rows if r.get("service") == s and r.get("policy") == policy
                    and r.get("engine") != "sim"]
            if not mine:
                continue
            ours: dict[str, float | None] = {}
            sd: dict[str, float | None] = {}
            for m, col in (("slo_violation_rate", "slo_violation_rate"),
                           ("instances", "mean_replicas"), ("proc_time_s", "mean_latency_ms"),
                           ("reward", "reward")):
                vals = [r[col] for r in mine if r.get(col) is not None]
                if col == "mean_latency_ms":
                    vals = [v / 1000 for v in vals]
                ours[m] = statistics.fmean(vals) if vals else None
                sd[m] = statistics.stdev(vals) if len(vals) > 1 else None
            paper = _paper_cell("5.4", "ppo" if policy == "ppo" else "rule_v2", s)
            cell = Cell(s, policy, ours, paper, sd, runs=len(mine))
            why = []
            for m, floor in (("reward", TB_REWARD_ABS), ("slo_violation_rate", TB_SLO_ABS)):
                if ours[m] is None:
                    why.append(f"no {m}")
                    continue
                tol = max(floor, 2 * (sd[m] or 0.0))
                if abs(ours[m] - paper[m]) > tol:
                    why.append(f"{m} {ours[m] - paper[m]:+.4f} (tolerance {tol:.4f})")
            cell.passed, cell.why = not why, "; ".join(why)
            cells.append(cell)
    table = TableResult("5.4", f"Table 5.4: local testbed, {window}", cells)
    if duration_s < T54_DECIDES_PAPER_S:
        table.decided_by = (f"the whole test day (--t54-duration {T54_DECIDES_PAPER_S}); this run "
                            f"covers {duration_s:g} s")
    order = ""
    short = duration_s < T54_DECIDES_ORDER_S or repetitions < T54_DECIDES_ORDER_REPS
    if short and duration_s < T54_DECIDES_PAPER_S:
        order = (f"a window of at least {T54_DECIDES_ORDER_S} s, {T54_DECIDES_ORDER_REPS} "
                 f"repetitions (`testbed reproduce table5.4`); this run: {duration_s:g} s, "
                 f"{repetitions} repetition(s)")
    _ordering(table, order, rule)
    return table


def rule_text() -> list[str]:
    return [
        f"Tables 5.1-5.3 (simulator, whole test day): Table 5.1's rule v2 cells pass within "
        f"{100 * SIM_RULE_51_REWARD_REL:g} % of the paper's reward and "
        f"{100 * SIM_RULE_51_INSTANCES_REL:g} % of its instances, every other cell within "
        f"{100 * SIM_REWARD_REL:g} % of the paper's reward (the simulator's fidelity floors, "
        "docs/sim.md); every policy's reward must stay at or below the oracle bound",
        f"Table 5.4 (local testbed): a cell passes when reward and SLO violation rate are within "
        f"2 run-to-run standard deviations of the paper's, or within {TB_REWARD_ABS:g} "
        f"(reward) / {TB_SLO_ABS:g} (SLO rate) when that is wider; decided only on the whole "
        f"test day ({T54_DECIDES_PAPER_S} s); on a shorter window the cells are NOT RUN at this "
        f"size (not judged against the day's figures, listed apart, exit 0)",
        "all tables: where the paper's DRL beat rule v2 by more than 5 %, ours must not be worse "
        "by more than 2 standard deviations (Table 5.4: decided on the whole day or on windows of "
        f"at least {T54_DECIDES_ORDER_S} s with {T54_DECIDES_ORDER_REPS} repetitions; NOT RUN at "
        f"this size on a shorter one)",
        "verdicts: PASS, FAIL, UNDECIDED (the data cannot decide, with the size that decides it: "
        "never a pass, exit 2) or NOT RUN (a size that is not judged against the figure: listed "
        "apart, exit 0)",
    ]

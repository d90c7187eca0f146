"""The reproduction report: every artefact beside the paper, its tolerance, PASS/FAIL and plots
(report.md + report.html, the same `Document` the scenario reports use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from testbed.profiles.paper import FIG_5_7_5_8, FIG_5_7_5_8_SOURCE, SLICING_SETUP
from testbed.report.build import beside_the_figures
from testbed.report.document import Document, Section, TableData
from testbed.report.plots import slicing_bars
from testbed.reproduce import slicing as slicing_rules
from testbed.reproduce import tables as table_rules
from testbed.reproduce.model import Options, ReproResult, Verdict

METRIC_TITLES = {"slo_violation_rate": "SLO viol.", "instances": "instances",
                 "proc_time_s": "proc. time s", "reward": "reward"}


def _f(v: Any, digits: int = 4) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _pf(ok: bool | None) -> str:
    return "–" if ok is None else ("**PASS**" if ok else "**FAIL**")


def _cell(ok: bool | None, undecided: str) -> str:
    """A table cell's mark: PASS/FAIL, or within/outside when this size cannot decide it."""
    if undecided and ok is not None:
        return "within (not run at this size)" if ok else "outside (not run at this size)"
    return _pf(ok)


def _verdict(v: Verdict) -> str:
    return f"**{v.verdict}**"


def _decided_by(v: Verdict) -> str:
    return f" Decided by: {v.decided_by}." if v.decided_by else ""


def build(result: ReproResult, base: Path, options: Options) -> Document:
    doc = Document("Reproduction of the DRAFAS dissertation's artefacts")
    head = Section("Summary")
    head.bullets += [
        f"mode: {'--quick (CI size)' if options.quick else 'full'}; {result.seconds / 60:.1f} "
        f"min; load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} CPUs",
        f"traces `{options.traces_dir}`; models "
        + ("none (--rule-only)" if options.rule_only else f"`{options.models_dir}`"),
    ]
    head.tables.append(TableData(["artefact", "result", "summary", "minutes"], [
        [v.artefact, _verdict(v), v.summary + "." + _decided_by(v), f"{v.seconds / 60:.1f}"]
        for v in result.verdicts]))
    head.bullets.append("PASS and FAIL are decided; UNDECIDED means the data cannot decide (the "
                        "row names the size that decides it): never a pass (exit 2); NOT RUN: "
                        "this size is not judged against a day-long figure (exit 0), listed below")
    undecided = [v.artefact for v in result.verdicts if v.verdict == "UNDECIDED"]
    failed = [v.artefact for v in result.verdicts if v.verdict == "FAIL"]
    head.bullets.append(f"FAIL: {', '.join(failed) or 'none'}; UNDECIDED: "
                        f"{', '.join(undecided) or 'none'}")
    head.bullets += [f"NOT RUN at this size: {line}" for line in result.not_run()]
    doc.sections.append(head)
    plots = base / "plots"
    plots.mkdir(exist_ok=True)
    seen_slicing = False
    for v in result.verdicts:
        if v.slicing is not None:
            if not seen_slicing:
                doc.sections.append(_slicing(v, result, plots))
                seen_slicing = True
            continue
        doc.sections.append(_table(v, plots))
    tol = Section("Tolerances")
    tol.bullets += slicing_rules.rule_text() + table_rules.rule_text()
    doc.sections.append(tol)
    return doc


def _slicing(v: Verdict, result: ReproResult, plots: Path) -> Section:
    sec = Section("Figs 5.7 / 5.8: effect of network slicing")
    sec.paragraphs.append(f"Paper setup: {SLICING_SETUP}. The paper prints no values for these "
                          f"figures (they are in the script that drew them, {FIG_5_7_5_8_SOURCE}); "
                          "its stated result:")
    sec.bullets += FIG_5_7_5_8
    outcomes = []
    for w in result.verdicts:
        if w.slicing is not None:
            sec.paragraphs.append(f"{w.artefact}: {_verdict(w)} — {w.summary}.{_decided_by(w)}")
            outcomes += w.outcomes
    if outcomes:
        # the same checks, verdicts and words as the scenario run's `expect:` (its report.md)
        sec.tables.append(TableData(["check", "result", "left", "right", "why"], [
            [f"`{o.text}`", f"**{o.verdict}**", _f(o.left), _f(o.right),
             o.detail + (f"; decided by: {o.decided_by}" if o.decided_by else "")]
            for o in outcomes], "The judge's checks (testbed.reproduce.slicing.expectations)"))
    cells = v.slicing["cells"] if v.slicing else {}
    rows = []
    for key in sorted(cells, key=lambda k: (k.split("|")[0], int(k.split("|")[1]), k)):
        service, flows, sl = key.split("|")
        c = cells[key]
        rows.append([service, flows, sl, f"{c['mean_ms']:.0f}", f"{100 * c['slo']:.2f}"])
    sec.tables.append(TableData(["service", "iperf3 flows", "slice", "mean ms", "SLO viol. %"],
                                rows, f"Ours (scenario run: {v.run_dir}, with its own report)"))
    # the cells as result rows: the scenario report's comparison table and plots take those
    cell_rows = [{"service": k.split("|")[0], "iperf_flows": int(k.split("|")[1]),
                  "slicing": k.split("|")[2] == "on", "mean_latency_ms": c["mean_ms"],
                  "slo_violation_rate": c["slo"]} for k, c in cells.items()]
    beside = beside_the_figures(cell_rows)
    if beside:
        sec.tables.append(beside)
    sec.images += slicing_bars(cell_rows, plots)
    return sec


def _table(v: Verdict, plots: Path) -> Section:
    t = v.table
    sec = Section(v.title)
    sec.paragraphs.append(f"{_verdict(v)} — {v.summary}.{_decided_by(v)}")
    if t is None:
        return sec
    sec.paragraphs.append(t.title)
    rows = []
    for c in t.cells:
        for m in table_rules.METRICS:
            ours, paper = c.ours.get(m), c.paper.get(m)
            diff = "–"
            if ours is not None and paper:
                diff = f"{ours - paper:+.4f} ({(ours - paper) / abs(paper):+.0%})"
            sd = c.sd.get(m)
            rows.append([c.service, _policy_label(c.policy, "DRL (ppo)"),
                         METRIC_TITLES[m], _f(ours), _f(sd) if c.runs > 1 else "–", _f(paper),
                         diff, _cell(c.passed, t.decided_by) if m == "reward" else ""])
        if t.oracle and c.policy != "ppo":
            rows.append([c.service, "oracle bound", "reward", _f(t.oracle[c.service]), "–", "–",
                         "–", ""])
    sec.tables.append(TableData(["service", "policy", "metric", "ours", "sd (runs)", "paper",
                                 "ours − paper", "cell"], rows))
    if t.checks:
        sec.tables.append(TableData(["check", "result", "detail"],
                                    [[c.text, "**NOT RUN**" if c.decided_by else _pf(c.passed),
                                      c.detail + (f"; decided by: {c.decided_by}"
                                                  if c.decided_by else "")] for c in t.checks]))
    sec.bullets += t.notes + [d for d in v.details]
    if v.run_dir:
        sec.bullets.append(f"scenario run: `{v.run_dir}` (its own report.html has the time series)")
    img = _reward_plot(t, plots / f"table{t.key}.png")
    if img:
        sec.images.append(img)
    return sec


def _policy_label(policy: str, drl: str) -> str:
    """The tables' name for a policy: the paper's DRL, or the rule that ran ("rule v1")."""
    return drl if policy == "ppo" else policy.replace("_", " ")


def _reward_plot(t: table_rules.TableResult, path: Path) -> Path | None:
    if not t.cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    services = list(dict.fromkeys(c.service for c in t.cells))
    policies = list(dict.fromkeys(c.policy for c in t.cells))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / (2 * len(policies) + (1 if t.oracle else 0))
    k = 0
    colors = {"ppo": "#2e7d32", "rule_v2": "#1565c0", "rule_v1": "#6a1b9a"}
    for p in policies:
        for src in ("ours", "paper"):
            ys, errs = [], []
            for s in services:
                c = next((c for c in t.cells if c.service == s and c.policy == p), None)
                val = (c.ours if src == "ours" else c.paper).get("reward") if c else None
                ys.append(val or 0.0)  # the tables' sign: rewards are <= 0, higher is better
                errs.append((c.sd.get("reward") or 0.0) if (c and src == "ours") else 0.0)
            xs = [i + (k + 0.5) * width - 0.4 for i in range(len(services))]
            ax.bar(xs, ys, width, yerr=errs if any(errs) else None, capsize=3,
                   color=colors.get(p, "gray"), alpha=1.0 if src == "ours" else 0.45,
                   hatch="" if src == "ours" else "//",
                   label=f"{_policy_label(p, 'DRL')} {src}")
            k += 1
    if t.oracle:
        xs = [i + (k + 0.5) * width - 0.4 for i in range(len(services))]
        ax.bar(xs, [t.oracle[s] for s in services], width, color="#9e9e9e", label="oracle bound")
    ax.set_xticks(range(len(services)), services)
    ax.set_ylabel("reward (Eq. 3.2; 0 is best)")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(f"Table {t.key}: reward beside the paper", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write(result: ReproResult, base: Path, options: Options) -> tuple[Path, Path]:
    doc = build(result, base, options)
    md = base / "report.md"
    md.write_text(doc.markdown(base))
    page = base / "report.html"
    page.write_text(doc.html())
    return md, page

"""Rule v2 on Tables 5.1-5.3 stays where docs/sim.md's fidelity table says it is: beside the
published simulator (github.com/tu-nv/drafas at b51b580) and at our own recorded figures.

History: the first version of this file (d2541a8) pinned our simulator's figures to the bit as
recorded before the GPU path (3a66122). Issue 11's merge (219b3df) changed the simulator's model to
the published simulator's choices, which moved every one of those figures, and dropped the file
without a word. It pins, instead, the one table that records both simulators:
`python3 bench/sim_fidelity.py --reference DIR` measured the published simulator's column (it
needs a tu-nv/drafas checkout and simpy, which CI cannot fetch), so those figures are fixtures
read from the docs; ours are measured here, the same way, every run. That the GPU path in DRAFAS's
configuration decides as this simulator does is tests/sim/test_gpu.py's
test_drafas_configuration_serves_as_the_drafas_simulator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.profiles import paper
from testbed.scaler.policies import RuleV2
from testbed.traces import packaged_traces
from testbed.train.evaluate import evaluate
from testbed.train.evaluate import test_day_traces as day_traces

ROOT = Path(__file__).resolve().parents[2]
TRACES = packaged_traces()
SIM_DOC = ROOT / "docs" / "sim.md"
SEEDS = 5  # the table's "seed mean of 5"
# docs/sim.md: "ours reproduces both to within 5 % on every cell"
WITHIN_PUBLISHED = 0.05


_ROW = re.compile(r"^\| (5\.[123]) \| (chatbot|imgcls|TTS) \| (-?[\d.]+) \| (-?[\d.]+) \([^)]*\) \| "
                  r"(-?[\d.]+) \([^)]*\) \| ([\d.]+) / ([\d.]+) / ([\d.]+) \|$")


def fidelity_table(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """(table, service) -> the paper's, the published simulator's and our reward and instances,
    from the rows of docs/sim.md's "Fidelity" table."""
    section = text.split("## Fidelity", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = _ROW.match(line)
        if m:
            table, service, *nums = m.groups()
            paper_r, pub_r, ours_r, paper_i, pub_i, ours_i = map(float, nums)
            rows[table, service.lower()] = {"paper_reward": paper_r, "published_reward": pub_r,
                                            "ours_reward": ours_r, "paper_instances": paper_i,
                                            "published_instances": pub_i, "ours_instances": ours_i}
    return rows


def test_the_fidelity_table_is_read_whole():
    rows = fidelity_table(SIM_DOC.read_text())
    assert sorted(rows) == sorted((t, s) for t in ("5.1", "5.2", "5.3") for s in paper.SERVICES)
    # the paper's column is the paper's (testbed/profiles/paper.py holds its tables)
    for (table, service), row in rows.items():
        published = paper.PAPER_TABLES[table].results["rule_v2"][service]
        assert row["paper_reward"] == pytest.approx(published.reward, abs=5e-5), (table, service)


def _ours(table: str) -> dict[str, tuple[float, float]]:
    t = paper.PAPER_TABLES[table]
    traces = day_traces(TRACES)
    sums = {s: [0.0, 0.0] for s in paper.SERVICES}
    for seed in range(SEEDS):
        out = evaluate({s: RuleV2.for_service(s) for s in paper.SERVICES}, traces, t.ratios,
                       total_units=t.total_units, seed=seed)
        for s, r in out.items():
            sums[s][0] += r.reward / SEEDS
            sums[s][1] += r.instances / SEEDS
    return {s: (rew, inst) for s, (rew, inst) in sums.items()}


def problems(table: str, ours: dict[str, tuple[float, float]],
             rows: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    """Where `ours` (service -> reward, instances) leaves the recorded figures or the published
    simulator's by more than WITHIN_PUBLISHED."""
    out = []
    for service, (reward, instances) in ours.items():
        row = rows[table, service]
        # ours, as recorded (the table prints 4 and 3 decimals): a model change must re-record it
        if (round(reward, 4), round(instances, 3)) != (row["ours_reward"], row["ours_instances"]):
            out.append(f"{table} {service}: ours {reward:.4f} / {instances:.3f}, recorded "
                       f"{row['ours_reward']} / {row['ours_instances']}")
        for what, value in (("reward", reward), ("instances", instances)):
            pub = row[f"published_{what}"]
            if abs(value - pub) > WITHIN_PUBLISHED * abs(pub):
                out.append(f"{table} {service}: {what} {value:.4f} is more than "
                           f"{WITHIN_PUBLISHED:.0%} from the published simulator's {pub}")
    return out


@pytest.mark.parametrize("table", ["5.1", "5.2", pytest.param("5.3", marks=pytest.mark.slow)])
def test_rule_v2_is_at_the_recorded_figures_and_near_the_published_simulator(table):
    assert problems(table, _ours(table), fidelity_table(SIM_DOC.read_text())) == []


def test_a_figure_off_the_record_or_off_the_published_simulator_is_reported():
    rows = fidelity_table(SIM_DOC.read_text())
    row = rows["5.1", "chatbot"]
    recorded = {"chatbot": (row["ours_reward"], row["ours_instances"])}
    assert problems("5.1", recorded, rows) == []
    moved = {"chatbot": (row["ours_reward"] + 0.0001, row["ours_instances"])}
    [p] = problems("5.1", moved, rows)
    assert "recorded" in p
    far = {"chatbot": (row["published_reward"] * 1.06, row["published_instances"] * 0.94)}
    assert [p.split(": ")[1].split()[0] for p in problems("5.1", far, rows)] == [
        "ours", "reward", "instances"]

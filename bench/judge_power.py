"""How often the judge gets slicing-ci's checks wrong, by simulation: the false-FAIL rate in the
healthy state and the power at each check's stated effect, with requests that share their fate.

Each simulated cell sends `rate x duration` requests (slicing-ci's plan: 26 s at 30 req/s for
imgcls, 10 req/s for TTS and the chatbot); a request's latency is its cell's mean, plus a shock
shared by every request scheduled in the same second (a connection's queue, a burst of
congestion: `--shared` of the variance), plus its own noise. The rows go through the same
`service_row` as a run's (so the batch-means standard errors are those a run has) and the same
`evaluate`. Printed per check: the share of runs that FAIL (healthy state: must be <= 0.05) and
that do not PASS (at the effect the check states: power >= 0.95 means <= 0.05 PASS there), with
the batch-means variance and with requests taken as independent. "Healthy" is the edge of the
passing side: a limit at its bound, a claim of an effect at the effect it states, "no difference"
at none; "at the effect" the edge of the failing side: a limit missed by its effect, a claim of
an effect at its bound (no more than the bound), "no difference" at the margin (or the doctored
16 %).

    python bench/judge_power.py [--runs 400] [--shared 0.3] [--seed 1]
"""

from __future__ import annotations

import argparse
import random

from testbed.clock import ScenarioClock
from testbed.judge.outcome import evaluate
from testbed.judge.syntax import parse
from testbed.scenario.results import service_row

DURATION_S = 26.0
OFF, ON = "slicing=off", "slicing=on"


def cell(service: str, arm: str, rate: float, mean: float, sd: float, late: float,
         shared: float, rng: random.Random, slo_ms: float) -> dict:
    """One simulated cell's result row: gamma latencies of mean `mean` and sd `sd`, a share
    `shared` of whose variance is a factor common to the requests of one second; a share `late`
    of requests over the SLO (and none otherwise)."""
    records = []
    n = int(rate * DURATION_S)
    cv_s = (shared ** 0.5) * sd / mean
    shocks = [_gamma(rng, 1.0, cv_s) for _ in range(int(DURATION_S) + 1)]
    for i in range(n):
        t = i / rate
        lat = min(_gamma(rng, mean * shocks[int(t)], (1 - shared) ** 0.5 * sd), slo_ms)
        if rng.random() < late:
            lat = slo_ms + 1 + rng.random() * 100
        records.append({"scheduled": t, "latency_ms": lat, "latency_sched_ms": lat})
    row = service_row(records, service, clock=ScenarioClock(1.0), duration_s=DURATION_S, slo_ms=slo_ms)
    return {**row, "slicing": arm.split("=")[1], "status": "ok", "cell": f"{service}-{arm}"}


def _gamma(rng: random.Random, mean: float, sd: float) -> float:
    if sd <= 0:
        return mean
    k = (mean / sd) ** 2
    return rng.gammavariate(k, mean / k)


CASES = [  # (check, healthy arms, arms at the stated effect); arm = (rate, mean, sd, late)
    ("mean_latency_ms[service=imgcls, slicing=off] >= 1.2 * mean_latency_ms[service=imgcls, "
     "slicing=on] effect 1", "imgcls", 30, 500,
     {OFF: (2.2 * 97, 300, 0.0), ON: (97, 20, 0.0)}, {OFF: (1.2 * 97, 300, 0.0), ON: (97, 20, 0.0)}),
    ("slo_violation_rate[service=imgcls, slicing=on] <= 0.01 effect 0.015", "imgcls", 30, 500,
     {ON: (97, 20, 0.01)}, {ON: (97, 20, 0.025)}),
    ("slo_violation_rate[service=imgcls, slicing=off] > slo_violation_rate[service=imgcls, "
     "slicing=on] effect 0.02", "imgcls", 30, 500,
     {OFF: (283, 300, 0.02), ON: (97, 20, 0.0)}, {OFF: (283, 300, 0.0), ON: (97, 20, 0.0)}),
    # at the margin itself TOST passes at most ALPHA of the time; the doctored 16 % beside it
    ("mean_latency_ms[service=chatbot, slicing=off] / mean_latency_ms[service=chatbot, "
     "slicing=on] ~= 1 within 0.1", "chatbot", 10, 2500,
     {OFF: (280, 81, 0.0), ON: (280, 81, 0.0)}, {OFF: (1.1 * 280, 81, 0.0), ON: (280, 81, 0.0)}),
    ("mean_latency_ms[service=chatbot, slicing=off] / mean_latency_ms[service=chatbot, "
     "slicing=on] ~= 1 within 0.1", "chatbot", 10, 2500,
     {OFF: (280, 81, 0.0), ON: (280, 81, 0.0)}, {OFF: (1.16 * 280, 81, 0.0), ON: (280, 81, 0.0)}),
    ("slo_violation_rate[service=tts, slicing=off] ~= slo_violation_rate[service=tts, slicing=on] "
     "within 0.02", "tts", 10, 2500,
     {OFF: (370, 75, 0.003), ON: (370, 75, 0.003)}, {OFF: (370, 75, 0.023), ON: (370, 75, 0.003)}),
]


def rates(check: str, service: str, rate: float, slo: float, arms: dict, runs: int,
          shared: float, rng: random.Random, independent: bool) -> dict[str, float]:
    """Shares of PASS / FAIL / UNDECIDED over `runs` simulated runs."""
    parsed = parse(check)
    counts = {"PASS": 0, "FAIL": 0, "UNDECIDED": 0}
    for _ in range(runs):
        rows = []
        for arm, (mean, sd, late) in arms.items():
            r = cell(service, arm, rate, mean, sd, late, shared, rng, slo)
            if independent:
                r["mean_latency_batch_se_ms"] = r["slo_violation_batch_se"] = None
            rows.append(r)
        counts[evaluate(parsed, rows).verdict] += 1
    return {k: v / runs for k, v in counts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--shared", type=float, default=0.05, help="share of the variance per second")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"{a.runs} runs per line; {100 * a.shared:g} % of each latency's variance shared by "
          f"the requests of a second; cells of {DURATION_S:g} s")
    for check, service, rate, slo, healthy, effect in CASES:
        print(check)
        for label, independent in (("batch means", False), ("independent", True)):
            h = rates(check, service, rate, slo, healthy, a.runs, a.shared, rng, independent)
            e = rates(check, service, rate, slo, effect, a.runs, a.shared, rng, independent)
            print(f"  {label:12s} healthy (edge of the zone): FAIL {h['FAIL']:.3f}, UNDECIDED "
                  f"{h['UNDECIDED']:.3f} | at the effect: PASS {e['PASS']:.3f} (power "
                  f"{1 - e['PASS']:.3f}), FAIL {e['FAIL']:.3f}")


if __name__ == "__main__":
    main()

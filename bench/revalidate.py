"""Re-validate candidate agents of one service on the validation day with more episodes (issue 11).

Usage: python3 bench/revalidate.py SERVICE CANDIDATE.zip [...] [--traces DIR] [--partners DIR]
                                   [--episodes N]

A training run keeps the checkpoint with the best validation over 3 episodes per setup; between
runs (other seeds, other starting agents) those scores differ by less than their noise. This
prints, per candidate, on the validation day (day 6) with --episodes episodes per setup (default
10): the pool's reward (the three services' Eq. 3.2, the other two deciding with the agents in
--partners, default models/) and the candidate's own, at Table 5.1's and 5.2's loads in the
shared 8-unit pool; its own reward alone at 128 units (3 episodes); and `score`, the mean of the
two pool rewards and the 128-unit one (what `testbed train --validate-pool` maximises). Totals
per episode (2,880 periods), higher is better.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.load.trace import load_trace
from testbed.profiles.paper import DEFAULT_RATIOS, SERVICES
from testbed.scaler.ppo import MaskablePpoPolicy
from testbed.traces import PACKAGE, traces_folder
from testbed.train.ppo import validation_reward
from testbed.train.wrappers import Research


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("service", choices=SERVICES)
    ap.add_argument("candidates", nargs="+")
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--partners", default=str(Path(__file__).resolve().parents[1] / "models"))
    ap.add_argument("--episodes", type=int, default=10)
    args = ap.parse_args()
    val = [load_trace(Path(args.traces) / "val" / "day6.txt")]
    partners = {
        s: MaskablePpoPolicy.load(Path(args.partners) / f"{s}.zip", s) for s in SERVICES if s != args.service
    }
    ratio = DEFAULT_RATIOS[args.service]
    for path in args.candidates:
        model = MaskablePpoPolicy.load(path, args.service).model
        row: dict[str, object] = {"candidate": path}
        for load in (1.0, 2.0):
            for kind, pool in (("pool", True), ("own", False)):
                row[f"{kind}@{load:g}"] = round(
                    validation_reward(
                        model, args.service, val, ratio * load, 8, args.episodes,
                        Research(loads=(1.0,), shared=True, partners=partners, pool_reward=pool),
                    ),
                    1,
                )
        row["own@128"] = round(validation_reward(model, args.service, val, ratio * 16, 128, 3), 1)
        row["score"] = round((row["pool@1"] + row["pool@2"] + row["own@128"]) / 3, 1)  # type: ignore[operator]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

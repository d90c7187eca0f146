"""bench/sim_speed.py claims no speed ratio it did not measure: without --reference it runs only
our simulator, prints no "N x" figure against a stored number and says the reference was not run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from testbed.traces import packaged_traces

ROOT = Path(__file__).resolve().parents[2]
TRACES = packaged_traces()


def test_without_the_reference_no_ratio_is_printed_and_it_says_so():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_speed.py"), "--traces", str(TRACES),
                          "--steps", "3"], capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [line for line in out.splitlines() if re.match(r"(chatbot|imgcls|tts) ", line)]
    assert len(rows) == 3 * 2 * 3  # services x loads x policies: the table did run
    # loads are whole multiples ("8x"); a ratio would be a decimal multiple ("12.3x")
    assert re.findall(r"\d+\.\d+ ?x\b", out) == []
    assert "SimPy" not in out
    assert out.rstrip().splitlines()[-1].startswith("speed ratio: none; the published simulator was not run")

"""How the live page names a cell repetition: its key (index and repetition) and its label, the
matrix parameters with secret values masked."""

from __future__ import annotations

import re
from typing import Any

from testbed.config.secrets import REDACTED
from testbed.scenario.matrix import fmt_value

# matrix keys whose values are secrets (a subscriber key, a database address with its password):
# masked on the page, as the manifest masks them in the scenario
SECRET_KEY = re.compile(r"(^|\.)(key_seed|k|opc|mongo_uri)$", re.I)


def masked_label(params: dict[str, Any]) -> str:
    """A cell's matrix parameters as its label writes them (`slicing=on, iperf_flows=40`, or
    "base"), the values of secret keys masked.

    params: the cell's parameters (key -> value)."""
    return ", ".join(f"{k}={REDACTED if SECRET_KEY.search(k) else fmt_value(v)}"
                     for k, v in params.items()) or "base"


def cell_key(slug: str, rep: int) -> str:
    """The page's name of a cell repetition: its index and repetition, not its slug (which
    writes the parameters' values).

    slug: the cell's directory name; rep: its repetition."""
    return f"{slug.split('-', 1)[0]}/{rep}"

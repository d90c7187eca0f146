"""testbed: an end-to-end 5G testbed harness for AI-native services.

The Python API (`testbed.api`, loaded on first use so that the CLI starts fast):
`load_scenario`, `run_scenario` -> `Result` (`rows`, `verdict`, `to_csv`), `evaluate` (the
simulator), and the registry: `services`, `register_service`, `register_policy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.api import (
        Result,
        evaluate,
        load_scenario,
        register_policy,
        register_service,
        run_scenario,
        services,
    )

__version__ = "0.1.0"
__all__ = ["Result", "evaluate", "load_scenario", "register_policy", "register_service", "run_scenario",
           "services"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("testbed.api"), name)
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")

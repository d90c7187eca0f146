"""Declarative specs (pydantic) and YAML loading with errors that name file, line and field."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.config.testbed_file import check_testbed, load_testbed, testbed_from_yaml
    from testbed.config.testbed_spec import LinkSpec, SliceSpec, TestbedSpec, UEGroupSpec
    from testbed.config.yamlfile import LocatedYaml, load_yaml_file, parse_yaml, validate

__all__ = [
    "LinkSpec",
    "LocatedYaml",
    "SliceSpec",
    "TestbedSpec",
    "UEGroupSpec",
    "check_testbed",
    "load_testbed",
    "load_yaml_file",
    "parse_yaml",
    "testbed_from_yaml",
    "validate",
]

# each name's module, imported on first use: a submodule without models (names, secrets) loads
# without building the specs' pydantic models (`testbed status` with nothing up)
_HOME = {name: "testbed.config.yamlfile" if name in ("LocatedYaml", "load_yaml_file", "parse_yaml",
                                                     "validate")
         else "testbed.config.testbed_file" if name in ("check_testbed", "load_testbed",
                                                        "testbed_from_yaml")
         else "testbed.config.testbed_spec"
         for name in __all__}


def __getattr__(name: str) -> Any:
    """The public name `name`, from its module (PEP 562).

    name: one of __all__."""
    if name not in _HOME:
        raise AttributeError(f"module 'testbed.config' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)

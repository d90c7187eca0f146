"""Declarative specs (pydantic) and YAML loading with errors that name file, line and field."""

from testbed.config.testbed_spec import (
    LinkSpec,
    SliceSpec,
    TestbedSpec,
    UEGroupSpec,
    check_testbed,
    load_testbed,
    testbed_from_yaml,
)
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

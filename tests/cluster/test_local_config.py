"""The local cluster takes one configuration object (issue 45): LocalClusterConfig, checked when
made, instead of 17 keyword parameters; the cluster's own `scale` is the only one in its package."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[2] / "testbed" / "cluster" / "local"


def test_the_cluster_takes_a_config_and_a_listener():
    params = [p for p in inspect.signature(LocalCluster).parameters if p != "self"]
    assert params == ["config", "on_event"]


def test_a_bad_config_is_refused_when_made():
    with pytest.raises(ConfigError, match="time_scale"):
        LocalClusterConfig(time_scale=0)
    with pytest.raises(ConfigError, match="no profile"):
        LocalClusterConfig(services=["nosuch"])
    config = LocalClusterConfig(services=["imgcls"], initial={"imgcls": 2})
    assert config.names == ["imgcls"] and config.initial_replicas("imgcls") == 2
    assert LocalClusterConfig(profiles=None).profiles  # the registry's


def test_one_scale_in_the_local_cluster():
    defined = [f"{p.name}:{n.name}" for p in PACKAGE.glob("*.py")
               for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "scale"]
    assert defined == ["cluster.py:scale"]

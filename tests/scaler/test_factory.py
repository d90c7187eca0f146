"""`build_policies`: one object over the services that share a planner, one policy each for the
rest, in the services' order."""

from __future__ import annotations

from testbed.profiles import default_profiles
from testbed.scaler.fa2 import Fa2Policy
from testbed.scaler.factory import PolicyChoice, build_policies
from testbed.scaler.gslice import EqualSharePolicy
from testbed.scaler.policies import HpaPolicy, StaticPolicy


def test_shared_planners_are_one_object_and_the_rest_one_policy_each():
    built = build_policies(
        [PolicyChoice("tts", "static"), PolicyChoice("imgcls", "fa2"),
         PolicyChoice("chatbot", "fa2")], default_profiles(), total_units=8, seed=1)
    assert list(built.policies) == ["tts", "imgcls", "chatbot"] and built.models == {}
    assert isinstance(built.policies["tts"], StaticPolicy)
    assert isinstance(built.policies["imgcls"], Fa2Policy)
    assert built.policies["imgcls"] is built.policies["chatbot"]


def test_gslice_and_per_service_policies():
    built = build_policies(
        [PolicyChoice("imgcls", "gslice"), PolicyChoice("tts", "hpa"),
         PolicyChoice("chatbot", "gslice")], default_profiles(), total_units=6, seed=0)
    assert isinstance(built.policies["imgcls"], EqualSharePolicy)
    assert built.policies["chatbot"] is built.policies["imgcls"]
    assert built.policies["tts"] == HpaPolicy(total_units=6)

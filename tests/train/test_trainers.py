"""The trainer registry: one home for what `testbed train --policy` can train."""

import pytest

from testbed.errors import ConfigError
from testbed.scaler import registry, share
from testbed.train.options import TrainOptions
from testbed.train.trainers import TRAINERS, trainer


def test_every_trainer_trains_a_registered_policy_that_loads_a_model():
    for name, t in TRAINERS.items():
        entry = registry.resolve(name)
        assert entry.needs_model, name
        assert (entry.plan is not None) == (t.scope == "paper"), name  # a share actor plans all
    assert set(share.KINDS) == {n for n, t in TRAINERS.items() if t.scope == "paper"}


def test_train_option_choices_and_an_unknown_trainer_come_from_the_registry():
    (policy,) = [f for f in TrainOptions.__dataclass_fields__.values() if f.name == "policy"]
    assert tuple(policy.metadata["opt"].choices) == tuple(TRAINERS)
    with pytest.raises(ConfigError, match="no trainer for policy 'rule_v2'; use ppo, ddpg, inss"):
        trainer("rule_v2")

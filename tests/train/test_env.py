"""The Gymnasium adapter and a short Maskable PPO training run."""

import pytest

gym = pytest.importorskip("gymnasium", reason="the Gymnasium env needs the drl extra")

from testbed.load.trace import Trace  # noqa: E402
from testbed.train.env import ScalingEnv  # noqa: E402
from testbed.train.wrappers import EpisodeDraws, PoolReward, RandomFreeUnits, Research, SharedPool  # noqa: E402


def test_check_env_and_mask():
    from gymnasium.utils.env_checker import check_env

    env = ScalingEnv("chatbot", [Trace.constant(20, 1800)], 0.15)
    check_env(env, skip_render_check=True)
    # the view of the free units: never drawn, the real 7 of 8 (one replica holds one unit)
    seen = RandomFreeUnits(ScalingEnv("chatbot", [Trace.constant(20, 1800)], 0.15), share=0.0)
    obs, _ = seen.reset(seed=0)
    assert obs.shape == (30,)
    assert list(seen.action_masks()) == [False, False, True, True, True]
    # always drawn (0 to 7 free): never below one replica, +2 only where +1, and some draws
    # leave no unit free (+1 masked)
    drawn = RandomFreeUnits(ScalingEnv("chatbot", [Trace.constant(20, 1800)], 0.15), share=1.0)
    masks = [list(drawn.action_masks()) for seed in range(24) if drawn.reset(seed=seed)]
    assert all(m[:3] == [False, False, True] and (m[3] or not m[4]) for m in masks)
    assert any(not m[3] for m in masks) and any(m[4] for m in masks)
    env = RandomFreeUnits(env)
    env.reset(seed=0)
    steps = 0
    done = False
    while not done:
        _, r, term, trunc, _ = env.step(2)
        assert r <= 0
        steps += 1
        done = term or trunc
    assert steps == 1800 // 30 - 1  # the first period is consumed by reset
    env.close()
    env.close()


def test_free_units_are_randomised_in_training():
    env = RandomFreeUnits(ScalingEnv("chatbot", [Trace.constant(1, 3000)], 0.15))
    env.reset(seed=1)
    seen = set()
    for _ in range(40):
        seen.add(tuple(env.action_masks()))
        env.step(2)
    assert len(seen) > 1  # sometimes no room to scale up, sometimes room


def test_scales_draw_the_pool_size_and_scale_the_load():
    """Each episode draws its units; the ratio follows them, and the unit-cost cue reads 8/units."""
    from testbed.scaler.state import latest

    env = EpisodeDraws(ScalingEnv("imgcls", [Trace.constant(10, 600)], 0.4), scales=[8, 128])
    seen = {}
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        seen[env.unwrapped.total_units] = (latest(obs, "unit_cost"), env.unwrapped._cluster.total_units())
    assert seen[8] == (1.0, 8)
    assert seen[128][0] == pytest.approx(8 / 128) and seen[128][1] == 128
    # the reward prices an instance at 1/units of the episode's pool
    _, r, *_ = env.step(2)
    assert r <= 0
    fixed = ScalingEnv("imgcls", [Trace.constant(10, 600)], 0.4)
    obs, _ = fixed.reset(seed=0)
    assert fixed.total_units == 8 and latest(obs, "unit_cost") == 1.0


@pytest.mark.slow
def test_short_training_beats_random(tmp_path):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    import numpy as np

    from testbed.scaler.policies import RandomPolicy
    from testbed.scaler.ppo import MaskablePpoPolicy
    from testbed.train.model_file import read_meta
    from testbed.train.ppo import train, validation_reward

    rate = 10 + 8 * np.sin(np.arange(21600) / 3000.0)  # one instance suffices: learn not to waste units
    train_tr = Trace("wave", np.ones(21600), rate)
    val_tr = Trace("wave-val", np.ones(7200), rate[:7200] * 1.1)
    out = tmp_path / "m.zip"
    meta = train(
        "chatbot",
        [train_tr],
        [val_tr],
        out,
        steps=6144,
        val_episodes=1,
        validate_every=10**9,
        learning_rate=1e-3,
        ppo_params={"n_steps": 512},
    )
    assert read_meta(out).service == "chatbot" and meta.commit
    policy = MaskablePpoPolicy.load(out)

    class AsModel:  # score the random policy with the same episode runner
        def __init__(self, p):
            self.p = p

        def predict(self, obs, action_masks, deterministic):
            return self.p.act(obs, tuple(int(x) for x in action_masks)), None

    ppo = validation_reward(policy.model, "chatbot", [val_tr], 0.15, 8, 1)
    rnd = validation_reward(AsModel(RandomPolicy(0)), "chatbot", [val_tr], 0.15, 8, 1)
    assert ppo > rnd


def test_tensorboard_logs_without_tensorboard_is_one_clear_error(tmp_path, monkeypatch):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    import sys

    from testbed.errors import MissingRequirement
    from testbed.load.trace import Trace
    from testbed.train.ppo import train

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    tr = [Trace.constant(5, 600)]
    with pytest.raises(MissingRequirement, match="tensorboard"):
        train("chatbot", tr, tr, tmp_path / "m.zip", steps=64, tensorboard=str(tmp_path / "tb"))
    assert not (tmp_path / "m.zip").exists()


def test_init_from_a_25_input_agent_keeps_its_weights_and_zeroes_the_cue(tmp_path):
    """--init-from: a model of the observation before the unit-cost cue starts training as itself."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    import numpy as np
    from sb3_contrib import MaskablePPO

    from testbed.train.ppo import train

    class Env25(gym.Env):
        observation_space = gym.spaces.Box(0.0, 1.0, shape=(25,), dtype=np.float32)
        action_space = gym.spaces.Discrete(5)

        def reset(self, *, seed=None, options=None):
            return np.zeros(25, dtype=np.float32), {}

        def step(self, action):
            return np.zeros(25, dtype=np.float32), 0.0, False, False, {}

        def action_masks(self):
            return np.ones(5, dtype=bool)

    import torch

    old = MaskablePPO("MlpPolicy", Env25(), n_steps=16, batch_size=16, device="cpu",
                      policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                                     "activation_fn": torch.nn.ReLU})
    old.save(str(tmp_path / "old.zip"))
    tr = [Trace.constant(5, 600)]
    train("chatbot", tr, tr, tmp_path / "m.zip", steps=32, val_episodes=1, validate_every=10**9,
          learning_rate=0.0, ppo_params={"n_steps": 32, "batch_size": 32}, init_from=tmp_path / "old.zip",
          scales=[8, 128])
    new = MaskablePPO.load(str(tmp_path / "m.zip"), device="cpu").policy.state_dict()
    w_old = old.policy.state_dict()["mlp_extractor.policy_net.0.weight"]
    w_new = new["mlp_extractor.policy_net.0.weight"]
    assert tuple(w_new.shape) == (64, 30)
    torch.testing.assert_close(w_new[:, :25], w_old)
    assert float(w_new[:, 25:].abs().max()) == 0.0


def _day(seconds=7200):
    """A day-like trace: a slow wave, so that shifted copies differ and neighbours scale."""
    import numpy as np

    rate = 20 + 15 * np.sin(np.arange(seconds) / 600.0)
    return Trace("wave", np.ones(seconds), rate)


@pytest.mark.parametrize("service", ["chatbot", "tts"])
def test_shared_episode_is_the_tables_run_with_rule_v2(monkeypatch, service):
    """--shared: an agent that acts as rule v2 in the env gives, step for step, the replica counts
    of all three services that evaluate() gives with rule v2 for all three (same pool, shifted
    traces, doubled load, the tables' decision order), so the free units it sees are the tables'."""
    import testbed.train.episode as episode_mod
    from testbed.profiles.paper import DEFAULT_RATIOS, TEST_SHIFT_HOURS
    from testbed.scaler.policies import RuleV2
    from testbed.train.evaluate import EvalRun, evaluate

    real = episode_mod.SimCluster
    monkeypatch.setattr(episode_mod, "SimCluster", lambda *a, **k: real(*a, **{**k, "seed": 0}))
    day = _day()
    env = PoolReward(SharedPool(EpisodeDraws(ScalingEnv(service, [day], DEFAULT_RATIOS[service]), loads=[2])))
    obs, _ = env.reset(seed=3)
    env_ = env.unwrapped
    assert env_.load == 2 and set(env_._cluster.services()) == set(TEST_SHIFT_HOURS)
    me = RuleV2.for_service(service)
    ours, rewards, done = [], [], False
    while not done:
        action = me.act(obs, tuple(int(x) for x in env_.action_masks()))
        obs, r, term, trunc, _ = env.step(action)
        ours.append({s: env_._cluster.desired_replicas(s) for s in TEST_SHIFT_HOURS})
        rewards.append(r)
        done = term or trunc
    theirs: list[dict[str, int]] = []
    pool: list[float] = []

    def log(d):
        if d.service == "chatbot":
            theirs.append({})
            pool.append(0.0)
        theirs[-1][d.service] = d.replicas_after
        pool[-1] += d.reward

    evaluate(
        {s: RuleV2.for_service(s) for s in TEST_SHIFT_HOURS},
        {s: day.window(h) for s, h in TEST_SHIFT_HOURS.items()},
        {s: 2 * DEFAULT_RATIOS[s] for s in TEST_SHIFT_HOURS},
        seed=0,
        run=EvalRun(on_decision=log),
    )
    # the env's step k ends after the neighbours that decide before the agent at period k+1
    order = list(TEST_SHIFT_HOURS)
    before = order[: order.index(service) + 1]
    for k, row in enumerate(ours[:-1]):
        for s in order:
            want = theirs[k + 1][s] if s in before[:-1] else theirs[k][s]
            assert row[s] == want, (k, s)
    assert max(r[s] for r in ours for s in order if s != service) > 1  # the neighbours did scale
    # --pool-reward: a step's reward is the three services' Eq. 3.2 for the period it produced
    assert rewards == pytest.approx(pool[1 : len(rewards) + 1])


def test_loads_apply_to_the_base_pool_only():
    env = EpisodeDraws(ScalingEnv("imgcls", [Trace.constant(10, 600)], 0.4), scales=[8, 128], loads=[3])
    seen = {}
    for seed in range(12):
        env.reset(seed=seed)
        seen[env.unwrapped.total_units] = env.unwrapped.load
    assert seen == {8: 3.0, 128: 1.0}


def test_shared_episodes_show_the_real_free_units():
    """No randomised free units in a shared episode: the mask always follows the pool."""
    from testbed.scaler.actions import action_mask

    env = RandomFreeUnits(SharedPool(EpisodeDraws(ScalingEnv("chatbot", [_day(3600)], 0.15), loads=[2])))
    env.reset(seed=1)
    for _ in range(100):
        c = env.unwrapped._cluster
        want = action_mask(c.desired_replicas("chatbot"), c.free_units(), 1, env.unwrapped._cooldown)
        assert tuple(int(x) for x in env.unwrapped.action_masks()) == want
        env.step(3)


def test_init_from_is_the_validation_to_beat(tmp_path):
    """A run started from a model validates that model first (step 0); a checkpoint replaces it
    only if it validates better, so with no learning the output is the starting model."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.scaler.ppo import MaskablePpoPolicy
    from testbed.train.ppo import train, validation_reward

    tr = [Trace.constant(5, 900)]
    kw = {"val_episodes": 1, "validate_every": 64, "ppo_params": {"n_steps": 64, "batch_size": 64}}
    train("chatbot", tr, tr, tmp_path / "a.zip", steps=64, **kw)
    start = validation_reward(
        MaskablePpoPolicy.load(tmp_path / "a.zip").model, "chatbot", tr, 0.15, 8, 1,
        Research(loads=(1, 2), shared=True),
    )
    meta = train("chatbot", tr, tr, tmp_path / "b.zip", steps=192, learning_rate=0.0,
                 init_from=tmp_path / "a.zip", loads=[1, 2], shared=True, **kw)
    assert meta.validations[0] == (0, pytest.approx(start))
    assert len(meta.validations) == 4 and meta.loads == [1, 2] and meta.shared
    assert meta.best_validation_reward == pytest.approx(max(v for _, v in meta.validations))


def test_validate_pool_scores_the_pool_and_checkpoints_keep_every_validation(tmp_path):
    """--validate-pool: the validations are the pool's reward (the three services' Eq. 3.2) while
    training keeps the agent's own; --checkpoints writes each validated model with its step."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.scaler.ppo import MaskablePpoPolicy
    from testbed.train.model_file import read_meta
    from testbed.train.ppo import train, validation_reward

    tr = [Trace.constant(5, 900)]
    kw = {"val_episodes": 1, "validate_every": 64, "ppo_params": {"n_steps": 64, "batch_size": 64}}
    train("chatbot", tr, tr, tmp_path / "a.zip", steps=64, **kw)
    model = MaskablePpoPolicy.load(tmp_path / "a.zip").model
    own = validation_reward(model, "chatbot", tr, 0.15, 8, 1, Research(loads=(1,), shared=True))
    pool = validation_reward(model, "chatbot", tr, 0.15, 8, 1,
                             Research(loads=(1,), shared=True, pool_reward=True))
    assert pool < own  # the two others' rewards are negative too
    meta = train("chatbot", tr, tr, tmp_path / "b.zip", steps=128, learning_rate=0.0,
                 init_from=tmp_path / "a.zip", loads=[1], shared=True, validate_pool=True,
                 checkpoints=tmp_path / "ck", **kw)
    assert meta.validate_pool and not meta.pool_reward
    assert meta.validations[0] == (0, pytest.approx(pool))
    written = sorted(p.name for p in (tmp_path / "ck").glob("*.zip"))
    assert written == ["chatbot-128.zip", "chatbot-64.zip"]
    ck = read_meta(tmp_path / "ck" / "chatbot-64.zip")
    assert ck.steps == 64 and ck.best_validation_reward == pytest.approx(meta.validations[1][1])


class _Grabber:
    """A partner that asks for +1 whenever the mask allows it and records what it was shown."""

    name = "grabber"

    def __init__(self) -> None:
        self.masks: list[tuple[int, ...]] = []

    def act(self, observation, action_mask) -> int:
        self.masks.append(tuple(action_mask))
        return 3 if action_mask[3] else 2


def test_partners_decide_the_other_services_instead_of_rule_v2():
    """--partners: in a shared episode the partner policy, not rule v2, scales its service (a
    partner that always scales up at a light load fills the pool, which rule v2 never does), while
    the service without a partner stays on rule v2."""
    day = _day(3600)
    grabber = _Grabber()
    env = SharedPool(ScalingEnv("chatbot", [day], 0.15), partners={"imgcls": grabber})
    env.reset(seed=1)
    base = SharedPool(ScalingEnv("chatbot", [day], 0.15))
    base.reset(seed=1)
    for _ in range(40):
        env.step(2)
        base.step(2)
    assert len(grabber.masks) >= 40  # asked once per period
    ours, theirs = env.unwrapped._cluster, base.unwrapped._cluster
    assert ours.free_units() == 0 and theirs.free_units() > 0
    assert ours.desired_replicas("imgcls") > theirs.desired_replicas("imgcls")
    assert env.unwrapped._neighbours.policies["tts"].name == "rule_v2"


def test_load_partners_names_a_missing_agent(tmp_path):
    """The partner folder must hold an agent for each other service: one error naming the file."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.errors import ConfigError
    from testbed.train.ppo import load_partners

    assert load_partners(None, "chatbot") == {}
    with pytest.raises(ConfigError, match=r"imgcls\.zip"):
        load_partners(tmp_path, "chatbot")


def test_like_testbed_draws_the_testbed_clients_per_episode():
    """like_testbed=0.5: some episodes send each second's requests from its start (the local
    testbed's client), the others one gap later (the published simulator's); at 0 every episode is
    the published simulator's and the episodes are the ones an env without the option draws."""
    import numpy as np

    from testbed.sim.cluster import DEFAULT_OPTIONS, TESTBED_OPTIONS

    trace = Trace("flat", np.ones(600), np.full(600, 8.0))  # 4 requests a second at ratio 0.5
    env = EpisodeDraws(ScalingEnv("chatbot", [trace], 0.5), mixed_share=0.5)
    seen = set()
    for seed in range(16):
        env.reset(seed=seed)
        first = env.unwrapped._cluster.sims["chatbot"].arrivals[:4]
        seen.add(env.unwrapped.options)
        if env.unwrapped.options is TESTBED_OPTIONS:  # from the start of each second
            assert first == pytest.approx([0.0, 0.25, 0.5, 0.75])
        else:  # a gap before each, the last on the next second (the published client)
            assert first == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert seen == {DEFAULT_OPTIONS, TESTBED_OPTIONS}
    plain = ScalingEnv("chatbot", [trace], 0.5)
    zero = EpisodeDraws(ScalingEnv("chatbot", [trace], 0.5), mixed_share=0)
    for a, b in ((plain.reset(seed=3)[0], zero.reset(seed=3)[0]), (plain.step(3)[0], zero.step(3)[0])):
        assert np.array_equal(a, b)


def test_like_testbed_validation_adds_the_testbed_setup(tmp_path):
    """With like_testbed the validation is the mean over the usual setups and one more with the
    testbed's clients; out of range is refused before anything is written."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.errors import ConfigError
    from testbed.scaler.ppo import MaskablePpoPolicy
    from testbed.train.ppo import _episodes_reward, train, validation_reward

    tr = [_day(3600)]
    kw = {"val_episodes": 1, "validate_every": 64, "ppo_params": {"n_steps": 64, "batch_size": 64}}
    meta = train("chatbot", tr, tr, tmp_path / "a.zip", steps=64, ratio=0.6, like_testbed=0.5, **kw)
    assert meta.like_testbed == 0.5
    model = MaskablePpoPolicy.load(tmp_path / "a.zip").model
    usual = _episodes_reward(model, "chatbot", tr, 0.6, 8, 1, Research())
    testbed = _episodes_reward(model, "chatbot", tr, 0.6, 8, 1, Research(mixed_share=1.0))
    assert usual != testbed
    both = validation_reward(model, "chatbot", tr, 0.6, 8, 1, Research(mixed_share=1.0))
    assert both == pytest.approx((usual + testbed) / 2)
    assert meta.validations[-1][1] == pytest.approx(both)
    with pytest.raises(ConfigError, match="--like-testbed"):
        train("chatbot", tr, tr, tmp_path / "c.zip", steps=64, like_testbed=1.5, **kw)
    assert not (tmp_path / "c.zip").exists()

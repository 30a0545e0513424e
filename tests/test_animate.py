"""A trained agent's animation: one greedy episode in an environment of its own, as HTML with one frame per
state, that stops where the episode ends and leaves the caller's environment, actor and random numbers as
they were; MuJoCo's own pictures where this machine can draw them, and otherwise an error saying what to
install."""

import base64
import io
import os
import random
import re

import numpy as np
import pytest
import torch
from PIL import Image

from fragnb.algos.dqn import EpsilonGreedyActor, QNetwork
from fragnb.algos.ppo import ActorCritic, GaussianActorCritic, PPOActor
from fragnb.envs import CartPole
from fragnb.errors import RenderingError
from fragnb.ui import animate
from fragnb.ui.animate import animate_cartpole, animate_gym, cartpole_episode, greedy

FRAME = re.compile(r'frames\[\d+\] = "data:image/(?:png|jpeg);base64,([^"]*)"')


def frames_in(html: str) -> list[bytes]:
    """The pictures of matplotlib's player, in order."""
    return [base64.b64decode(data) for data in FRAME.findall(html)]


def balancing(obs: torch.Tensor) -> torch.Tensor:
    """Scores that push the cart towards where the pole leans: a hand-made controller that lasts 500 steps."""
    lean = obs[:, 2] + 0.5 * obs[:, 3] + 0.01 * obs[:, 0] + 0.1 * obs[:, 1]
    return torch.stack([-lean, lean], -1)


def always_left(obs: torch.Tensor) -> torch.Tensor:
    return torch.tensor([1.0, 0.0]).expand(len(obs), 2)


def test_a_short_run_shows_the_state_after_reset_and_one_frame_per_step():
    shown = animate_cartpole(balancing, steps=20)
    frames = frames_in(shown.data)
    assert shown.frames == len(frames) == 21
    assert shown.ended is None and shown.episode_return == 20
    assert repr(shown) == "<EpisodeAnimation: 21 frames, return 20>"
    # A viewer that runs no script shows the player's picture: the first frame.
    still = re.search(r'<img id="_anim_img\w+" src="data:image/png;base64,([^"]*)"', shown.data)
    assert still and base64.b64decode(still[1]) == frames[0]
    # Frames in a few colours: a 200-step episode stays a fifth of a megabyte in the notebook.
    pictures = [Image.open(io.BytesIO(f)) for f in frames]
    assert {p.mode for p in pictures} == {"P"} and pictures[0].size == (360, 112)
    assert sum(map(len, FRAME.findall(shown.data))) / len(frames) < 1200  # base64 characters per frame


def test_the_animation_stops_when_the_pole_falls():
    shown = animate_cartpole(always_left, steps=200)
    assert shown.ended == "terminated"
    assert shown.frames == len(frames_in(shown.data)) < 30
    assert shown.episode_return == shown.frames - 1


def test_an_episode_ends_in_its_last_state_and_at_the_time_limit():
    states, rewards, ended = cartpole_episode(always_left, steps=200)
    assert ended == "terminated" and len(states) == len(rewards) + 1
    assert abs(states[-1, 2]) > CartPole.theta_threshold_radians  # the fallen pole, not the next episode's start
    assert (np.abs(states[:-1, 2]) <= CartPole.theta_threshold_radians).all()
    states, rewards, ended = cartpole_episode(balancing, steps=600)
    assert ended == "truncated" and len(states) == 501 and rewards.sum() == 500


def test_the_callers_env_actor_network_and_random_numbers_are_left_as_they_were():
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    env = CartPole(num_envs=4, seed=0)
    env.reset()
    env.step(torch.ones(4, dtype=torch.int64))
    policy = ActorCritic(obs_dim=4, num_actions=2)
    actor = PPOActor(policy, num_envs=4, seed=0)
    actor.act(torch.zeros(4, 4))
    weights = {k: v.clone() for k, v in policy.state_dict().items()}
    env_before = (env.state.clone(), env.vector_steps, env.streams.counters.clone(), len(env.episodes))
    actor_before = actor.streams.counters.clone()
    rng_before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()

    shown = animate_cartpole(actor, steps=10)
    # A policy of the caller's that draws random numbers does not move the caller's generators either.
    cartpole_episode(lambda obs: torch.rand(len(obs), 2) + np.random.rand() + random.random(), steps=5)

    assert shown.frames > 1
    assert torch.equal(torch.get_rng_state(), rng_before[0])
    assert (np.random.get_state()[1] == rng_before[1]).all() and random.getstate() == rng_before[2]
    assert torch.equal(env.state, env_before[0]) and env.vector_steps == env_before[1]
    assert torch.equal(env.streams.counters, env_before[2]) and len(env.episodes) == env_before[3]
    assert torch.equal(actor.streams.counters, actor_before)
    assert all(torch.equal(v, weights[k]) for k, v in policy.state_dict().items()) and policy.training
    assert all(p.grad is None for p in policy.parameters())


def test_the_same_seed_shows_the_same_episode():
    a, b = cartpole_episode(balancing, steps=30, seed=3), cartpole_episode(balancing, steps=30, seed=3)
    assert np.array_equal(a[0], b[0])
    assert not np.array_equal(a[0][0], cartpole_episode(balancing, steps=1, seed=4)[0][0])


def test_greedy_takes_the_best_action_of_each_kind_of_network_and_of_the_actors_holding_them():
    obs = torch.randn(16, 4)
    policy, q = ActorCritic(obs_dim=4, num_actions=2), QNetwork(obs_dim=4, num_actions=2)
    best = policy.logits(obs).argmax(-1)
    assert torch.equal(greedy(policy)(obs), best) and torch.equal(greedy(PPOActor(policy, num_envs=16))(obs), best)
    best = q(obs).argmax(-1)
    assert torch.equal(greedy(q)(obs), best)
    assert torch.equal(greedy(EpsilonGreedyActor(q, num_envs=16, epsilon=1.0))(obs), best)  # no exploration
    assert torch.equal(greedy(balancing)(obs), balancing(obs).argmax(-1))


def test_gif_plays_without_scripts_one_picture_per_frame():
    shown = animate_cartpole(balancing, steps=10, gif=True)
    data = re.fullmatch(r'<img src="data:image/gif;base64,([^"]*)" alt="[^"]*">', shown.data)
    assert data and "<script" not in shown.data
    assert Image.open(io.BytesIO(base64.b64decode(data[1]))).n_frames == shown.frames == 11


def test_a_gym_policy_takes_one_numpy_observation_and_answers_an_action_of_its_space():
    gym = pytest.importorskip("gymnasium")
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    net = GaussianActorCritic(obs_dim=3, action_dim=2)
    with torch.no_grad():
        net.actor_mean[-1].bias.fill_(5.0)  # a mean beyond the bounds
    action = animate._numpy_policy(net, box)(np.zeros(3, np.float32))
    assert action.dtype == np.float32 and action.tolist() == [1.0, 1.0]  # the mean, clipped as GymnasiumEnv clips
    assert animate._numpy_policy(lambda obs: [-3.0, 0.5], box)(np.zeros(3)).tolist() == [-1.0, 0.5]
    policy = ActorCritic(obs_dim=4, num_actions=2)
    obs = np.ones(4, np.float32)
    chosen = animate._numpy_policy(PPOActor(policy, num_envs=1), gym.spaces.Discrete(2))(obs)
    assert type(chosen) is int and chosen == int(policy.logits(torch.ones(1, 4)).argmax())


@pytest.fixture
def mujoco_gl(monkeypatch):
    """MUJOCO_GL as the test found it afterwards, whatever animate_gym sets (it sets the backend it finds)."""
    found = os.environ.get("MUJOCO_GL")
    monkeypatch.setenv("MUJOCO_GL", found or "unset")  # remembers what was there for the undo
    if found is None:
        monkeypatch.delenv("MUJOCO_GL")
    return monkeypatch


def test_halfcheetah_plays_its_own_pictures_where_mujoco_can_draw_here(mujoco_gl):
    pytest.importorskip("mujoco")
    seen = []
    net = GaussianActorCritic(obs_dim=17, action_dim=6)

    def act(obs):
        seen.append(obs)
        return net.mean(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    try:
        shown = animate_gym("HalfCheetah-v5", act, steps=3)
    except RenderingError as err:  # no OpenGL backend here: the error says what to install
        assert "apt-get install libosmesa6" in str(err) or "MUJOCO_GL" in str(err)
        pytest.skip(f"MuJoCo cannot render on this machine: {err}")
    frames = frames_in(shown.data)
    assert shown.frames == len(frames) == 4 and shown.ended is None
    assert Image.open(io.BytesIO(frames[0])).size == (240, 160)  # animate.MUJOCO_SIZE
    assert len(seen) == 3 and all(isinstance(o, np.ndarray) and o.shape == (17,) for o in seen)
    assert os.environ.get("MUJOCO_GL") in ("egl", "osmesa", "glfw")


def test_without_an_opengl_backend_the_error_says_what_to_install(mujoco_gl):
    pytest.importorskip("mujoco")
    mujoco_gl.delenv("MUJOCO_GL", raising=False)
    mujoco_gl.setattr(animate, "_opengl_failure", lambda backend: f"no {backend} here")
    with pytest.raises(RenderingError) as caught:
        animate_gym("HalfCheetah-v5", lambda obs: np.zeros(6), steps=1)
    message = str(caught.value)
    assert "MUJOCO_GL=egl: no egl here" in message and "MUJOCO_GL=osmesa: no osmesa here" in message
    assert "apt-get install libosmesa6" in message and "MUJOCO_GL=osmesa" in message
    assert "MUJOCO_GL" not in os.environ  # nothing was chosen
    assert caught.value._render_traceback_() == [f"RenderingError: {message}"]  # IPython shows no stack


def test_a_backend_that_cannot_draw_is_named_in_the_error(mujoco_gl):
    pytest.importorskip("mujoco")
    import mujoco  # noqa: F401  (MuJoCo checks MUJOCO_GL when first imported; Gymnasium when it draws)

    mujoco_gl.setenv("MUJOCO_GL", "nonsense")
    with pytest.raises(RenderingError, match="HalfCheetah-v5 cannot draw itself with MUJOCO_GL=nonsense"):
        animate_gym("HalfCheetah-v5", lambda obs: np.zeros(6), steps=1)


def test_the_player_loads_nothing_from_the_internet_and_keeps_every_button():
    """matplotlib's player links Font Awesome from a CDN; a course in a lab without internet shows its buttons
    as characters instead, each still labelled for a screen reader."""
    shown = animate_cartpole(balancing, steps=3).data
    assert not re.findall(r"(?:href|src)=\"https?://", shown), re.findall(r"https?://[^\"]*", shown)
    assert "fa fa-" not in shown
    assert shown.count("<button") == 9 and shown.count('aria-hidden="true"') == 9

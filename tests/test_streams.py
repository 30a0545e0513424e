import math

import pytest
import torch

from fragnb.streams import EnvStreams


def test_shard_draws_what_its_environments_draw_in_the_full_batch():
    full = EnvStreams(7, torch.arange(8), "action")
    parts = [full[0:4], full[4:8]]
    for _ in range(3):
        whole = full.uniform(3)
        assert torch.equal(whole, torch.cat([p.uniform(3) for p in parts]))


def test_masked_draws_advance_only_masked_streams():
    masked, plain = EnvStreams(0, torch.arange(4), "reset"), EnvStreams(0, torch.arange(4), "reset")
    mask = torch.tensor([True, False, True, False])
    first = masked.uniform(2, mask)
    assert masked.counters.tolist() == [1, 0, 1, 0]
    expected_first = plain.uniform(2)
    assert torch.equal(first, expected_first[mask])
    # Unmasked streams were not advanced: their next draw is their first.
    assert torch.equal(masked.uniform(2)[~mask], expected_first[~mask])


def test_domains_and_seeds_give_different_numbers():
    ids = torch.arange(16)
    base = EnvStreams(0, ids, "action").uniform(4)
    assert not torch.equal(base, EnvStreams(0, ids, "reset").uniform(4))
    assert not torch.equal(base, EnvStreams(1, ids, "action").uniform(4))


def test_uniform_is_in_unit_interval_and_roughly_uniform():
    u = EnvStreams(3, torch.arange(256), "action").uniform(400)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01
    assert abs(u.std().item() - (1 / 12) ** 0.5) < 0.01


def test_state_dict_round_trip_resumes_the_stream():
    s = EnvStreams(0, torch.arange(4), "action")
    s.uniform(1)
    state = s.state_dict()
    expected = s.uniform(2)
    s.load_state_dict(state)
    assert torch.equal(s.uniform(2), expected)


# -- samplers: exact under any sharding, and distributed as their names say --------------------
SAMPLERS = {
    "normal": lambda s: s.normal((3,)),
    "categorical": lambda s: s.categorical(logits=torch.tensor([[0.0, 1.0, 2.0]]).expand(len(s), 3)),
    "bernoulli": lambda s: s.bernoulli(0.3, (2,)),
    "integers": lambda s: s.integers(2, 7, 4),
    "permutation": lambda s: s.permutation(5),
    "dropout": lambda s: s.dropout(torch.ones(len(s), 6), 0.5),
    "sample(Normal)": lambda s: s.sample(torch.distributions.Normal(torch.zeros(len(s), 2), torch.ones(len(s), 2))),
    "sample(Categorical)": lambda s: s.sample(torch.distributions.Categorical(logits=torch.zeros(len(s), 4))),
    "sample(Independent Normal)": lambda s: s.sample(
        torch.distributions.Independent(torch.distributions.Normal(torch.zeros(len(s), 2), torch.ones(len(s), 2)), 1)
    ),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_samplers_draw_on_a_shard_what_its_environments_draw_in_the_full_batch(name):
    full, half = EnvStreams(3, torch.arange(8), "action"), EnvStreams(3, torch.arange(8), "action")[4:8]
    for _ in range(3):
        assert torch.equal(SAMPLERS[name](full)[4:8], SAMPLERS[name](half))


def test_samplers_have_the_moments_their_names_promise():
    s = EnvStreams(0, torch.arange(20000), "action")
    z = s.normal()
    assert abs(float(z.mean())) < 0.03 and abs(float(z.std()) - 1) < 0.03
    counts = torch.bincount(s.categorical(probs=torch.tensor([[0.2, 0.3, 0.5]]).expand(20000, 3)), minlength=3) / 20000
    assert torch.allclose(counts, torch.tensor([0.2, 0.3, 0.5]), atol=0.02)
    assert abs(float(s.bernoulli(0.3).mean()) - 0.3) < 0.02
    ints = s.integers(2, 7)
    assert int(ints.min()) == 2 and int(ints.max()) == 6
    assert sorted(s.permutation(6)[0].tolist()) == list(range(6))
    assert abs(float(s.dropout(torch.ones(20000, 1), 0.25).mean()) - 1) < 0.02
    assert math.isfinite(float(EnvStreams(0, torch.arange(4), "x").normal(1000).abs().max()))


def test_sample_names_what_it_cannot_draw():
    s = EnvStreams(0, torch.arange(4), "action")
    with pytest.raises(ValueError, match="does not start with this object's 4 streams"):
        s.sample(torch.distributions.Categorical(logits=torch.zeros(3, 2)))
    with pytest.raises(TypeError, match="no per-environment sampler for Beta"):
        s.sample(torch.distributions.Beta(torch.ones(4), torch.ones(4)))

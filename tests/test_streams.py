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

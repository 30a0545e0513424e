"""Invariant 1 over a corpus of student-style loops: every DP leaves the namespace plain Python leaves.

For each loop of ``tests/corpus/loops.py`` and each synchronous policy, the cell runs once as plain
Python and once through ``fragnb.capture`` + ``fragnb.run`` on a fresh namespace built by the same
setup; the two namespaces must hold the same names and values (tensors within 1e-4). A
``FragmentError`` is acceptable only where ``REFUSED`` expects it.
"""

import pytest

import fragnb
from corpus.compare import compare_namespaces
from corpus.loops import LOOPS

POLICIES = ("single", "coarse", "fine")
ACTORS = 2

#: (loop name, policy) -> a substring of the FragmentError message fragnb must raise instead of running.
#: Each is a cell that reads a replicated component's own state (``env.env_steps``, ``env.episodes``)
#: in its loop: on a replica that is one shard's state, so the safety net refuses before running.
REFUSED: dict[tuple[str, str], str] = {
    (loop, policy): f"`{var}`"
    for loop, var in (("component_attribute_reads", "env_steps"), ("per_step_python_values", "episode_lengths"))
    for policy in ("coarse", "fine")
}


def _plain(loop):
    ns = loop.namespace()
    exec(compile(loop.cell, "<cell>", "exec"), ns)
    return ns


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("loop", LOOPS, ids=[loop.name for loop in LOOPS])
def test_loop_leaves_the_plain_namespace(loop, policy):
    plain = _plain(loop)
    ns = loop.namespace()
    params = {} if policy == "single" else {"actors": ACTORS}
    expected = REFUSED.get((loop.name, policy))
    try:
        graph = fragnb.capture(loop.cell, ns, name=loop.name)
        fragnb.run(graph, policy, progress=False, plot=False, **params)
    except fragnb.FragmentError as e:
        if expected is None:
            raise
        assert expected in str(e), f"refused for another reason than expected ({expected!r}): {e}"
        compare_namespaces(loop.namespace(), ns)  # a refusal leaves the namespace untouched
        return
    assert expected is None, f"expected fragnb to refuse with {expected!r}, but it ran"
    compare_namespaces(plain, ns, loop.cell)


def test_the_safety_net_checks_two_iterations_once_and_fewer_only_to_name_where_a_difference_starts(monkeypatch):
    from fragnb.runtime import check as net

    counts = []
    real = net._compare

    def counted(placement, script, draws, exact):
        counts.append(script.limit)
        return real(placement, script, draws, exact)

    monkeypatch.setattr(net, "_compare", counted)
    by_name = {loop.name: loop for loop in LOOPS}
    for name, ran in (("component_attribute_reads", [2, 1]), (LOOPS[0].name, [2])):
        loop = by_name[name]
        placement = fragnb.capture(loop.cell, loop.namespace(), name="loop").place("coarse", actors=ACTORS)
        counts.clear()
        if name in {n for n, _ in REFUSED}:
            with pytest.raises(fragnb.FragmentError, match=r"after 1 iteration\(s\)"):  # it starts in the first
                net.check(placement)
        else:
            net.check(placement)
        assert counts == ran, name

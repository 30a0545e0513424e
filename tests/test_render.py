import pytest

from fragnb import capture
from fragnb.ui.render import DOT_MISSING_HINT, ROLE_COLORS


@pytest.fixture
def graph(canonical, ppo_ns):
    return capture(canonical.body, ppo_ns(), name="ppo")


def test_render_colours_fragments_by_role_and_labels_edges(graph):
    dot = graph.render()
    for frag in graph.fragments:
        assert f'fillcolor="{ROLE_COLORS[frag.role]}"' in next(
            line
            for line in dot.body
            if line.lstrip().startswith(f'"{frag.name}"') or line.lstrip().startswith(f"{frag.name} ")
        )
    assert 'label="for it in range(iterations)"' in dot.source


@pytest.mark.needs_dot
def test_notebook_display_is_svg_when_dot_is_installed(graph):
    bundle = graph._repr_mimebundle_()
    assert "image/svg+xml" in bundle and "<svg" in bundle["image/svg+xml"]


def test_without_dot_the_graph_shows_its_source_and_a_hint(graph, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    bundle = graph._repr_mimebundle_()
    assert list(bundle) == ["text/plain"]
    first, *rest = bundle["text/plain"].splitlines()
    assert first == DOT_MISSING_HINT
    assert "digraph ppo {" in rest[0]

"""``covers`` (the sandbox's "is this path at or below that one") agrees with the path-object
definition it replaced for speed, on arbitrary absolute paths."""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from harness.orchestrate.sandbox.profile import covers

_SEGMENT = st.sampled_from(["a", "b", "ab", ".", "", "a.b"])
_PATH = st.lists(_SEGMENT, min_size=0, max_size=5).map(lambda parts: "/" + "/".join(parts))


def _reference(outer: str, inner: str) -> bool:
    a, b = PurePosixPath(outer), PurePosixPath(inner)
    return a == b or a in b.parents


@given(_PATH, _PATH)
def test_covers_agrees_with_the_path_object_definition(outer: str, inner: str) -> None:
    assert covers(outer, inner) == _reference(outer, inner)


def test_covers_is_by_segment_not_by_prefix() -> None:
    assert covers("/a", "/a/b") and covers("/", "/x") and covers("/a/", "/a")
    assert not covers("/a", "/ab") and not covers("/a/b", "/a")

"""`mcphost.common.excgroups`: the walk over nested exception groups and the three questions asked of it."""

from __future__ import annotations

from mcphost.common.excgroups import find, first_leaf, sole_leaf, walk


def nested() -> BaseExceptionGroup[BaseException]:
    return BaseExceptionGroup(
        "outer",
        [
            ExceptionGroup("inner", [ValueError("first"), KeyError("key")]),
            BaseExceptionGroup("deep", [ExceptionGroup("deeper", [TypeError("typed")]), KeyboardInterrupt()]),
        ],
    )


def test_walk_visits_the_group_then_everything_inside_depth_first_in_order() -> None:
    names = [str(e) if not isinstance(e, BaseExceptionGroup) else e.message for e in walk(nested())]
    assert names == ["outer", "inner", "first", "'key'", "deep", "deeper", "typed", ""]


def test_find_returns_the_first_of_a_kind_at_any_depth_or_none() -> None:
    group = nested()
    typed = find(group, TypeError)
    assert isinstance(typed, TypeError)
    assert str(typed) == "typed"
    assert isinstance(find(group, (KeyError, TypeError)), KeyError)
    assert isinstance(find(group, KeyboardInterrupt), KeyboardInterrupt)
    assert find(group, OSError) is None
    plain = OSError("plain")
    assert find(plain, OSError) is plain


def test_first_leaf_is_the_first_exception_that_is_not_a_group() -> None:
    assert str(first_leaf(nested())) == "first"
    plain = OSError("plain")
    assert first_leaf(plain) is plain


def test_sole_leaf_unwraps_single_exception_groups_only() -> None:
    leaf = ValueError("alone")
    assert sole_leaf(ExceptionGroup("a", [ExceptionGroup("b", [leaf])])) is leaf
    several = ExceptionGroup("two", [ValueError("x"), ValueError("y")])
    assert sole_leaf(ExceptionGroup("a", [several])) is several

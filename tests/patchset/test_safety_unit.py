"""Unit checks of the path-safety primitives (the corpus in test_hostile drives them end to end)."""

from __future__ import annotations

import pytest

from patchkit.patchset import safety


@pytest.mark.parametrize(
    "quoted,plain",
    [
        ('"a/\\056\\056/x"', "a/../x"),
        ('"b/caf\\303\\251.py"', "b/café.py"),
        ('"a/tab\\there"', "a/tab\there"),
        ('"a/q\\"uote"', 'a/q"uote'),
        ("a/plain", "a/plain"),
    ],
)
def test_unquote_c(quoted, plain):
    assert safety.unquote_c(quoted) == plain


@pytest.mark.parametrize(
    "path,problem",
    [
        ("pkg/ok.py", None),
        ("pkg/..hidden/ok", None),
        ("/etc/passwd", "absolute path"),
        ("pkg/../../x", "'..' component leaves the tree"),
        (".git/config", "'.git' component"),
        ("pkg/.Git/x", "'.git' component"),
        ("pkg//x", "empty or '.' component"),
        ("pkg\\..\\x", "NUL or backslash in path"),
    ],
)
def test_path_problem(path, problem):
    assert safety.path_problem(path) == problem


@pytest.mark.parametrize(
    "link,target,bad",
    [
        ("pkg/l", "../README.txt", False),
        ("pkg/l", "../../x", True),
        ("l", "/etc", True),
        ("a/b/l", "../../.git/hooks", True),
    ],
)
def test_link_problem(link, target, bad):
    assert (safety.link_problem(link, target) is not None) == bad


def test_diff_git_names_with_spaces_are_split_correctly():
    assert safety._split_diff_git("a/my file.py b/my file.py") == ["a/my file.py", "b/my file.py"]

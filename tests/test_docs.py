"""README.md and docs/: every relative link points at a file that exists (and an anchor at a heading
of it), and every ``patchkit`` command shown in code exists, with the options shown (its ``--help``).
The README stays a page a newcomer reads: under 250 lines, no issue numbers or owners anywhere."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import cli

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|[\s(;&|/])patchkit((?:\s+[a-z][a-z-]*)+)?((?:\s+(?:--?[A-Za-z][\w-]*|\S+))*)")


def ids(pages: list[Path]) -> list[str]:
    return [str(page.relative_to(REPO)) for page in pages]


def code_of(text: str) -> list[str]:
    """The code a page shows: fenced blocks line by line, then inline spans (outside the blocks)."""
    blocks = FENCE.findall(text)
    lines = [line.split(" #")[0] for block in blocks for line in block.splitlines()]
    return lines + INLINE.findall(FENCE.sub("", text))


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def help_of(path: tuple[str, ...]) -> str | None:
    done = CliRunner().invoke(cli, [*path, "--help"])
    return done.output if done.exit_code == 0 else None


def shown_commands(page: Path) -> list[tuple[tuple[str, ...], list[str], str]]:
    """(command path, options shown after it, the code) for each ``patchkit ...`` in the page's code."""
    found = []
    for code in code_of(page.read_text(encoding="utf-8")):
        for match in COMMAND.finditer(code):
            words = (match.group(1) or "").split()
            if not words:
                continue
            path = tuple(words[:2]) if words[0] in cli.commands and isinstance(cli.commands[words[0]], type(cli)) \
                else tuple(words[:1])
            tail = " ".join(words[len(path):]) + " " + (match.group(2) or "")
            options = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", tail.split(" -- ")[0])
            found.append((path, options, code))
    return found


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_relative_link_exists(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        assert linked.exists(), f"{page.relative_to(REPO)}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            headings = [slug(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)]
            assert anchor in headings, f"{page.relative_to(REPO)}: no heading #{anchor} in {file or page.name}"


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_command_shown_exists_with_its_options(page):
    for path, options, code in shown_commands(page):
        text = help_of(path)
        assert text is not None, f"{page.relative_to(REPO)}: `patchkit {' '.join(path)}` is no command: {code}"
        for option in options:
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), (
                f"{page.relative_to(REPO)}: `patchkit {' '.join(path)}` has no option {option}: {code}")


def test_the_readme_shows_commands_and_fits_on_a_few_screens():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    shown = {path for path, _, _ in shown_commands(REPO / "README.md")}
    assert {("sets",), ("apply",), ("verify",), ("base", "fetch")} <= shown
    assert all((REPO / "docs" / name).is_file() for name in (
        "applying-and-editing.md", "porting.md", "verify.md", "gpu-hosts-and-bundles.md", "smoke-and-bench.md",
        "development.md"))


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_no_issue_numbers_or_owners(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\bissues? \d+|#\d+\b|\bowner", text, re.I), page.relative_to(REPO)


DEFAULT_CLAIM = re.compile(r"\bdefault set\b|\*\*the default\*\*|\bis the default\b", re.I)
SET_NAMED = re.compile(r"ddtree_patches/(v\d+)\b|\b(v\d+) is the default\b")


def sentences(text: str) -> list[str]:
    """Paragraphs and table rows, each split into sentences, whitespace collapsed (lines wrap mid-sentence)."""
    blocks = re.split(r"\n\s*\n|\n(?=\|)", text)
    return [s for block in blocks for s in re.split(r"(?<=[.;])\s+", " ".join(block.split()))]


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_what_a_page_calls_the_default_set_is_the_default(page):
    """A sentence that speaks of the default set names no other set's folder (the default moved from v1 to
    v2 once and a page kept pointing at v1's files): the default is the manifest marked ``default = true``."""
    from patchkit import manifest

    default = {d.name for d in (REPO / "ddtree_patches").glob("v*") if manifest.load(d, with_lock=False).set.default}
    assert len(default) == 1
    for sentence in sentences(page.read_text(encoding="utf-8")):
        if DEFAULT_CLAIM.search(sentence):
            named = {a or b for a, b in SET_NAMED.findall(sentence)}
            assert named <= default, f"{page.relative_to(REPO)}: the default set is {default}, not {named}: {sentence}"

"""The lines a series adds: what the rules on "the code the set adds" read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


def added_lines(root: Path, files: Sequence[str], base: str | None) -> dict[str, frozenset[int]]:
    """Per tree-relative file, the line numbers (1-based, in the working tree) that differ from the
    tree's base (``base``: the context's base commit, the one definition of the base; the tree's root
    commit only when none was found): what the series added or changed. A file the base lacks is
    all added. Rules that judge "the code the set adds" read this, so that the base's own code,
    which the set does not own, never produces a finding."""
    from patchkit.git import Repo  # lazy: only the rules on added code need git

    files = [f for f in files if (root / f).is_file()]
    if not files:
        return {}
    repo = Repo(root)
    base = base or repo.run("rev-list", "--max-parents=0", "HEAD").split()[-1]
    diff = repo.run("diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", base, "--", *files)
    out: dict[str, set[int]] = {}
    current: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current is not None:
            match = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            if match:
                start, count = int(match.group(1)), int(match.group(2) or 1)
                out.setdefault(current, set()).update(range(start, start + count))
    for rel in files:
        if rel not in out and not repo.ok("cat-file", "-e", f"{base}:{rel}"):
            out[rel] = set(range(1, len((root / rel).read_bytes().splitlines()) + 1))
    return {rel: frozenset(lines) for rel, lines in out.items()}

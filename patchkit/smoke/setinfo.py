"""What smoke needs from a patch set: its identity, its ``[smoke]`` profile, and whether a target is
patched by it.

This is a small stand-alone reader so smoke does not depend on the manifest and status modules while
they are written in parallel; :func:`load_smoke_profile` and :func:`target_patched_by` are the two
calls to switch to the core API.

The ``[smoke]`` table of ``manifest.toml`` (every key optional)::

    [smoke]
    prompts = "smoke/prompts.jsonl"   # relative to the set directory
    max_new_tokens = 32
    startup_timeout_s = 900           # per server, until /health answers 200
    request_timeout_s = 300           # per /generate request
    grace_period_s = 20               # SIGTERM -> SIGKILL
    server_args = [...]               # both servers: dtype, attention backend, deterministic settings
    baseline_args = []                # baseline only (no speculation)
    profile_args = [...]              # the speculative server only: --speculative-algorithm DDTREE ...
    draft_model_flag = "--speculative-draft-model-path"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput, location
from patchkit import tomlfile


MANIFEST_NAME = "manifest.toml"
SET_TRAILER = "Patchkit-Set"


@dataclass(frozen=True)
class SmokeProfile:
    """The ``[smoke]`` table of a set, with defaults filled in and paths resolved."""

    set_name: str
    set_version: str
    set_dir: Path
    prompts: Path
    max_new_tokens: int = 32
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 300.0
    grace_period_s: float = 20.0
    server_args: tuple[str, ...] = ()
    baseline_args: tuple[str, ...] = ()
    profile_args: tuple[str, ...] = ()
    draft_model_flag: str = "--speculative-draft-model-path"

    @property
    def set_id(self) -> str:
        """``name@version``, the value of the ``Patchkit-Set`` commit trailer."""
        return f"{self.set_name}@{self.set_version}"


_NUMBER_KEYS = ("max_new_tokens", "startup_timeout_s", "request_timeout_s", "grace_period_s")
_ARGS_KEYS = ("server_args", "baseline_args", "profile_args")


def load_manifest(set_dir: Path) -> dict[str, Any]:
    """Parse ``manifest.toml``; a missing file or a TOML error is bad input naming the file."""
    return tomlfile.load(set_dir / MANIFEST_NAME, f"no {MANIFEST_NAME} in {set_dir}")


def _set_identity(doc: dict[str, Any], path: Path) -> tuple[str, str]:
    """Name and version from ``[set]`` or from the top level of the manifest."""
    table = doc.get("set", doc)
    name, version = table.get("name"), table.get("version")
    if not isinstance(name, str) or version is None:
        raise BadInput("manifest has no set name and version", location=location(path),
                       hint="add name = ... and version = ... under [set]")
    return name, str(version)


def _checked_args(table: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadInput(f"[smoke] {key} must be a list of strings", location=location(path))
    return tuple(value)


def _checked_number(table: dict[str, Any], key: str, path: Path, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise BadInput(f"[smoke] {key} must be a positive number", location=location(path))
    return value


def load_smoke_profile(set_dir: Path) -> SmokeProfile:
    """Read the set's identity and its ``[smoke]`` table."""
    path = set_dir / MANIFEST_NAME
    doc = load_manifest(set_dir)
    name, version = _set_identity(doc, path)
    table = doc.get("smoke", {})
    if not isinstance(table, dict):
        raise BadInput("[smoke] must be a table", location=location(path))
    defaults = SmokeProfile(name, version, set_dir, set_dir / "smoke" / "prompts.jsonl")
    numbers = {key: _checked_number(table, key, path, getattr(defaults, key)) for key in _NUMBER_KEYS}
    numbers["max_new_tokens"] = int(numbers["max_new_tokens"])
    args = {key: _checked_args(table, key, path) for key in _ARGS_KEYS}
    return SmokeProfile(
        set_name=name,
        set_version=version,
        set_dir=set_dir,
        prompts=set_dir / table.get("prompts", "smoke/prompts.jsonl"),
        draft_model_flag=str(table.get("draft_model_flag", defaults.draft_model_flag)),
        **numbers,
        **args,
    )


class PatchStateUnknown(Exception):
    """Whether the target is patched cannot be told (no git, not a repository)."""


def target_patched_by(target: Path, set_id: str) -> bool:
    """Whether HEAD's history holds a commit carrying the trailer ``Patchkit-Set: <set_id>``.

    Raises :class:`PatchStateUnknown` when git or the repository is missing.
    """
    try:
        import git  # gitpython, which needs the git executable
    except ImportError as error:
        raise PatchStateUnknown(f"git is not usable here ({error})") from error
    try:
        commits = list(git.Repo(target).iter_commits("HEAD", max_count=500))
    except (git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError) as error:
        raise PatchStateUnknown(f"{target} is not a git repository") from error
    except (ValueError, git.exc.GitCommandError) as error:
        raise PatchStateUnknown(f"cannot read the history of {target}: {error}") from error
    wanted = f"{SET_TRAILER}: {set_id}"
    return any(line.strip() == wanted for commit in commits for line in str(commit.message).splitlines())

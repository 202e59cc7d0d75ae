"""Human output of the GPU-host tools: ``patchkit bundle`` (``testmodels`` uses the fallback table)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.hostprep.bundle import BundleResult, TrimmedArchiveResult
from patchkit.hostprep.cudatrim import TrimRecord
from patchkit.render import NORMAL, QUIET, err, human, out, say, table


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _wheels(result: BundleResult) -> None:
    profile = f", profile {result.profile}" if result.profile else ""
    shown = table("wheel", "size", "sha256", "slimmed",
                  title=f"bundle for Python {result.python_version} on {', '.join(result.platforms)}{profile}")
    for wheel in result.wheels:
        slim = ""
        if wheel.dropped_members or wheel.trimmed_members:
            slim = (f"{len(wheel.dropped_members)} members dropped, {len(wheel.trimmed_members)} trimmed "
                    f"(was {_megabytes(wheel.original_size or 0)})")
        shown.add_row(f"{wheel.name}=={wheel.version}", _megabytes(wheel.size), wheel.sha256[:16] + "…", slim)
    out().print(shown)


def _trimmed(record: TrimRecord) -> None:
    archs = ", ".join(f"sm_{arch}" for arch in record.archs)
    say(f"{record.member}: kept {record.kept_entries} {archs} images of {len(record.kept_units)} of "
        f"{record.fatbins} translation units ({', '.join(record.kept_units)}); zeroed {record.zeroed_entries} "
        f"images, {_megabytes(record.zeroed_bytes)} (trim record: {record.member}.trim.json)")


def _notes(result: BundleResult) -> None:
    for wheel in result.wheels:
        for record in wheel.trimmed_members:
            _trimmed(record)
        if wheel.unmatched_globs:
            say(f"warning: {wheel.name}: slim globs matched nothing (changed wheel?): "
                f"{', '.join(wheel.unmatched_globs)}")
    if result.skipped_host_packages:
        say(f"already on the host (not bundled): {', '.join(result.skipped_host_packages)}")
    if result.shadowed_host_packages:
        say(f"host versions overruled (bundled, shadow the host's via PYTHONPATH): "
            f"{', '.join(result.shadowed_host_packages)}")
    if result.excluded:
        say(f"excluded: {', '.join(result.excluded)}")


def _source(result: BundleResult) -> None:
    source = result.source_tree
    if source and source.on_host:
        say(f"sglang's source does not travel: the host's patched tree ({source.files} files in python/, "
            f"git tree {source.tree_id}) is install.sh's third argument; {source.reason}")
    elif source:
        say(f"sglang travels as the patched tree's {source.path}/ ({source.files} files), not as a wheel: "
            f"{source.reason}")


@human.register
def _human_bundle(result: BundleResult, verbosity: int = NORMAL) -> None:
    if verbosity > QUIET:
        _wheels(result)
    total = sum(wheel.size for wheel in result.wheels)
    say(f"{len(result.wheels)} wheels, {_megabytes(total)}")
    _notes(result)
    _source(result)
    if result.parts:
        parts = result.parts
        say(f"split into {len(parts.parts)} parts of at most {parts.mib} MiB in {parts.folder} "
            f"({_megabytes(parts.size)} in all, sha256 {parts.sha256[:16]}…): copy each part to the host, the first "
            f"with PARTS and install-parts.sh, then run there: {parts.install_command} (inside that folder); it "
            f"checks every part, joins them and runs install.sh")
        return
    say(f"copy {result.out} to the host, then run there: {result.install_command} "
        f"(inside {result.out.name}/); it prints the export PYTHONPATH line")


@human.register
def _human_trimmed_archive(result: TrimmedArchiveResult, verbosity: int = NORMAL) -> None:
    for record in result.members:
        _trimmed(record)
        say(f"  from {record.wheel} (sha256 {record.wheel_sha256})")
    say(f"{result.archive}: {_megabytes(result.size)}, sha256 {result.sha256}")
    say(f"on the host: {result.unpack_command} (over a SITE holding the rest of profile {result.profile})")


def with_byte_progress(description: str, core: Callable[[Callable[[int, int, str], None], Callable[[str], None]], Any],
                       verbosity: int = NORMAL, bar: bool = True) -> Any:
    """Run ``core(progress, announce)`` under a byte progress bar on stderr (``patchkit testmodels --shape``);
    ``announce`` prints a line there (the size, before anything is written) unless --quiet, also with
    --json (stdout stays one document). The bar only on a terminal and without --json (``bar``)."""
    say_err: Callable[[str], None] = (lambda text: err().print(text, markup=False)) if verbosity > QUIET else (
        lambda text: None)
    if not bar or verbosity <= QUIET or not err().is_terminal:
        return core(lambda done, total, what: None, say_err)
    from rich.markup import escape
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=err(), transient=True) as shown:
        task = shown.add_task(escape(description), total=None)

        def progress(done: int, total: int, what: str) -> None:
            shown.update(task, completed=done, total=total, description=escape(what[-60:]))

        return core(progress, say_err)

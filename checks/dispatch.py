"""dispatch: every branch on the speculative algorithm is declared, with how DDTREE is treated there.

A *site* is an expression that branches on the algorithm: a helper call (``x.is_dflash()`` ...),
a ``SpeculativeAlgorithm.X`` reference, or a comparison with algorithm name strings (``==``, ``!=``,
``in`` / ``not in`` a tuple or list of them, ``is``). One site is the whole enclosing condition (an
``if``/``elif``/``while`` test, a conditional expression's test, an assert, a keyword argument, a
returned or assigned value), so ``a.is_eagle() or a.is_standalone()`` is one site.

A site's identity survives line shifts: tree-relative file, enclosing qualified function
(``Class.method``), the expression with comments and layout removed, and an occurrence index among
identical (file, scope, expression) triples. Lines are only reported.

The set declares each site in ``expectations/dispatch.toml``::

    [[site]]
    file = "python/sglang/srt/speculative/spec_info.py"
    scope = "SpeculativeAlgorithm.create_worker"
    expr = "self.is_ddtree()"
    treatment = "handled"          # handled | rejected | not_applicable
    reason = "DDTREE dispatched before is_dflash() to the DFlash worker in tree mode"

Findings: a site without a declaration (so after a rebase new sites fail until reviewed), a site
declared ``handled`` whose expression mentions neither DDTREE nor a covering helper, and a
declaration whose site no longer exists (stale).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


from patchkit import tomlfile
from patchkit.verify.api import Example, Finding, Severity, VerifyContext
from patchkit.verify.facts import PyIndex, scan, settings_from_manifest

NAME = "dispatch"
DESCRIPTION = "every branch on the speculative algorithm is declared handled, rejected or not applicable"

TREATMENTS = ("handled", "rejected", "not_applicable")
DEFAULT_DECLARATIONS = "expectations/dispatch.toml"
DEFAULT_COVERS = ("DDTREE", "is_ddtree", "is_dflash_family")


@dataclass(frozen=True)
class Site:
    """One dispatch site; ``key`` is its line-independent identity."""

    file: str
    scope: str
    expr: str
    occurrence: int
    line: int | None
    primitives: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, self.scope, self.expr, self.occurrence)


@dataclass(frozen=True)
class Declaration:
    file: str
    scope: str
    expr: str
    occurrence: int
    treatment: str
    reason: str
    line: int  # line of its [[site]] header in the declarations file

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, self.scope, self.expr, self.occurrence)


# ---------------------------------------------------------------------------------------------
# Sites


def collect_sites(ctx: VerifyContext) -> list[Site]:
    """Every dispatch site in the tree under the source root, in file and line order."""
    settings = settings_from_manifest(ctx.manifest)
    hits = scan(ctx.root, settings).dispatch
    index = PyIndex(ctx.root, settings, ctx.cache_dir)
    sites: list[Site] = []
    for rel in hits:
        facts = index.load(rel)
        if facts is None:
            continue  # a file that does not parse is the compile gate's finding
        seen: Counter[tuple[str, str]] = Counter()
        for raw in facts["dispatch"]:
            ident = (raw["scope"], raw["expr"])
            sites.append(Site(rel, raw["scope"], raw["expr"], seen[ident], raw["line"], tuple(raw["primitives"])))
            seen[ident] += 1
    return sites


# ---------------------------------------------------------------------------------------------
# Declarations


def declarations_path(ctx: VerifyContext) -> Path:
    return ctx.set_dir / ctx.gate_config(NAME).get("declarations", DEFAULT_DECLARATIONS)




def _header_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[[site]]"]


def load_declarations(path: Path) -> tuple[list[Declaration], list[str]]:
    """Parsed declarations and the problems found in them (missing keys, unknown treatment)."""
    if not path.is_file():
        return [], []
    text = path.read_text()
    data = tomlfile.parse(text, path, "fix the declarations file")
    headers = _header_lines(text)
    declarations, problems = [], []
    for n, entry in enumerate(data.get("site", [])):
        line = headers[n] if n < len(headers) else 0
        missing = [k for k in ("file", "scope", "expr", "treatment", "reason") if not entry.get(k)]
        if missing:
            problems.append(f"line {line}: declaration lacks {', '.join(missing)}")
            continue
        if entry["treatment"] not in TREATMENTS:
            problems.append(f"line {line}: treatment {entry['treatment']!r} is not one of {', '.join(TREATMENTS)}")
            continue
        declarations.append(
            Declaration(entry["file"], entry["scope"], entry["expr"], int(entry.get("occurrence", 0)),
                        entry["treatment"], entry["reason"], line)
        )
    return declarations, problems


# ---------------------------------------------------------------------------------------------
# The gate


def _covered(site: Site, covers: tuple[str, ...]) -> bool:
    return any(token in site.expr for token in covers)


def _describe(site: Site) -> str:
    return f"{site.scope}: `{site.expr}` (branches on {', '.join(site.primitives)})"


def run(ctx: VerifyContext) -> list[Finding]:
    config = ctx.gate_config(NAME)
    covers = tuple(config.get("covers", DEFAULT_COVERS))
    decl_path = declarations_path(ctx)
    decl_rel = str(decl_path.relative_to(ctx.set_dir)) if decl_path.is_relative_to(ctx.set_dir) else str(decl_path)
    declarations, problems = load_declarations(decl_path)
    findings = [Finding(gate=NAME, severity=Severity.ERROR, file=decl_rel, line=None, message=p,
                        hint="fix the declaration") for p in problems]
    sites = collect_sites(ctx)
    by_key = {d.key: d for d in declarations}
    findings += _duplicate_findings(declarations, decl_rel)
    for site in sites:
        declared = by_key.get(site.key)
        if declared is None:
            findings.append(_undeclared(site, decl_rel))
        elif declared.treatment == "handled" and not _covered(site, covers):
            findings.append(
                Finding(gate=NAME, severity=Severity.ERROR, file=site.file, line=site.line,
                        message=f"site declared handled does not mention DDTREE or a covering helper "
                        f"({', '.join(covers)}): {_describe(site)}",
                        hint="handle DDTREE in this branch, or declare the site rejected/not_applicable with a reason")
            )
    present = {s.key for s in sites}
    for d in declarations:
        if d.key not in present:
            findings.append(
                Finding(gate=NAME, severity=Severity.ERROR, file=decl_rel, line=d.line,
                        message=f"declared dispatch site no longer exists: {d.file} {d.scope}: `{d.expr}`"
                        + (f" (occurrence {d.occurrence})" if d.occurrence else ""),
                        hint="the branch moved or changed: review it and update or remove the declaration")
            )
    return findings


def _undeclared(site: Site, decl_rel: str) -> Finding:
    return Finding(
        gate=NAME, severity=Severity.ERROR, file=site.file, line=site.line,
        message=f"undeclared dispatch site in {_describe(site)}",
        hint=f"review how DDTREE is treated here and declare it in {decl_rel} "
        "(`patchkit dispatch-sites --write` adds skeleton entries)",
    )


def _duplicate_findings(declarations: list[Declaration], decl_rel: str) -> list[Finding]:
    counts = Counter(d.key for d in declarations)
    return [
        Finding(gate=NAME, severity=Severity.ERROR, file=decl_rel, line=d.line,
                message=f"site declared more than once: {d.scope}: `{d.expr}`",
                hint="keep one declaration")
        for d in declarations if counts[d.key] > 1 and d.line != min(x.line for x in declarations if x.key == d.key)
    ]


# ---------------------------------------------------------------------------------------------
# Generating declarations


@dataclass(frozen=True)
class DeclarationUpdate:
    """What :func:`write_declarations` did: entries kept, added as TODO, and dropped as stale."""

    path: Path
    kept: int
    added: int
    dropped: tuple[str, ...]


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_declarations(sites: list[Site], existing: dict[tuple[str, str, str, int], Declaration]) -> str:
    """TOML for ``sites``: existing declarations kept, new ones with an empty treatment to review."""
    out = [
        "# How DDTREE is treated at every site that branches on the speculative algorithm.",
        "# treatment: handled | rejected | not_applicable. Generated entries with an empty treatment",
        "# must be reviewed. Lines in comments are informational; identity is file+scope+expr+occurrence.",
    ]
    current = None
    for site in sites:
        if site.file != current:
            current = site.file
            out += ["", f"# ---- {site.file}"]
        decl = existing.get(site.key)
        out += ["", "[[site]]", f"# line {site.line}", f"file = {_toml_str(site.file)}",
                f"scope = {_toml_str(site.scope)}", f"expr = {_toml_str(site.expr)}"]
        if site.occurrence:
            out.append(f"occurrence = {site.occurrence}")
        out.append(f"treatment = {_toml_str(decl.treatment if decl else '')}")
        out.append(f"reason = {_toml_str(decl.reason if decl else '')}")
    return "\n".join(out) + "\n"


def write_declarations(ctx: VerifyContext, path: Path | None = None) -> DeclarationUpdate:
    """Rewrite the declarations file for the tree's current sites (for ``patchkit dispatch-sites
    --write``): reviewed entries are kept, new sites get empty treatment/reason (so the gate keeps
    failing on them until someone reviews them), stale ones are dropped and listed."""
    path = path or declarations_path(ctx)
    declarations, _ = load_declarations(path)
    existing = {d.key: d for d in declarations}
    sites = collect_sites(ctx)
    present = {s.key for s in sites}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_declarations(sites, existing))
    dropped = tuple(f"{d.file} {d.scope}: {d.expr}" for d in declarations if d.key not in present)
    kept = sum(1 for s in sites if s.key in existing)
    return DeclarationUpdate(path, kept, len(sites) - kept, dropped)


# ---------------------------------------------------------------------------------------------
# Examples

_SPEC = "python/sglang/srt/speculative/spec_info.py"
_SPEC_SRC = '''\
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    DFLASH = auto()
    DDTREE = auto()

    def is_dflash(self):
        return self == SpeculativeAlgorithm.DFLASH

    def is_ddtree(self):
        return self == SpeculativeAlgorithm.DDTREE

    def create_worker(self):
        if self.is_ddtree():
            return "tree"
        if self.is_dflash():
            return "chain"
'''
_DECL = '''\
[[site]]
file = "python/sglang/srt/speculative/spec_info.py"
scope = "SpeculativeAlgorithm.create_worker"
expr = "self.is_ddtree()"
treatment = "handled"
reason = "tree worker"

[[site]]
file = "python/sglang/srt/speculative/spec_info.py"
scope = "SpeculativeAlgorithm.create_worker"
expr = "self.is_dflash()"
treatment = "not_applicable"
reason = "DDTREE returned earlier"
'''

EXAMPLES = (
    Example(name="every site declared", files={_SPEC: _SPEC_SRC, "@set/expectations/dispatch.toml": _DECL},
            passes=True),
    Example(
        name="new site after a rebase is undeclared",
        files={_SPEC: _SPEC_SRC.replace('            return "chain"\n',
                                  '            return "chain"\n        if self == SpeculativeAlgorithm.DFLASH:\n'
                                  '            return 1\n'),
         "@set/expectations/dispatch.toml": _DECL},
        passes=False,
        expect="undeclared dispatch site",
    ),
    Example(
        name="handled site lost its DDTREE branch",
        files={_SPEC: _SPEC_SRC.replace("if self.is_ddtree():", "if self.is_dflash() and False:"),
         "@set/expectations/dispatch.toml": _DECL.replace('expr = "self.is_ddtree()"',
                                                      'expr = "self.is_dflash()and False"')},
        passes=False,
        expect="does not mention DDTREE",
    ),
    Example(
        name="declared site no longer exists",
        files={_SPEC: _SPEC_SRC.replace('        if self.is_ddtree():\n            return "tree"\n', ""),
         "@set/expectations/dispatch.toml": _DECL},
        passes=False,
        expect="no longer exists",
    ),
)

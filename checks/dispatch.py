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

A collection of algorithm names or of members of ``[verify.dispatch] member_enums`` (the reserved
plugin names, ``is_verify_input``'s set of input types) is a site as a whole; set members are sorted
in its identity, so reordering a set changes nothing.

The helpers' own definitions are not sites: ``[verify.dispatch] families`` declares which enum
members each helper must be true for, e.g. ``is_dflash_family = ["DFLASH", "DDTREE"]``, and every
definition is evaluated per member (``return self in (...)``, ``self == X``, calls of other helpers,
``and``/``or``/``not``; a plugin class's helper written in terms of other helpers is evaluated with
the enum's definitions of those). A helper that stops covering DDTREE fails at its return line,
before any of the sites that rely on it; a return written over several lines fails at the operand
that decides the wrong member (the disjunct of an ``or`` true for a member the helper must not cover,
the conjunct of an ``and`` false for one it must), where that operand is one of them.

Findings: a site without a declaration (so after a rebase new sites fail until reviewed), reported at
the line that differs from the declaration it replaces when the site changed; a site declared
``handled`` whose expression mentions neither DDTREE nor a covering helper; a declaration whose site
no longer exists (stale: not judged while the declared file does not compile, the compile gate's
finding); a member listed twice in a membership collection; a family helper whose
definition is true for other members than declared; a DDTREE site in a touched file whose ``if`` or
conditional expression has the same code in both branches (a copied branch: the test decides nothing),
at the branch the test selects.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import tomlfile
from patchkit.checks._uncompiled import Uncompiled, skipped, uncompiled
from patchkit.index import PyIndex, canonical_expression, scan, settings_from_manifest
from patchkit.manifest import Manifest
from patchkit.verify.api import Example, Finding, Severity, VerifyContext

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
    code: str = ""  # the site's source as written (for locating the line that changed)
    duplicates: tuple[tuple[str, int], ...] = ()  # members a membership collection lists twice

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


def _dispatch_facts(ctx: VerifyContext) -> list[dict[str, Any]]:
    """Facts of every file under the source root that holds a dispatch primitive."""
    settings = settings_from_manifest(ctx.manifest)
    index = PyIndex(ctx.root, settings, ctx.cache_dir)
    loaded = (index.load(rel) for rel in scan(ctx.root, settings, ctx.cache_dir).dispatch)
    return [facts for facts in loaded if facts is not None]  # one that does not parse is compile's finding


def scan_context(root: Path, set_dir: Path, manifest: Manifest, base_commit: str) -> VerifyContext:
    """The context :func:`collect_sites` scans a whole tree with (``patchkit port`` scans both bases):
    built here, by the gate, so that the engine that asks never imports the gate API itself."""
    return VerifyContext.for_tree(root, set_dir, manifest, base_commit)


def collect_sites(ctx: VerifyContext, all_facts: list[dict[str, Any]] | None = None) -> list[Site]:
    """Every dispatch site in the tree under the source root, in file and line order."""
    sites: list[Site] = []
    for facts in all_facts if all_facts is not None else _dispatch_facts(ctx):
        seen: Counter[tuple[str, str]] = Counter()
        for raw in facts["dispatch"]:
            ident = (raw["scope"], raw["expr"])
            sites.append(Site(facts["path"], raw["scope"], raw["expr"], seen[ident], raw["line"],
                              tuple(raw["primitives"]), raw.get("code", ""),
                              tuple((code, line) for code, line in raw.get("duplicates", ()))))
            seen[ident] += 1
    return sites


# ---------------------------------------------------------------------------------------------
# Declarations


def declarations_path(ctx: VerifyContext) -> Path:
    return ctx.set_dir / str(ctx.gate_config(NAME).get("declarations", DEFAULT_DECLARATIONS))




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
        # Canonical like the sites' own identity, so declarations written before set members were
        # sorted (or reordered by hand) still match.
        declarations.append(
            Declaration(entry["file"], entry["scope"], canonical_expression(entry["expr"]),
                        int(entry.get("occurrence", 0)), entry["treatment"], entry["reason"], line)
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
    all_facts = _dispatch_facts(ctx)
    sites = collect_sites(ctx, all_facts)
    matched = _matched(sites, declarations)
    taken = {id(d) for d in matched if d is not None}
    stale = [d for d in declarations if id(d) not in taken]
    replaced: set[tuple[str, str, str, int]] = set()
    findings += _duplicate_findings(declarations, decl_rel)
    findings += family_findings(ctx, all_facts)
    findings += _copied_branches(ctx, sites, covers)
    for site, declared in zip(sites, matched, strict=True):
        before = _replaced_declaration(site, stale) if declared is None else None
        findings += _listed_twice(site, before)
        if declared is None:
            if before is not None:
                replaced.add(before.key)
            findings.append(_undeclared(site, decl_rel, before))
        elif declared.treatment == "handled" and not _covered(site, covers):
            findings.append(
                Finding(gate=NAME, severity=Severity.ERROR, file=site.file, line=site.line,
                        message=f"site declared handled does not mention DDTREE or a covering helper "
                        f"({', '.join(covers)}): {_describe(site)}",
                        hint="handle DDTREE in this branch, or declare the site rejected/not_applicable with a reason")
            )
    broken = uncompiled(ctx)  # a declaration of a file that does not compile is judged once it does
    unjudged: dict[Uncompiled, list[str]] = {}
    for d in stale:
        if d.key in replaced:
            continue
        if d.file in broken:
            unjudged.setdefault(broken[d.file], []).append(f"the declared site {d.scope}: `{d.expr}`")
        else:
            findings.append(
                Finding(gate=NAME, severity=Severity.ERROR, file=decl_rel, line=d.line,
                        message=f"declared dispatch site no longer exists: {d.file} {d.scope}: `{d.expr}`"
                        + (f" (occurrence {d.occurrence})" if d.occurrence else ""),
                        hint="the branch moved or changed: review it and update or remove the declaration")
            )
    return findings + [skipped(NAME, problem, sites) for problem, sites in unjudged.items()]


def _copied_branches(ctx: VerifyContext, sites: list[Site], covers: tuple[str, ...]) -> list[Finding]:
    """A DDTREE site (one mentioning a covering helper) in a touched file that tests an ``if`` or a
    conditional expression whose two branches are the same code: the test decides nothing, DDTREE takes
    the other algorithms' path (a branch copied from the other one). Reported at the branch the test
    selects, the one written for DDTREE. Read from the source (the facts keep no branch bodies)."""
    wanted: dict[str, dict[int, Site]] = {}
    for site in sites:
        if site.file in ctx.touched and site.line is not None and _covered(site, covers):
            wanted.setdefault(site.file, {})[site.line] = site
    findings = []
    for rel, by_line in sorted(wanted.items()):
        try:
            tree = ast.parse((ctx.root / rel).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue  # the compile gate's finding
        for node in ast.walk(tree):
            if not isinstance(node, (ast.If, ast.IfExp)) or node.test.lineno not in by_line:
                continue
            body = node.body if isinstance(node, ast.IfExp) else node.body[0]
            same = (ast.dump(node.body) == ast.dump(node.orelse) if isinstance(node, ast.IfExp)
                    else bool(node.orelse) and [ast.dump(n) for n in node.body] == [ast.dump(n) for n in node.orelse])
            if same:
                site = by_line[node.test.lineno]
                findings.append(Finding(
                    gate=NAME, severity=Severity.ERROR, file=rel, line=body.lineno,
                    message=f"both branches of the dispatch site {_describe(site)} are the same code: DDTREE "
                    "takes the path of the other algorithms",
                    hint="one branch was probably copied from the other: restore what DDTREE needs here"))
    return findings


def _matched(sites: list[Site], declarations: list[Declaration]) -> list[Declaration | None]:
    """Each site's declaration, by identity (file, scope, expression, occurrence). Where a scope has
    both a site no declaration names and a declaration no site matches, an edit changed a site there,
    and the occurrence numbers of the sites with its new expression may have shifted (an edit that
    turns `is_ddtree()` into the `is_dflash()` of the next branch makes that one occurrence 1): the
    scope's sites are then matched to its declarations in order (file order of each), so the edited
    site is the one left undeclared, not its unchanged twin."""
    by_key = {d.key: d for d in declarations}
    out: list[Declaration | None] = [by_key.get(s.key) for s in sites]
    taken = {id(d) for d in out if d is not None}
    unmatched_scopes = {(s.file, s.scope) for s, d in zip(sites, out, strict=True) if d is None}
    stale_scopes = {(d.file, d.scope) for d in declarations if id(d) not in taken}
    for scope in unmatched_scopes & stale_scopes:
        mine = sorted((n for n, s in enumerate(sites) if (s.file, s.scope) == scope),
                      key=lambda n: sites[n].line or 0)
        declared = [d for d in declarations if (d.file, d.scope) == scope]
        for n in mine:
            out[n] = None
        for i, j in _aligned([d.expr for d in declared], [sites[n].expr for n in mine]):
            out[mine[j]] = declared[i]
    return out


def _aligned(before: list[str], after: list[str]) -> list[tuple[int, int]]:
    """The longest common subsequence of two lists of expressions as index pairs, of those the one
    that keeps each match closest to its old position (two equal sites: the one in place is the old one)."""
    n, m = len(before), len(after)
    best = [[(0, 0)] * (m + 1) for _ in range(n + 1)]  # (matches, -displacement) for before[i:], after[j:]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            here = max(best[i + 1][j], best[i][j + 1])
            if before[i] == after[j]:
                matches, cost = best[i + 1][j + 1]
                here = max(here, (matches + 1, cost - abs(i - j)))
            best[i][j] = here
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if before[i] == after[j] and best[i][j] == (best[i + 1][j + 1][0] + 1, best[i + 1][j + 1][1] - abs(i - j)):
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


def _undeclared(site: Site, decl_rel: str, before: Declaration | None = None) -> Finding:
    hint = (f"review how DDTREE is treated here and declare it in {decl_rel} "
            "(`patchkit dispatch-sites` adds skeleton entries)")
    if before is None:
        return Finding(gate=NAME, severity=Severity.ERROR, file=site.file, line=site.line,
                       message=f"undeclared dispatch site in {_describe(site)}",
                       hint=hint)
    return Finding(
        gate=NAME, severity=Severity.ERROR, file=site.file, line=changed_line(site, before.expr),
        message=f"undeclared dispatch site in {_describe(site)}: it replaces the declared `{before.expr}` "
        f"({before.treatment}: {before.reason})", hint=hint)


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", text)).rstrip(",")


def _replaced_declaration(site: Site, stale: list[Declaration]) -> Declaration | None:
    """The stale declaration of the same file and scope this site most resembles (the site as it
    was before an edit), if any."""
    candidates = [d for d in stale if (d.file, d.scope) == (site.file, site.scope)]
    if not candidates:
        return None
    return max(candidates, key=lambda d: difflib.SequenceMatcher(None, d.expr, site.expr).ratio())


def changed_line(site: Site, before: str) -> int | None:
    """The first line of the site's source that the declared expression does not contain: the
    edited line of a multi-line condition or collection (else the site's first line)."""
    old = _compact(before)
    for offset, line in enumerate(site.code.splitlines()):
        text = _compact(line)
        if text and text not in old:
            return (site.line or 1) + offset
    return site.line


def _listed_twice(site: Site, before: Declaration | None) -> list[Finding]:
    """A member listed twice, at the copy: the line the edit changed when the site replaces a
    declaration and that line holds the member, else the second occurrence."""
    edited = changed_line(site, before.expr) if before is not None else None
    lines = site.code.splitlines()
    out = []
    for code, line in site.duplicates:
        offset = (edited or 0) - (site.line or 0)
        if edited is not None and 0 <= offset < len(lines) and _compact(code) in _compact(lines[offset]):
            line = edited
        out.append(Finding(gate=NAME, severity=Severity.ERROR, file=site.file, line=line,
                           message=f"`{code}` is listed twice in the dispatch site {site.scope}: `{site.expr}`",
                           hint="a member is probably missing where the copy is: list each member once"))
    return out


# ---------------------------------------------------------------------------------------------
# Family helpers: each definition is true for exactly the declared members


def _evaluate(expr: list[Any], member: str, predicates: dict[str, dict[str, Any]], depth: int = 0) -> bool | None:
    """``expr`` (facts' predicate tree) for one enum member; None when it cannot be known statically.
    Helper calls are evaluated with the enum's own definitions."""
    kind = expr[0]
    if kind == "const":
        return bool(expr[1])
    if kind == "in":
        return member in expr[1]
    if kind == "not":
        inner = _evaluate(expr[1], member, predicates, depth)
        return None if inner is None else not inner
    if kind in ("or", "and"):
        values = [_evaluate(e, member, predicates, depth) for e in expr[1:]]
        decided: bool = kind == "or"
        if decided in values:
            return decided
        return None if None in values else not decided
    if kind == "call" and depth < 12 and expr[1] in predicates:
        return _evaluate(predicates[expr[1]]["expr"], member, predicates, depth + 1)
    return None


def _enum_definition(all_facts: list[dict[str, Any]], enum: str) -> tuple[dict[str, Any], str, list[str]] | None:
    """(facts, class qualname, members) of the algorithm enum, if an indexed file defines it."""
    for facts in all_facts:
        for qual, cls in facts["classes"].items():
            if cls["name"] == enum and any(p["class"] == qual for p in facts["predicates"].values()):
                return facts, qual, [a for a in cls["attrs"] if a.isupper()]
    return None


def family_findings(ctx: VerifyContext, all_facts: list[dict[str, Any]]) -> list[Finding]:
    """Every definition of a helper in ``[verify.dispatch] families`` is true for exactly the
    declared members of the enum."""
    families: dict[str, list[str]] = ctx.gate_config(NAME).get("families", {})
    if not families:
        return []
    enum = settings_from_manifest(ctx.manifest).enum_name
    found = _enum_definition(all_facts, enum)
    if found is None:
        return [Finding(gate=NAME, severity=Severity.ERROR, file="manifest.toml", line=None,
                        message=f"[verify.dispatch] families is set, but no indexed file defines the enum {enum} "
                        "with helpers",
                        hint="check [verify.dispatch] enum")]
    enum_facts, enum_qual, members = found
    predicates = {p["name"]: p for p in enum_facts["predicates"].values() if p["class"] == enum_qual}
    findings = []
    for helper, declared in families.items():
        unknown = sorted(set(declared) - set(members))
        if unknown:
            findings.append(Finding(gate=NAME, severity=Severity.ERROR, file="manifest.toml", line=None,
                                    message=f"[verify.dispatch] families: {helper} lists {', '.join(unknown)}, "
                                    f"which {enum} does not define", hint=f"members of {enum}: {', '.join(members)}"))
        if helper not in predicates:
            findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=enum_facts["path"], line=None,
                                    message=f"{enum} does not define the family helper {helper}()",
                                    hint="define it, or remove it from [verify.dispatch] families"))
    for facts in all_facts:
        for definition in facts["predicates"].values():
            wanted = families.get(definition["name"])
            if wanted is None or (definition["expr"][0] == "const" and definition["class"] != enum_qual):
                continue  # not a family helper, or a plugin stub's fixed answer
            truth = {m: _evaluate(definition["expr"], m, predicates) for m in members}
            owner = definition["class"] or "<module>"
            if None in truth.values():
                findings.append(Finding(gate=NAME, severity=Severity.WARNING, file=facts["path"],
                                        line=definition["line"],
                                        message=f"{owner}.{definition['name']}() cannot be evaluated statically "
                                        "per member: "
                                        f"`{definition['expr'][-1]}`",
                                        hint="write it as `self in (...)`, `self == X` or in terms of other helpers"))
                continue
            true_for = [m for m in members if truth[m]]
            if set(true_for) != set(wanted):
                missing, extra = sorted(set(wanted) - set(true_for)), sorted(set(true_for) - set(wanted))
                what = "; ".join(filter(None, [f"misses {', '.join(missing)}" if missing else "",
                                                f"also covers {', '.join(extra)}" if extra else ""]))
                line = _deciding_line(ctx.root / facts["path"], definition, {m: m in wanted for m in missing + extra},
                                      predicates)
                findings.append(Finding(
                    gate=NAME, severity=Severity.ERROR, file=facts["path"], line=line,
                    message=f"family helper {owner}.{definition['name']}() is true for "
                    f"{', '.join(true_for) or 'no member'}, "
                    f"but [verify.dispatch] families declares {', '.join(wanted)} ({what})",
                    hint="every site relying on this helper inherits the difference: fix the definition "
                    "(or the declaration, if the family really changed)"))
    return findings


def _deciding_line(path: Path, definition: dict[str, Any], wrong: dict[str, bool],
                   predicates: dict[str, dict[str, Any]]) -> int:
    """Where a family helper's definition goes wrong: the line of the operand that decides each wrong
    member (``wrong``: member -> the value the helper must have), the most blamed one; else the
    return line. Read from the source only for a helper that is wrong, so the facts stay as they are."""
    returns = _return_of(path, definition)
    if returns is None:
        return int(definition["line"])
    lines = [line for member, want in wrong.items()
             if (line := _decided_at(returns, definition["expr"], member, want, predicates)) is not None]
    if not lines:
        return int(definition["line"])
    counts = Counter(lines)
    return min(counts, key=lambda line: (-counts[line], line))


def _return_of(path: Path, definition: dict[str, Any]) -> ast.expr | None:
    """The returned expression of the helper ``definition`` names (its one return, at its line)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == definition["name"]:
            for stmt in node.body:
                if isinstance(stmt, ast.Return) and stmt.value is not None and stmt.lineno == definition["line"]:
                    return stmt.value
    return None


def _decided_at(node: ast.expr, expr: list[Any], member: str, want: bool,
                predicates: dict[str, dict[str, Any]]) -> int | None:
    """The line of the innermost operand of ``node`` (``expr`` is its predicate tree) that makes it
    differ from ``want`` for ``member``: an ``or``'s true operand where it must be false, an ``and``'s
    false operand where it must be true, through ``not``. None when no one operand decides it."""
    kind = expr[0]
    if kind in ("or", "and") and isinstance(node, ast.BoolOp) and len(node.values) == len(expr) - 1:
        decided = kind == "or"
        if want == decided:
            return None  # an or that must be true (an and that must be false): a missing operand, not a wrong one
        for value, operand in zip(node.values, expr[1:], strict=True):
            if _evaluate(operand, member, predicates) == decided:
                return _decided_at(value, operand, member, want, predicates) or value.lineno
        return None
    if kind == "not" and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _decided_at(node.operand, expr[1], member, not want, predicates)
    return None


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

# a conditional expression on is_ddtree(): a copied branch makes its test decide nothing
_VALIDATE = '''
    def validate(self, req):
        error = (
            validate_tree(req)
            if self.is_ddtree()
            else validate_chain(req)
        )
        return error
'''
_VALIDATE_DECL = '''
[[site]]
file = "python/sglang/srt/speculative/spec_info.py"
scope = "SpeculativeAlgorithm.validate"
expr = "self.is_ddtree()"
treatment = "handled"
reason = "the tree's own request validator"
'''

# a helper whose return spans lines: a wrong member is reported at the operand that admits it
_CHAIN_HELPER = '''
    def is_chain_verified(self):
        return (
            self.is_dflash()
            and not self.is_ddtree()
        )
'''
_CHAIN_FAMILY = {"families": {"is_chain_verified": ["DFLASH"]}}

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
    Example(
        name="a handled site copies the next branch's test",
        files={_SPEC: _SPEC_SRC.replace("if self.is_ddtree():", "if self.is_dflash():"),
               "@set/expectations/dispatch.toml": _DECL},
        passes=False,
        expect="undeclared dispatch site in SpeculativeAlgorithm.create_worker: `self.is_dflash()` "
               "(branches on is_dflash()): it replaces the declared `self.is_ddtree()`",
    ),
    Example(name="the tree branch copies the chain branch",
            files={_SPEC: _SPEC_SRC + _VALIDATE.replace("validate_tree(req)\n", "validate_chain(req)\n"),
                   "@set/expectations/dispatch.toml": _DECL + _VALIDATE_DECL},
            passes=False, expect="are the same code: DDTREE takes the path of the other algorithms"),
    Example(name="the tree branch validates the tree",
            files={_SPEC: _SPEC_SRC + _VALIDATE, "@set/expectations/dispatch.toml": _DECL + _VALIDATE_DECL},
            passes=True),
    Example(name="a family helper over several lines covers what it declares",
            files={_SPEC: _SPEC_SRC + _CHAIN_HELPER, "@set/expectations/dispatch.toml": _DECL},
            passes=True, config=_CHAIN_FAMILY),
    Example(name="a family helper's disjunct admits DDTREE",
            files={_SPEC: _SPEC_SRC + _CHAIN_HELPER.replace("and not self.is_ddtree()", "or self.is_ddtree()"),
                   "@set/expectations/dispatch.toml": _DECL},
            passes=False,
            expect="is_chain_verified() is true for DDTREE, DFLASH, but [verify.dispatch] families declares DFLASH "
                   "(also covers DDTREE)",
            config=_CHAIN_FAMILY),
)

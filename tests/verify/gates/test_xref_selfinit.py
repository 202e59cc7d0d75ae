"""xref's lazily-set-attribute rule (checks/_xref/selfinit.py, issue 37): a ``self`` attribute that only
the reading method assigns, after its first read, and that construction never sets."""

from __future__ import annotations

from patchkit.checks import xref
from patchkit.verify.api import Severity

PKG = {"python/pkg/__init__.py": ""}
WORKER = "python/pkg/worker.py"
LAZY = '''\
class Worker:
    def __init__(self, rows):
        self.rows = rows

    def row_bytes(self):
        if self._widest is None:
            self._widest = max(self.rows)
        return self._widest + self._widest
'''


def findings(make_ctx, source: str, manifest: dict | None = None, **files: str) -> list[str]:
    ctx = make_ctx({**PKG, WORKER: source, **files}, manifest)
    return [f"{f.line}: {f.message}" for f in xref.run(ctx) if f.severity in (Severity.ERROR, Severity.WARNING)]


def test_a_lazily_set_attribute_init_never_sets_is_one_error_at_its_first_read(make_ctx):
    assert findings(make_ctx, LAZY) == [
        "6: `self._widest` is read here, but no method of Worker assigns it before this read and __init__ never "
        "sets it: only row_bytes() assigns it, at line 7, after this read, so the first call on a new instance "
        "raises AttributeError"]
    ctx = make_ctx({**PKG, WORKER: LAZY})
    (finding,) = [f for f in xref.run(ctx) if f.severity == Severity.ERROR]
    assert finding.file == WORKER and finding.hint == "initialise it in Worker.__init__ (e.g. `self._widest = None`)"


def test_an_assignment_on_every_path_before_the_read_is_fine(make_ctx):
    test = "        if self._widest is None:\n"
    first = LAZY.replace(test, "        self._widest = None\n" + test)
    assert findings(make_ctx, first) == []
    in_with = LAZY.replace(test, "        with open(__file__):\n            self._widest = None\n" + test)
    assert findings(make_ctx, in_with) == [], "a with body has run by the end of the with"
    in_branch = LAZY.replace("        if self._widest is None:\n            self._widest = max(self.rows)\n",
                             "        if self.rows:\n            self._widest = max(self.rows)\n")
    (branch,) = findings(make_ctx, in_branch)
    assert branch.startswith("8: `self._widest` is read here")
    assert "only row_bytes() assigns it, on another path than this read's" in branch, "set on one branch only"


def test_guarded_reads_are_fine(make_ctx):
    has = LAZY.replace("if self._widest is None:", 'if not hasattr(self, "_widest"):')
    assert findings(make_ctx, has) == []
    caught = LAZY.replace("        if self._widest is None:\n            self._widest = max(self.rows)\n",
                          "        try:\n            return self._widest\n        except AttributeError:\n"
                          "            self._widest = max(self.rows)\n")
    assert findings(make_ctx, caught) == []


def test_what_construction_sets_is_fine(make_ctx):
    in_init = LAZY.replace("        self.rows = rows\n", "        self.rows = rows\n        self._widest = None\n")
    assert findings(make_ctx, in_init) == []
    called = LAZY.replace("        self.rows = rows\n", "        self.rows = rows\n        self._reset()\n\n"
                          "    def _reset(self):\n        self._widest = None\n")
    assert findings(make_ctx, called) == [], "a method __init__ calls sets it"
    based = "class Base:\n    def __init__(self):\n        self._widest = None\n\n\n" + LAZY.replace(
        "class Worker:", "class Worker(Base):")
    assert findings(make_ctx, based) == []
    declared = LAZY.replace("class Worker:\n", "class Worker:\n    _widest = None\n\n")
    assert findings(make_ctx, declared) == []


def test_a_reader_that_never_assigns_is_not_judged(make_ctx):
    """A set-up method another object calls first (FlashAttentionBackend.init_cuda_graph_state before a
    replay): the life cycle is not visible here, so neither method is reported."""
    setup = '''\
class Backend:
    def __init__(self):
        self.device = "cpu"

    def init_graph_state(self, max_bs):
        self.graph_metadata = {bs: bs for bs in range(max_bs)}

    def replay(self, bs):
        return self.graph_metadata[bs]
'''
    assert findings(make_ctx, setup) == []


def test_classes_whose_attributes_are_not_knowable_are_not_judged(make_ctx):
    external = "import torch\n\n\n" + LAZY.replace("class Worker:", "class Worker(torch.nn.Module):")
    assert findings(make_ctx, external) == []
    dynamic = LAZY.replace(
        "        self.rows = rows\n", "        self.rows = rows\n        setattr(self, rows[0], 1)\n")
    assert findings(make_ctx, dynamic) == []
    forwarding = LAZY.replace("    def row_bytes",
                              "    def __getattr__(self, name):\n        return 0\n\n    def row_bytes")
    assert findings(make_ctx, forwarding) == [], "__getattr__ without a declared source may answer anything"


DYNAMIC = '''\
class Target:
    def __init__(self):
        self.pool = 1


class Base:
    def __init__(self, target):
        self.target = target

    def __getattr__(self, name):
        return getattr(self.target, name)


class Worker(Base):
    def row_bytes(self):
        if self._widest is None:
            self._widest = 4
        return self._widest + self.pool
'''


def test_an_inherited_getattr_forwards_where_its_owner_is_declared_to(make_ctx):
    declared = {"verify": {"xref": {"dynamic": {"pkg.worker.Base": "pkg.worker.Target"}}}}
    (only,) = findings(make_ctx, DYNAMIC, declared)
    assert only.startswith("16: `self._widest` is read here") and only.endswith(
        "(Base.__getattr__ forwards it to Target, which has no _widest either)")
    assert findings(make_ctx, DYNAMIC.replace("self.pool = 1", "self.pool = self._widest = 1"), declared) == []
    assert findings(make_ctx, DYNAMIC) == [], "undeclared: not judged"
    # the name rule follows the inherited __getattr__ too: a name neither Worker nor Target has
    typo = DYNAMIC.replace("self.pool\n", "self.poool\n")
    assert (
        "18: self.poool is read in Worker, but neither Worker nor its bases define poool (nor its declared dynamic "
        "source Target)") in findings(make_ctx, typo, declared)


def test_only_the_lines_the_set_adds_are_judged(make_ctx):
    user = "from pkg.worker import Worker\n\nWorker([1]).row_bytes()\n"
    files = {f"@base/{WORKER}": LAZY, "python/pkg/user.py": user}
    ctx = make_ctx({**PKG, **files})
    assert [f for f in xref.run(ctx) if f.severity == Severity.ERROR] == []

"""A small real set whose tree every gate reads, shaped like the v2 set where it matters for the
cache and for findings (issue 37): ``server_args.py`` resolves DDTREE through an added hook module
it imports lazily (SGLang 0.5.17's ``arg_groups/speculative_hook.py``), the hook keeps a tuple of
tree-mask backends, the set carries backend cases, a declared call, a dispatch declaration and
tests. Everything runs with the running interpreter, so a full ``verify`` takes seconds.

:func:`hook_set` makes it the way a user does (``base fetch``, a commit, ``refresh``, ``base fetch``
and ``apply`` into a fresh target); :data:`VARIANTS` are edits of its two tree files (break, benign)
that the cache-soundness test drives through verify with and without the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchkit.testing.verify import applied_example

SERVER_ARGS = "python/pkg/server_args.py"
HOOK = "python/pkg/speculative_hook.py"

BASE_SERVER_ARGS = '''\
from dataclasses import dataclass


def is_hopper_with_cuda_12_3():
    return False


def is_flashinfer_available():
    return False


@dataclass
class ServerArgs:
    model_path: str = ""
    speculative_draft_model_path: str = None
    device: str = "cuda"
    skip_tokenizer_init: bool = False
    speculative_algorithm: str = None
    speculative_eagle_topk: int = None
    attention_backend: str = None
    page_size: int = None

    def use_mla_backend(self):
        return False

    def get_model_config(self):
        return None

    def _get_default_attn_backend(self, use_mla, model_config):
        if is_hopper_with_cuda_12_3():
            return "fa3"
        return "flashinfer" if is_flashinfer_available() else "triton"

    def __post_init__(self):
        if self.page_size is None:
            self.page_size = 1
        if self.attention_backend is None:
            self.attention_backend = self._get_default_attn_backend(False, None)

    def get_attention_backends(self):
        return self.attention_backend, self.attention_backend
'''
# the set's change: DDTREE resolves through the hook, imported when a DDTREE server is configured
PATCHED_SERVER_ARGS = BASE_SERVER_ARGS.replace(
    "            self.attention_backend = self._get_default_attn_backend(False, None)\n",
    "            self.attention_backend = self._get_default_attn_backend(False, None)\n"
    '        if self.speculative_algorithm == "DDTREE":\n'
    "            from pkg.speculative_hook import apply_ddtree_defaults\n\n"
    "            apply_ddtree_defaults(self)\n")

HOOK_SOURCE = '''\
"""DDTREE's server-argument hook: the backends whose target verify applies the tree mask."""

DDTREE_TREE_MASK_BACKENDS = ("triton", "flashinfer")
DDTREE_DEFAULT_TOPK = 1


def apply_ddtree_defaults(args):
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = DDTREE_DEFAULT_TOPK
    if args.attention_backend not in DDTREE_TREE_MASK_BACKENDS:
        args.attention_backend = "triton"


def ddtree_tree_width(budget):
    width = budget + 1
    return width
'''

BACKEND_TOML = '''\
module = "pkg.server_args"
probes = ["is_hopper_with_cuda_12_3"]

[cli]
enabled = false

[tree_mask]
triton = "yes"
flashinfer = "yes"
fa3 = "topk>1"

[hardware.hopper]
probes_on = ["is_hopper_with_cuda_12_3"]

[hardware.ampere]
probes_on = []

[models.tiny]
architectures = ["LlamaForCausalLM"]

[defaults]
target = "tiny"
args = { speculative_algorithm = "DDTREE" }

[[case]]
name = "hopper"
hardware = "hopper"

[[case]]
name = "ampere"
hardware = "ampere"
expect = { verify_backend = "flashinfer", topk = 1 }
'''

CALLS_TOML = '''\
[imports]
hook = "pkg.speculative_hook"

[[call]]
name = "the tree holds the budget and the root"
function = "hook.ddtree_tree_width"
args = ["4"]
expect = ["result == 5"]
'''

DISPATCH_TOML = '''\
[[site]]
file = "python/pkg/server_args.py"
scope = "ServerArgs.__post_init__"
expr = 'self.speculative_algorithm == "DDTREE"'
treatment = "handled"
reason = "DDTREE resolves its backend and topk in the hook"
'''

TESTS = '''\
import os
import sys

sys.path.insert(0, os.path.join(os.environ["PATCHKIT_TARGET"], "python"))


def test_the_tree_holds_the_budget_and_the_root():
    from pkg.speculative_hook import ddtree_tree_width

    assert ddtree_tree_width(4) == 5


def test_ddtree_picks_a_tree_mask_backend():
    from pkg.server_args import ServerArgs

    args = ServerArgs(speculative_algorithm="DDTREE", attention_backend="fa3")
    assert (args.attention_backend, args.speculative_eagle_topk) == ("triton", 1)


def test_other_algorithms_keep_the_base_default():
    from pkg.server_args import ServerArgs

    assert ServerArgs().attention_backend == "triton"
'''

CURRENT = {"interpreter": "current"}
MANIFEST: dict[str, Any] = {"verify": {
    "xref": {"family": "DDTREE|DDTree|ddtree", "use_paths": ["tests"]},
    "calls": CURRENT, "backend": CURRENT, "tests": CURRENT,
    "dispatch": {"covers": ["DDTREE"]},
}}


def hook_set(root: Path) -> tuple[Path, Path]:
    """The set applied to a fresh target: (target, set_dir)."""
    target, set_dir = applied_example(root, {"python/pkg/__init__.py": "", SERVER_ARGS: BASE_SERVER_ARGS},
                                      {SERVER_ARGS: PATCHED_SERVER_ARGS, HOOK: HOOK_SOURCE}, MANIFEST)
    for rel, text in {"expectations/backend.toml": BACKEND_TOML, "expectations/calls.toml": CALLS_TOML,
                      "expectations/dispatch.toml": DISPATCH_TOML, "tests/test_hook.py": TESTS}.items():
        (set_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (set_dir / rel).write_text(text)
    return target, set_dir


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


#: Per tree file, its variants: "ok" (as applied), "benign" edits (a comment, a docstring) and
#: "break" edits, each named by what it breaks.
VARIANTS: dict[str, dict[str, str]] = {
    HOOK: {
        "ok": HOOK_SOURCE,
        "benign: a comment": HOOK_SOURCE + "\n# the budget counts the tree's nodes without the root\n",
        "benign: the docstring": _edit(HOOK_SOURCE, "the backends whose", "which backends' "),
        # the issue's edit: a line indented wrongly (IndentationError when imported)
        "break: an indented line": _edit(HOOK_SOURCE, "    return width\n", "      return width\n"),
        # a backend without the tree mask at topk 1 (the backend gate; issue 37 point 4)
        "break: fa3 in the tuple": _edit(HOOK_SOURCE, '("triton", "flashinfer")', '("triton", "flashinfer", "fa3")'),
        # a wrong width (the calls gate and the set's tests)
        "break: the width": _edit(HOOK_SOURCE, "width = budget + 1", "width = budget"),
    },
    SERVER_ARGS: {
        "ok": PATCHED_SERVER_ARGS,
        "benign: a comment": PATCHED_SERVER_ARGS + "\n# DDTREE resolves in the hook\n",
        "break: a missing colon": _edit(PATCHED_SERVER_ARGS, 'if self.speculative_algorithm == "DDTREE":',
                                        'if self.speculative_algorithm == "DDTREE"'),
    },
}

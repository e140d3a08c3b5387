"""The package's layout (issue 32): the root holds ``__init__.py`` and subpackages only, and the
subpackages import one way, from higher layers to lower ones, without cycles.

:data:`LAYERS` is the one table of the layers (the README's "Layout" shows it). The import
graph is read from the source (``ast``): every ``import fairseq_ext.X...`` and ``from fairseq_ext
(.X...) import ...``, at module level or inside functions, as an edge between subpackages. Each
subpackage's docstring says what it may import ("May import: ..."), and that sentence must name
every subpackage it does import, and only lower (or same-layer) ones.

The package root sits above every layer: its ``__init__`` imports the registering subpackages
(and Python imports it before any module of the package runs, so every module already runs with
everything registered). A module that imports the root itself (``import fairseq_ext``, or ``from
fairseq_ext import NAME`` where NAME is not a subpackage) therefore points up, as :data:`ROOT`.
"""
import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "fairseq_ext"
#: Top to bottom. A subpackage imports subpackages of lower layers, or of its own layer as long
#: as the graph stays acyclic.
LAYERS = (
    ("experiments",),  # applications: the demo (and the studies runner)
    ("evaluation", "export", "benchmarks"),  # drive trained or built models
    ("tasks",),
    ("criterions",),
    ("models", "optim"),
    ("modules", "data", "ops", "corpus", "flops"),
    ("reporting",),  # reading and showing runs: log records, curves, tables, statistics
    ("training",),  # run plumbing: checkpoint loading, output files, model building, ...
    ("cli", "compat"),  # one-line errors; the old import paths
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}
#: The package root as an import target: above every layer (module docstring).
ROOT = "fairseq_ext (the package root)"


def subpackages():
    return sorted(p.name for p in PACKAGE.iterdir()
                  if p.is_dir() and (p / "__init__.py").is_file())


def imported_subpackages(path: Path, own: str, source: str = None):
    """The subpackages ``path`` imports (its text, or ``source``); :data:`ROOT` where it
    imports the package root itself."""
    found = set()
    subs = set(subpackages())
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the module's own package
                package = path.parent.relative_to(REPO_ROOT).parts
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ((node.module,) if node.module else ()))
                names = ([f"{module}.{alias.name}" for alias in node.names]
                         if module == "fairseq_ext" else [module])
            elif node.module == "fairseq_ext":
                names = [f"fairseq_ext.{alias.name}" for alias in node.names]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] != "fairseq_ext":
                continue
            target = parts[1] if len(parts) > 1 and parts[1] in subs else ROOT
            if target != own:
                found.add(target)
    return found


@functools.lru_cache(maxsize=None)
def import_graph():
    """Subpackage -> the subpackages it imports (read once per session: every test reads it)."""
    graph = defaultdict(set)
    for sub in subpackages():
        for path in (PACKAGE / sub).rglob("*.py"):
            graph[sub] |= imported_subpackages(path, sub)
    return graph


def test_the_root_holds_only_init_and_subpackages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"loose modules in fairseq_ext/: {loose}; give each a subpackage"


def test_every_subpackage_has_a_layer_and_every_layer_a_subpackage():
    assert sorted(LAYER_OF) == subpackages()


def upward_edges(graph):
    """``source -> target`` for each import from a layer to a higher one (the root included)."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items()
                  for target in targets if LAYER_OF.get(target, -1) < LAYER_OF[source])


def test_subpackages_import_downwards_only():
    upward = upward_edges(import_graph())
    assert upward == [], f"imports from a lower layer to a higher one: {upward}"


@pytest.mark.parametrize("planted", [
    "import fairseq_ext",
    "import fairseq_ext as plugin",
    "from fairseq_ext import __version__",
    "from .. import REGISTERING_SUBPACKAGES",
    "def f():\n    import fairseq_ext  # noqa: F401",
    "from fairseq_ext import tasks",
])
def test_a_planted_upward_import_is_caught(planted):
    """One planted line in flops/ (a low layer) makes the check fail: an import of the package
    root (above every layer) or of a higher subpackage."""
    path = PACKAGE / "flops" / "planted.py"
    graph = {sub: set(targets) for sub, targets in import_graph().items()}
    graph["flops"] |= imported_subpackages(path, "flops", source=planted)
    assert upward_edges(graph), f"{planted!r} in fairseq_ext/flops/ was not caught"


def test_downward_and_subpackage_imports_are_not_root_imports():
    """``from fairseq_ext import ops`` names a subpackage, and a relative import inside a
    subpackage stays in it: neither is an import of the root."""
    path = PACKAGE / "models" / "planted.py"
    assert imported_subpackages(path, "models", source="from fairseq_ext import ops") == {"ops"}
    assert imported_subpackages(path, "models", source="from . import validation") == set()
    assert imported_subpackages(path, "models", source="from .. import flops") == {"flops"}


def test_the_subpackage_graph_has_no_cycle():
    graph = import_graph()
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                pytest.fail("import cycle: " + " -> ".join(path + [node, target]))
            if target not in state:
                visit(target, path + [node])
        state[node] = "done"

    for node in subpackages():
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("sub", subpackages())
def test_each_subpackage_docstring_says_what_it_may_import(sub):
    doc = ast.get_docstring(ast.parse((PACKAGE / sub / "__init__.py").read_text())) or ""
    assert len(doc.split()) >= 15, f"fairseq_ext/{sub}/__init__.py: say what lives here"
    match = re.search(r"May import:([^.]*)\.", doc.replace("\n", " "))
    assert match, f"fairseq_ext/{sub}/__init__.py: no 'May import: ...' sentence"
    named = set(re.findall(r"\b[a-z_]+\b", match.group(1))) & set(LAYER_OF)
    imported = import_graph().get(sub, set())
    assert imported <= named, (f"{sub} imports {sorted(imported - named)}, which its docstring's "
                               "'May import' does not name")
    higher = sorted(n for n in named if LAYER_OF[n] < LAYER_OF[sub])
    assert not higher, f"{sub}'s docstring allows imports from higher layers: {higher}"


def test_the_readme_layout_shows_the_layers():
    readme = (REPO_ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    for sub in subpackages():
        assert f"{sub}/" in layout, f"README's Layout does not list fairseq_ext/{sub}/"

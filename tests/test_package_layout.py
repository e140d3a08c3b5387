"""The two packages' layout: the plugin (``fairseq_ext``, what ``--user-dir`` loads) and the lab
(``fairseq_ext_lab``, what measures it). The lab imports the plugin; the plugin never imports the
lab, and ``import fairseq_ext`` loads no module of it.

Inside the plugin the root holds ``__init__.py`` and subpackages only, and the subpackages
import one way, from higher layers to lower ones, without cycles. :data:`LAYERS` is the one table
of the layers (the README's "Layout" shows it). The import graph is read from the source
(``ast``): every ``import fairseq_ext.X...`` and ``from fairseq_ext(.X...) import ...``, at module
level or inside functions, as an edge between subpackages. Each subpackage's docstring says what
it may import ("May import: ..."), and that sentence must name every subpackage it does import,
and only lower (or same-layer) ones.

The package root sits above every layer: its ``__init__`` imports the registering subpackages.
A module that imports the root itself (``import fairseq_ext``, or ``from fairseq_ext import
NAME`` where NAME is not a subpackage) therefore points up, as :data:`ROOT`.
"""
import ast
import functools
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "fairseq_ext"
#: Top to bottom. A subpackage imports subpackages of lower layers, or of its own layer as long
#: as the graph stays acyclic.
LAYERS = (
    ("export",),  # checkpoints for use outside fairseq-train
    ("tasks",),
    ("criterions",),
    ("models", "optim"),
    ("modules", "data", "ops", "corpus", "flops"),
    ("reporting",),  # what fairseq-validate reports: statistics, per-row score files
    ("training",),  # run plumbing: checkpoint loading, output files, model building, ...
    ("cli",),  # one-line errors
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


LAB = REPO_ROOT / "fairseq_ext_lab"
#: The lab's parts, top to bottom: its root modules (the demo, the studies and the fine-tuning
#: stage with what they share) above the measuring subpackages, above its reporting.
LAB_LAYERS = (("(root)", "studies"), ("evaluation", "benchmarks"), ("reporting",))
LAB_LAYER_OF = {name: depth for depth, names in enumerate(LAB_LAYERS) for name in names}


def lab_imports(source: str):
    """The dotted modules of ``fairseq_ext_lab`` that ``source`` imports (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "fairseq_ext_lab"}


def plugin_modules_importing_the_lab(extra: dict = None):
    sources = {str(path.relative_to(REPO_ROOT)): path.read_text() for path in PACKAGE.rglob("*.py")}
    sources.update(extra or {})
    return sorted(name for name, source in sources.items() if lab_imports(source))


def test_the_plugin_imports_nothing_of_the_lab():
    assert plugin_modules_importing_the_lab() == []


@pytest.mark.parametrize("planted", [
    "import fairseq_ext_lab",
    "from fairseq_ext_lab import demo",
    "def f():\n    from fairseq_ext_lab.reporting.curves import main",
])
def test_a_planted_import_of_the_lab_is_caught(planted):
    assert plugin_modules_importing_the_lab({"fairseq_ext/models/planted.py": planted}) == [
        "fairseq_ext/models/planted.py"]


def test_importing_the_plugin_loads_no_lab_module():
    """What ``--user-dir fairseq_ext`` runs: ``import fairseq_ext``, in a fresh interpreter."""
    probe = ("import sys, fairseq_ext; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'fairseq_ext_lab'))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=REPO_ROOT)
    assert result.stdout.strip() == "[]", result.stdout


def lab_part(path: Path) -> str:
    parts = path.relative_to(LAB).parts
    return parts[0] if len(parts) > 1 else "(root)"


def test_the_lab_imports_downwards_only():
    upward = []
    for path in LAB.rglob("*.py"):
        source_part = lab_part(path)
        for name in lab_imports(path.read_text()):
            parts = name.split(".")
            target = parts[1] if len(parts) > 1 and (LAB / parts[1]).is_dir() else "(root)"
            if LAB_LAYER_OF[target] < LAB_LAYER_OF[source_part]:
                upward.append(f"{path.relative_to(REPO_ROOT)} -> {name}")
    assert upward == [], f"the lab's lower parts import its higher ones: {sorted(upward)}"


def test_every_lab_part_has_a_layer():
    parts = {p.name for p in LAB.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert parts | {"(root)"} == set(LAB_LAYER_OF)

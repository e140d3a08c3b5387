"""The README is a table of contents: its first screen holds what the plugin is, the
two commands and a status table of short rows, one per system, each linking to the docs page
that has the details; the whole README stays short; the links of the README and of docs/ point
at files that exist; and every module path a page names exists."""
import re
from pathlib import Path
from typing import List

from conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
#: What a newcomer sees without scrolling.
FIRST_SCREEN_LINES = 60
MAX_README_LINES = 300
#: The systems of the status table, in order (the first cell of each row).
SYSTEMS = ("3ML", "Generalized bidirectionality", "SwishRNN", "FLOP counting", "Training at scale",
           "Exports", "The demo", "English corpus", "Studies")
#: A status row says what works and what is owed "in a few words".
MAX_ROW_CHARS = 250
MAX_CELL_WORDS = 20


def lines(path: Path) -> List[str]:
    return path.read_text().splitlines()


def status_rows() -> List[List[str]]:
    """The cells of the status table's rows (header and separator left out)."""
    text = README.read_text()
    section = text[text.index("## Status"):]
    section = section[:section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[2:]]


def test_the_first_screen_has_the_commands_and_the_status_table():
    screen = "\n".join(lines(README)[:FIRST_SCREEN_LINES])
    block = re.search(r"^```bash\n(.*?)^```", screen, flags=re.M | re.S)
    assert block, "no ```bash block on the README's first screen"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"], commands
    assert all(re.search(rf"^{re.escape(c)} +# \w", block.group(1), flags=re.M) for c in commands), \
        "say what each command does, in its comment"
    intro = screen[:screen.index("```bash")]
    assert "--user-dir" in intro and "plugin" in intro, "say what the plugin is before the commands"
    assert "## Status" in screen
    last_row = max(i for i, line in enumerate(lines(README)) if line.startswith("| "))
    assert last_row < FIRST_SCREEN_LINES, f"the status table ends on line {last_row + 1}"


def test_one_short_status_row_per_system_each_linking_to_its_docs_page():
    rows = status_rows()
    assert tuple(row[0] for row in rows) == SYSTEMS
    for row in rows:
        line = "| " + " | ".join(row) + " |"
        assert len(line) <= MAX_ROW_CHARS, f"{row[0]}: {len(line)} characters, keep it short"
        assert all(len(cell.split()) <= MAX_CELL_WORDS for cell in row), row
        links = re.findall(r"\]\((docs/[^)#]+\.md)[^)]*\)", row[-1])
        assert links, f"{row[0]}: no link to its docs page"
        assert all((REPO_ROOT / link).is_file() for link in links), links


def test_the_readme_is_a_table_of_contents():
    assert len(lines(README)) < MAX_README_LINES
    headings = [line for line in lines(README) if line.startswith("## ")]
    for section in ("## Status", "## Layout", "## Install", "## Using the plugin", "## Recipes",
                    "## Tests and CI"):
        assert section in headings, section
    text = README.read_text()
    for section in ("## Install", "## Using the plugin", "## Recipes", "## Tests and CI"):
        body = text[text.index(section):]
        body = body[:body.find("\n## ", 1)]
        assert re.search(r"\]\(docs/\w+\.md", body), f"{section}: link to the page with the details"


def test_the_links_of_the_readme_and_the_docs_point_at_files():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    broken = []
    for page in pages:
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        prose = re.sub(r"`[^`\n]*`", "", prose)  # code, not links
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"\w+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor of the page itself
            path = target.split("#")[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target}")
    assert not broken, broken


#: A module path as the pages name it: dotted (``fairseq_ext.models.three_ml``, maybe followed
#: by a name defined there) or as a file or folder (``fairseq_ext_lab/demo.py``).
MODULE_PATH = re.compile(r"(?<![\w./{-])(fairseq_ext(?:_lab)?(?:[./]\w+)+)/?")
#: Names that look like module paths but are not: a file format's name, the native extension
#: (built by ``make install``, not in the checkout).
NOT_MODULES = {"fairseq_ext.infill_candidates", "fairseq_ext.ops._C"}


def names_a_module_or_its_attribute(dotted: str) -> bool:
    """Whether ``a.b.c.d`` is a module or package of the checkout, or a module followed by at most
    two names of which the first is defined at its top level (class, function, assignment)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO_ROOT.joinpath(*parts[:cut])
        if base.is_dir() and (base / "__init__.py").is_file():
            module = base / "__init__.py"
        elif base.with_suffix(".py").is_file():
            module = base.with_suffix(".py")
        else:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        defined = rf"^(class|def)\s+{rest[0]}\b|^{rest[0]}\s*[:=]|^(from|import)\s.*\b{rest[0]}\b"
        return len(rest) <= 2 and re.search(defined, module.read_text(), flags=re.M) is not None
    return False


def missing_module_paths(text: str) -> List[str]:
    missing = []
    for match in MODULE_PATH.finditer(text):
        name = match.group(1).rstrip(".")
        if name in NOT_MODULES:
            continue
        if "/" in name:
            found = (REPO_ROOT / name).exists()
        else:
            found = names_a_module_or_its_attribute(name)
        if not found:
            missing.append(name)
    return missing


def test_a_page_names_only_modules_that_exist():
    found = []
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        found += [f"{page.relative_to(REPO_ROOT)}: {name}"
                  for name in missing_module_paths(page.read_text())]
    assert not found, f"module paths that name nothing in the checkout: {found}"


def test_a_moved_or_misspelt_module_path_is_caught():
    assert missing_module_paths("see fairseq_ext.experiments.demo and fairseq_ext/compat/") == [
        "fairseq_ext.experiments.demo", "fairseq_ext/compat"]
    assert missing_module_paths("fairseq_ext_lab.demo.main, fairseq_ext/models/three_ml.py, "
                                "`fairseq_ext.reporting.uncertainty`.") == []

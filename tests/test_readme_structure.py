"""The README is a table of contents (issue 32): its first screen holds what the plugin is, the
two commands and a status table of short rows, one per system, each linking to the docs page
that has the details; the whole README stays short; the links of the README and of docs/ point
at files that exist; and no page names a module path that moved (fairseq_ext/compat)."""
import re
from pathlib import Path
from typing import List

from conftest import REPO_ROOT
from fairseq_ext.compat import MOVED_MODULES

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


def moved_paths():
    """Each moved module as the docs would name it: dotted, and as a file."""
    for old in MOVED_MODULES:
        yield old
        yield old.replace(".", "/") + ".py"
    yield "fairseq_ext/export.py"  # now the export/ package


def test_no_page_names_a_moved_module():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    found = []
    for page in pages:
        text = page.read_text()
        if page.name == "benchmarks.md":  # its "GPU suite" section is the GPU suite's own
            start = text.find("\n## GPU suite")
            if start >= 0:
                end = text.find("\n## ", start + 1)
                text = text[:start] + (text[end:] if end >= 0 else "")
        for old in moved_paths():
            if re.search(rf"(?<![\w./]){re.escape(old)}(?![\w/])", text):
                found.append(f"{page.relative_to(REPO_ROOT)}: {old}")
    assert not found, f"old module paths (fairseq_ext/compat has the new ones): {found}"

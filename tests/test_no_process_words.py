"""The code, tests, scripts, recipes, patches and docs pages say what a thing does, not which
tracker ticket asked for it: no text file of ours names an issue by number ("issue N",
"Issue #N", "issues N and M"). Committed run records (JSON summaries, logs, text reports under
docs/) keep what their run printed, so only the pages (``docs/**/*.md``) of docs/ are read;
``tests/data/`` holds third-party text copied verbatim and is left out too."""
import re
import subprocess
from typing import List

import pytest

from conftest import REPO_ROOT

#: Folders and files whose text files are read (docs/: its pages only).
SCANNED = ("fairseq_ext/", "fairseq_ext_lab/", "tests/", "scripts/", "recipes/", "patches/",
           "README.md", "Makefile", "setup.py")
#: Third-party fixture text (Debian package lists, HTML docs), kept as shipped.
NOT_OURS = ("tests/data/",)
#: "issue", "issues" then a number, maybe after a space, hyphen, underscore or "#".
ISSUE_NUMBER = re.compile(r"(?<![A-Za-z])issues?[ _-]?#?\d+", flags=re.IGNORECASE)


def listed_files() -> List[str]:
    """Tracked files and new files git does not ignore (a file before its first commit counts)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
        return sorted(set(out.splitlines()))
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        return sorted(str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.rglob("*") if p.is_file()
                      and ".venv" not in p.parts and ".git" not in p.parts)


def scanned(path: str) -> bool:
    if path.startswith(NOT_OURS):
        return False
    if path.startswith("docs/"):
        return path.endswith(".md")
    return any(path == name or (name.endswith("/") and path.startswith(name)) for name in SCANNED)


def issue_numbers(text: str) -> List[str]:
    return [match.group(0) for match in ISSUE_NUMBER.finditer(text)]


def test_no_file_names_an_issue_by_number():
    found = []
    for name in filter(scanned, listed_files()):
        path = REPO_ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{number}: {hit}" for hit in issue_numbers(line)]
    assert not found, ("say what the code or page does, not which issue asked for it: "
                       f"{found}")


# the planted strings are built from parts so that this file holds no match itself
ISSUE, ISSUES = "iss" + "ue", "iss" + "ues"


@pytest.mark.parametrize("planted", [
    f"see {ISSUE} 12 for why", f"{ISSUE.title()} #3: the fix", f"({ISSUES} 47 and 59)",
    f"the {ISSUE}-31 shape", f"def test_judged_before_{ISSUE}_58():", f"{ISSUE}#7",
])
def test_a_planted_issue_number_is_caught(planted):
    assert issue_numbers(planted), planted


@pytest.mark.parametrize("clean", [
    "GitHub issues without a number", "the loop issues about ten ops per parameter",
    ":issue:`123` -> bpo-123 (a reST role of the Python docs)", "tissue 5", "item 7a",
])
def test_words_that_only_look_alike_are_not_flagged(clean):
    assert issue_numbers(clean) == [], clean


def test_the_scope_is_the_packages_tests_scripts_recipes_patches_and_pages():
    assert scanned("fairseq_ext/models/three_ml.py") and scanned("fairseq_ext_lab/demo.py")
    assert scanned("docs/studies/2026-11-27/README.md") and scanned("patches/series")
    assert scanned("README.md") and scanned("Makefile") and scanned("recipes/3ml/demo.sh")
    assert not scanned("docs/testing/durations-tiers-after.json")
    assert not scanned("docs/demo/demo.log") and not scanned("tests/data/downstream/Packages")
    assert not scanned("README.md.orig") and not scanned("setup.cfg")

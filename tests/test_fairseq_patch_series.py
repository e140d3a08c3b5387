"""The fairseq patch as a series: ``patches/series`` lists one item per file, in
order; the build applies them and marks the wheel (``fairseq.__fairseq_ext_patch__``); the plugin
stops with one line naming ``make install`` on a fairseq without the marker or with an older one.

The installed fairseq is checked against the series file by file (the build run here, on the
pinned wheel), so a stale ``.venv`` or a series that no longer applies fails here, not later in
a training run.
"""
import os
import re
import subprocess
import sys
import zipfile

import pytest

from conftest import BIN_DIR, REPO_ROOT
from fairseq_ext.training.fairseq_patch import (
    MARKER,
    REQUIRED_PATCH_VERSION,
    UnpatchedFairseqError,
    installed_series,
    marker_problem,
    read_series,
    require_patched_fairseq,
)

PATCHES = REPO_ROOT / "patches"
SERIES = PATCHES / "series"
#: NNNN-item<label>-<name>.patch
PATCH_NAME = re.compile(r"^(\d{4})-item(\d[a-h]?)-[a-z0-9-]+\.patch$")


def series_items():
    return read_series(SERIES)[1]


def test_series_lists_every_patch_file_once_numbered_in_order():
    listed = [f"{item}.patch" for item in series_items()]
    assert sorted(p.name for p in PATCHES.glob("*.patch")) == listed  # every file, once
    assert listed == sorted(listed)
    for position, name in enumerate(listed, 1):
        match = PATCH_NAME.match(name)
        assert match, f"{name}: not NNNN-item<label>-<name>.patch"
        assert int(match.group(1)) == position


@pytest.mark.parametrize("name", [f"{item}.patch" for item in read_series(SERIES)[1]])
def test_each_patch_starts_with_its_header_and_names_its_item(name):
    text = (PATCHES / name).read_text()
    header = text.split("\n--- a/", 1)[0]
    label = PATCH_NAME.match(name).group(2)
    assert header.startswith(f"fairseq-ext's fairseq patch, item {label} ("), header[:120]
    assert len(header.split()) > 20  # what it fixes and why, not only a title
    assert "\n+++ b/" in text  # and at least one file's diff


def test_the_plugin_requires_the_series_version():
    """Raising the series' version without the plugin's (or the reverse) fails here."""
    assert read_series(SERIES)[0] == REQUIRED_PATCH_VERSION


def test_installed_fairseq_carries_this_series():
    installed = installed_series()
    assert installed is not None, f"fairseq has no {MARKER}: run `make install`"
    assert installed == read_series(SERIES), "the .venv's fairseq is stale: run `make install`"


@pytest.mark.parametrize("marker,problem", [
    (None, "no __fairseq_ext_patch__ marker"),
    ({"version": 0, "items": ("0001-item1-keep-last-batch",)},
     f"patch series version 0 (1 items); this fairseq-ext needs version {REQUIRED_PATCH_VERSION}"
     " or later"),
    ({"items": ()}, "an unreadable __fairseq_ext_patch__ marker: {'items': ()}"),
    ({"version": REQUIRED_PATCH_VERSION, "items": ()}, None),
    ({"version": REQUIRED_PATCH_VERSION + 1, "items": ("x",)}, None),  # newer builds run
])
def test_marker_problem(marker, problem):
    assert marker_problem(marker) == problem


def test_require_patched_fairseq_raises_a_user_error_naming_make_install():
    class Stock:  # a module-like fairseq without the marker
        __file__ = "/site-packages/fairseq/__init__.py"

    with pytest.raises(UnpatchedFairseqError) as caught:
        require_patched_fairseq(Stock)
    assert str(caught.value) == (
        "fairseq at /site-packages/fairseq is not fairseq-ext's patched build (no "
        "__fairseq_ext_patch__ marker): run `make install` in the fairseq-ext checkout "
        "(docs/install.md)")
    assert isinstance(caught.value, ImportError)
    require_patched_fairseq(type("Patched", (), {MARKER: {"version": REQUIRED_PATCH_VERSION,
                                                          "items": ()}}))


def planted_fairseq(tmp_path, marker_source):
    """An environment whose Python starts by replacing (or deleting) the installed fairseq's
    marker (a ``sitecustomize`` on ``PYTHONPATH``): the installed build as a stock or an old one."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import fairseq\n{marker_source}\n")
    return dict(os.environ, PYTHONPATH=str(site))


@pytest.mark.slow
@pytest.mark.parametrize("marker_source,problem", [
    (f"del fairseq.{MARKER}", "(no __fairseq_ext_patch__ marker)"),
    (f"fairseq.{MARKER} = {{'version': 0, 'items': ()}}",
     f"(patch series version 0 (0 items); this fairseq-ext needs version "
     f"{REQUIRED_PATCH_VERSION} or later)"),
])
def test_fairseq_train_on_an_unpatched_fairseq_stops_with_one_line(tmp_path, marker_source,
                                                                    problem):
    """The console script itself (a fresh process, not a served one), before it reads any data."""
    env = planted_fairseq(tmp_path, marker_source)
    result = subprocess.run(
        [str(BIN_DIR / "fairseq-train"), str(tmp_path / "no-data-bin"), "--user-dir",
         str(REPO_ROOT / "fairseq_ext"), "--task", "masked_lm", "--arch", "roberta_base"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("fairseq-train: error: fairseq at ")
    assert problem in lines[0] and "run `make install` in the fairseq-ext checkout" in lines[0]
    # in plain Python: an ImportError with the same one-line message
    result = subprocess.run([sys.executable, "-c", "import fairseq_ext"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        "fairseq_ext.training.fairseq_patch.UnpatchedFairseqError: fairseq at ")


@pytest.mark.slow
def test_build_applies_the_series_and_installs_what_the_venv_has(tmp_path):
    """scripts/build_fairseq_wheel.sh on the pinned wheel: every item applies in order, the
    marker is written, and every Python file of the result is the installed one. Built SLIM=1
    (as scripts/gpu_wheels.sh builds it): against the full wheel `make install` built, only
    media and sample arrays under fairseq/examples are left out."""
    subprocess.run(["bash", "scripts/build_fairseq_wheel.sh", str(tmp_path / "wheel")],
                   cwd=REPO_ROOT, env=dict(os.environ, PYTHON=sys.executable, SLIM="1"),
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "wheel").glob("ve_fairseq-0.12.3-1fairseqext-*.whl")
    import fairseq
    site = os.path.dirname(os.path.dirname(fairseq.__file__))
    with zipfile.ZipFile(wheel) as archive:
        sources = [n for n in archive.namelist()
                   if n.endswith(".py") and n.split("/")[0] in ("fairseq", "fairseq_cli")]
        assert len(sources) > 500
        differing = [n for n in sources
                     if archive.read(n) != open(os.path.join(site, n), "rb").read()]
        init = archive.read("fairseq/__init__.py").decode()
    assert differing == [], "the .venv's fairseq is not this series' build: run `make install`"
    with zipfile.ZipFile(wheel) as archive:
        slim = set(archive.namelist())
    assert not any(name.endswith((".npy", ".png", ".ipynb", ".flac")) for name in slim)
    full_wheels = sorted((REPO_ROOT / "build" / "fairseq-wheel").glob(wheel.name))
    if full_wheels:  # make install's build of the same series
        with zipfile.ZipFile(full_wheels[-1]) as archive:
            dropped = set(archive.namelist()) - slim
        assert dropped and all(name.startswith("fairseq/examples/") and name.endswith(
            (".npy", ".png", ".jpg", ".gif", ".pdf", ".ipynb", ".flac", ".wav"))
            for name in dropped)
    version, items = read_series(SERIES)
    assert f'{MARKER} = {{"version": {version}, "items": (' in init
    assert all(f'"{item}"' in init for item in items)

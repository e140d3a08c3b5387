"""The suite's own machinery (tests/conftest.py): its run order names tests that exist, and
the markers that choose what ``make test``, ``make test-fast`` and ``make test-fresh`` run."""
import re
from types import SimpleNamespace

import pytest

from conftest import LONGEST_FIRST, REPO_ROOT, run_order


def test_the_longest_first_names_tests_that_exist():
    for entry in LONGEST_FIRST:
        path, name = entry.split("::")
        text = (REPO_ROOT / "tests" / path).read_text()
        assert re.search(rf"^def {re.escape(name)}", text, re.M), f"{entry}: no such test"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def item(nodeid, slow=False):
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: slow or None)


def test_run_order_reads_the_name_before_the_parameters():
    """A parameter that holds a "/" (a recipe's path) does not hide the test's name."""
    recipe = item("tests/test_torch_compile_cli.py::test_each_familys_demo_recipe_compiles_once_"
                  "per_bucket[recipes/roberta/demo.sh]", slow=True)
    assert run_order(recipe) == (0, 0)
    assert run_order(item("tests/test_x.py::test_y[a/b]", slow=True)) == (1, 0)
    assert run_order(item("tests/test_x.py::test_y")) == (2, 0)


@pytest.mark.heavy
def test_a_heavy_test_is_slow_too(request):
    """``heavy`` (make test-fresh only) implies ``slow`` (never in make test-fast)."""
    assert request.node.get_closest_marker("slow") is not None


@pytest.mark.unserved
def test_an_unserved_test_is_slow_too(request):
    """``unserved`` implies ``slow``: its runs escape the fork server's log, from which
    ``make test-fast`` learns that a test trains."""
    assert request.node.get_closest_marker("slow") is not None


@pytest.mark.unserved
def test_an_unserved_test_runs_real_processes_only(request):
    assert request.node.get_closest_marker("real_processes") is not None


def test_a_test_of_fresh_processes_is_left_to_make_test_fresh(fresh_cli, request):
    """A test that runs fresh processes (``fresh_cli``) runs them in ``make test-fresh``
    (``-m slow``) as it would in ``make test``, which leaves it out."""
    assert request.node.get_closest_marker("real_processes") is not None
    assert request.node.get_closest_marker("slow") is not None
    makefile = (REPO_ROOT / "Makefile").read_text()
    test_recipe = re.search(r"^test: .*\n\t(.*)$", makefile, re.M).group(1)
    fresh_recipe = re.search(r"^test-fresh: .*\n\t(.*)$", makefile, re.M).group(1)
    assert '-m "not heavy and not real_processes and not lab"' in test_recipe
    assert "-m slow" in fresh_recipe


def test_a_slow_test_of_the_lab_is_left_to_make_test_fresh(request):
    """Of the tests this session collected, exactly the slow ones of the lab's files
    (``LAB_TEST_FILES``) are marked ``lab``: ``make test`` deselects them, ``make test-fresh``
    (``-m slow``) runs them."""
    from conftest import LAB_TEST_FILES

    assert all((REPO_ROOT / "tests" / name).is_file() for name in LAB_TEST_FILES)
    for node in request.session.items:
        expected = node.path.name in LAB_TEST_FILES and node.get_closest_marker("slow") is not None
        assert (node.get_closest_marker("lab") is not None) == expected, node.nodeid

"""Shared fixtures: a tiny data-bin and checkpoints written by fairseq-train / fairseq-hydra-train.

Everything runs the real fairseq CLIs in subprocesses (the same interpreter as pytest), on data
the fixtures make, so the tests exercise exactly what a user runs.
"""
import copy
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
USER_DIR = REPO_ROOT / "fairseq_ext"
BIN_DIR = Path(sys.executable).parent

WORDS = (
    "the a of to in is that for it as with was on be by this are from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out "
    "so said what up its about into than them can only other new some could time these two may "
    "then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three"
).split()


#: Fixtures that run fairseq's CLIs (preprocess, train, hydra-train) or a whole pipeline: a test
#: that uses one is marked ``slow`` (``make test-fast`` skips it). Tests slow for other reasons
#: carry ``@pytest.mark.slow`` themselves.
SLOW_FIXTURES = frozenset({
    "tiny_data_bin", "spm_data_bin", "shell_trained", "hydra_trained", "train_runs", "pretrained",
    "exported",
    "classification_bin", "eos_trained_3ml", "swishrnn_demo_shell", "directory_build",
})


#: The lab's test files (``fairseq_ext_lab``: the demo, the studies, the fine-tuning stage, the
#: diagnosis, the benchmarks and the GPU suite): their slow tests are marked ``lab``, which
#: ``make test`` leaves to ``make test-fresh`` (CI runs both), so that the plugin's checks stay
#: fast.
LAB_TEST_FILES = frozenset({
    "test_demo.py", "test_readme_commands.py", "test_transfer_diagnosis.py",
    "test_transfer_curve.py", "test_finetuning_stage.py", "test_studies.py",
    "test_study_report_only.py", "test_gpu_study.py", "test_gpu_suite.py",
    "test_gpu_suite_study.py", "test_bench_3ml.py", "test_bench_bidirectional.py",
    "test_bench_cli_step.py", "test_bench_swishrnn.py", "test_device_reads.py", "test_figures.py",
    "test_plot_curves.py", "test_budget.py", "test_recipe_runs.py", "test_masked_lm_scores.py",
    "test_bidirectional_scoring.py", "test_gpu_data_share.py",
})


#: The longest tests (minutes of a fresh clone's suite between them; docs/testing.md): they start
#: first, so that no pytest-xdist worker is left running one of them alone at the end. The
#: heavy ones first (``make test-fresh`` only), then the longest of ``make test`` (the real
#: processes of the kill, resume and determinism tests among them), longest first.
LONGEST_FIRST = (
    "test_torch_compile_cli.py::test_each_familys_demo_recipe_compiles_once_per_bucket",
    "test_torch_compile_cli.py::test_hydra_demo_config_compiles_once_per_bucket",
    "test_torch_compile_cli.py::test_variable_lengths_compile_once_per_bucket",
    "test_checkpoint_faults.py::test_kills_during_checkpoint_writes_leave_complete_checkpoints",
    "test_preemption.py::test_forty_runs_at_the_default_buffer_size_exit_zero",
    "test_torch_compile.py::test_compiled_3ml_has_eagers_losses_and_compiles_each_bucket_once",
    "test_studies.py::test_a_tiny_study_end_to_end_then_resumed_after_a_kill",
    "test_bench_bidirectional.py::test_flex_part_prints_each_ratio_beside_the_skipped_blocks",
    "test_readme_commands.py::test_readme_commands_run_on_the_demo_outputs",
    "test_registration.py::test_fairseq_train_help_from_an_installed_copy",
    "test_studies.py::test_a_fixed_seed_repeats_its_figures_exactly_on_one_machine",
    "test_fairseq_patch_step.py::test_a_model_that_keeps_recompiling_for_one_shape_is_named",
    "test_exact_resume.py::test_resume_is_exact",
    "test_torch_compile.py::test_compiled_roberta_has_eagers_losses",
    "test_demo.py::test_demo_end_to_end_on_a_tiny_data_bin",
    "test_bidirectional_eval.py::test_fairseq_validate_end_to_end",
)


def run_order(item) -> tuple:
    """The longest tests first (:data:`LONGEST_FIRST`), then the slow ones, then the rest, each
    group in collection order (stable sort)."""
    name = item.nodeid.split("[")[0].split("/")[-1]  # (a parameter may hold a "/")
    for rank, longest in enumerate(LONGEST_FIRST):
        if name.startswith(longest):
            return (0, rank)
    return (1 if item.get_closest_marker("slow") else 2, 0)


#: Fixtures whose every run is a real process, fork server or not: a test that uses one is
#: marked ``real_processes``.
REAL_PROCESS_FIXTURES = frozenset({"fresh_cli"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        # real_processes: its runs are the same with the fork server on or off, so make
        # test-fresh (server off) runs it as make test would, and make test leaves it to it
        if REAL_PROCESS_FIXTURES & set(item.fixturenames) or item.get_closest_marker("unserved"):
            item.add_marker(pytest.mark.real_processes)
        # heavy and real_processes: make test-fresh only; real_processes (unserved included):
        # its runs never reach the server's log, which fast_tests_do_not_train reads
        if SLOW_FIXTURES & set(item.fixturenames) or item.get_closest_marker("heavy") \
                or item.get_closest_marker("real_processes"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") and item.path.name in LAB_TEST_FILES:
            item.add_marker(pytest.mark.lab)
    items.sort(key=run_order)


_ZYGOTE = []


#: ``FAIRSEQ_EXT_TEST_ZYGOTE=0``: no fork server, every run a real process (``make test-fresh``).
ZYGOTE_SWITCH = "FAIRSEQ_EXT_TEST_ZYGOTE"


def cli_zygote():
    """This pytest process's fork server of fairseq's CLIs (``tests/cli_zygote.py``), started on
    first use; its environment (``FAIRSEQ_BIN``, the socket) goes into ``os.environ``, so that
    every run a test starts, recipes and scripts included, forks from it instead of importing
    torch and fairseq again. ``FAIRSEQ_EXT_TEST_ZYGOTE=0`` turns it off (every run real), and
    so does a GPU: runs that use CUDA start as real processes (the GPU suite's tests stage)."""
    if not _ZYGOTE and os.environ.get(ZYGOTE_SWITCH, "1") != "0":
        import tempfile

        import torch

        if torch.cuda.is_available():
            os.environ[ZYGOTE_SWITCH] = "0"
            return None

        from cli_zygote import CliZygote

        zygote = CliZygote(tempfile.mkdtemp(prefix="fairseq-ext-cli-"), str(BIN_DIR))
        os.environ.update(zygote.environment())
        _ZYGOTE.append(zygote)
    return _ZYGOTE[0] if _ZYGOTE else None


#: What the zygote's log says when a test trains (a served or declined run of these CLIs).
TRAINING_RUNS = tuple(f"{verdict}: {cli} " for verdict in ("served", "declined")
                      for cli in ("fairseq-train", "fairseq-hydra-train"))


@pytest.fixture(autouse=True)
def unserved_runs(request, monkeypatch):
    """A test marked ``unserved`` (determinism, exact resume, kills: what a fork of one server
    could pass where fresh processes fail, e.g. two runs that share the server's hash seed) has
    every run it starts real: the fork server's socket is out of its environment, so the shims
    in ``FAIRSEQ_BIN`` and ``PATH`` run the installed programs (restored after the test)."""
    if request.node.get_closest_marker("unserved"):
        from cli_zygote import SOCKET_ENV

        cli_zygote()  # started now if at all, so that its environment is not set mid-test
        monkeypatch.delenv(SOCKET_ENV, raising=False)
    yield


def dynamo_config_overrides() -> dict:
    """What is set in ``torch._dynamo.config`` (``{name: value}``, copies), as
    :func:`restore_dynamo_config` takes it; ``{}`` where torch._dynamo is not imported (its
    import sets nothing)."""
    config = sys.modules.get("torch._dynamo.config")
    if config is None:
        return {}
    from torch.utils._config_module import _UNSET_SENTINEL

    return {name: copy.deepcopy(value) for name, entry in config._config.items()
            if (value := entry.user_override.get()) is not _UNSET_SENTINEL}


def restore_dynamo_config(before: dict) -> list:
    """Set ``torch._dynamo.config`` back to ``before`` (:func:`dynamo_config_overrides`): each
    setting a test changed, and each it set that was unset. Returns the names whose value it
    changed back."""
    config = sys.modules.get("torch._dynamo.config")
    if config is None:
        return []
    from torch.utils._config_module import _UNSET_SENTINEL

    restored = []
    with warnings.catch_warnings():  # a deprecated setting warns when set
        warnings.simplefilter("ignore")
        for name, entry in config._config.items():
            now = entry.user_override.get()
            if entry.alias is not None or (now is _UNSET_SENTINEL and name not in before):
                continue
            if name in before:
                if now is not _UNSET_SENTINEL and now == before[name]:
                    continue
                setattr(config, name, copy.deepcopy(before[name]))
                restored.append(name)
            else:  # set during the test (or read: a mutable default is copied in): unset again
                delattr(config, name)
                entry.hide = False  # delattr hides it (for unittest.mock): it is there again
                if now != entry.default:
                    restored.append(name)
    return restored


@pytest.fixture(autouse=True)
def dynamo_config_restored():
    """torch._dynamo.config as it was before the test (:func:`restore_dynamo_config`): the
    patched fairseq Trainer raises dynamo's recompile limit (``--torch-compile``) for the whole
    process, so a test that builds one in-process would leave it raised for the next tests of
    its pytest worker. Microseconds a test."""
    before = dynamo_config_overrides()
    yield
    restore_dynamo_config(before)


@pytest.fixture(autouse=True)
def fast_tests_do_not_train(request):
    """``make test-fast`` runs no training: a test not marked ``slow`` that starts
    fairseq-train or fairseq-hydra-train (itself, or through a recipe or a driver) fails, and
    says to mark it. Read from the zygote's log, which sees every run a test starts through it."""
    zygote = _ZYGOTE[0] if _ZYGOTE else None
    before = os.path.getsize(zygote.log) if zygote else 0
    yield
    if request.node.get_closest_marker("slow") or not _ZYGOTE:
        return
    with open(_ZYGOTE[0].log) as log:
        log.seek(before)
        trained = [line.strip() for line in log if line.startswith(TRAINING_RUNS)
                   and f"  # {request.node.nodeid} (" in line  # this test's (not a late one's)
                   and not {"-h", "--help"} & set(line.split())]
    if trained:
        pytest.fail(f"this test is not marked slow but trains ({trained[0][:200]}): mark it "
                    "@pytest.mark.slow, or use a fixture of SLOW_FIXTURES", pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    for zygote in _ZYGOTE:
        zygote.close()


def fairseq_cli(name: str, real: bool = False) -> str:
    """Path of a fairseq console script: the zygote's shim (:func:`cli_zygote`), or with
    ``real`` (a test of the console script itself) the one installed beside this interpreter."""
    zygote = None if real else cli_zygote()
    if zygote is not None and (Path(zygote.shims) / name).is_file():
        return str(Path(zygote.shims) / name)
    return str(BIN_DIR / name)


def search_path() -> str:
    """The ``PATH`` a test's commands run with: the zygote's shims (:func:`cli_zygote`), then
    this interpreter's console scripts, then the inherited ``PATH``."""
    zygote = cli_zygote()
    first = [zygote.shims] if zygote is not None else []
    return os.pathsep.join([*first, str(BIN_DIR), os.environ.get("PATH", "")])


def python_cli() -> str:
    """The interpreter a test starts a program of the plugin with (``python scripts/X.py``,
    ``python -m fairseq_ext.X``): the zygote's ``python`` shim, which serves those and runs
    anything else (``-c``, flags) with this interpreter."""
    zygote = cli_zygote()
    return os.path.join(zygote.shims, "python") if zygote is not None else sys.executable


def run_cli(args, cwd=None, env=None, timeout=600, check=True):
    """Run a command; on failure show its output in the assertion message. fairseq's CLIs and
    the plugin's Python programs it runs, directly or through recipes, fork from
    :func:`cli_zygote`."""
    full_env = dict(os.environ, PATH=search_path())
    if args and str(args[0]) == sys.executable:
        args = [python_cli(), *args[1:]]  # served, or run for real
    full_env.update(env or {})
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(map(str, args))}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def json_log_records(text: str, key: str = "num_updates"):
    """Parse fairseq `--log-format json` lines (any logging prefix) that carry `key`."""
    records = []
    for line in text.splitlines():
        brace = line.find("{")
        if brace < 0:
            continue
        try:
            record = json.loads(line[brace:])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and key in record:
            records.append(record)
    return records


def write_documents(path: Path, n_docs: int, seed: int) -> None:
    """Blank-line separated documents of random sentences over a small vocabulary."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n_docs):
            for _ in range(rng.randint(2, 6)):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30))) + "\n")
            f.write("\n")


@pytest.fixture
def one_thread():
    """torch on one thread for the test (restored after): in-process model computations do not
    depend on threads, and one beats two on a busy 2-core machine, leaving a core to the
    fairseq subprocesses of the other pytest-xdist worker."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_data_bin(tmp_path_factory) -> Path:
    """A word-level fairseq data-bin (train/valid) with document boundaries."""
    root = tmp_path_factory.mktemp("tiny_corpus")
    write_documents(root / "train.txt", 300, seed=0)
    write_documents(root / "valid.txt", 30, seed=1)
    dest = root / "data-bin"
    run_cli([
        fairseq_cli("fairseq-preprocess"), "--only-source",
        "--trainpref", root / "train.txt", "--validpref", root / "valid.txt",
        "--destdir", dest, "--workers", "1",
    ])
    return dest


@pytest.fixture(scope="session")
def spm_data_bin(tmp_path_factory) -> Path:
    """A fairseq data-bin tokenized with a small unigram sentencepiece model, laid out as
    ``scripts/prepare_corpus.sh`` writes one: ``spm.model`` and its ``dict.txt`` (pieces in
    sentencepiece id order) beside train/valid, documents separated by blank lines."""
    import sentencepiece

    from fairseq_ext.corpus.encoders import train_sentencepiece, write_sentencepiece_dictionary

    root = tmp_path_factory.mktemp("spm_corpus")
    dest = root / "data-bin"
    dest.mkdir()
    write_documents(root / "train.txt", 300, seed=0)
    write_documents(root / "valid.txt", 30, seed=1)
    train_sentencepiece(root / "train.txt", dest / "spm.model", vocab_size=300,
                        model_type="unigram", character_coverage=1.0,
                        input_sentence_size=100000, threads=1)
    write_sentencepiece_dictionary(dest / "spm.model", dest / "dict.txt")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(dest / "spm.model"))
    for split in ("train", "valid"):
        lines = (root / f"{split}.txt").read_text().splitlines()
        (root / f"{split}.spm").write_text("".join(
            " ".join(processor.encode(line, out_type=str)) + "\n" for line in lines))
    run_cli([
        fairseq_cli("fairseq-preprocess"), "--only-source", "--srcdict", dest / "dict.txt",
        "--trainpref", root / "train.spm", "--validpref", root / "valid.spm",
        "--destdir", dest, "--workers", "1",
    ])
    return dest


# Tiny-model overrides shared by the shell and hydra runs of the demo recipe.
TINY_UPDATES = 6
TINY_SHELL_ENV = {
    "ARCH": "roberta_tiny", "TOKENS_PER_SAMPLE": "64", "BATCH_SIZE": "8", "MAX_SENTENCES": "8",
    "TOTAL_UPDATES": str(TINY_UPDATES), "WARMUP_UPDATES": "2", "LOG_INTERVAL": "2",
}
TINY_HYDRA_OVERRIDES = [
    "model._name=roberta_tiny", "model.max_positions=64", "task.tokens_per_sample=64",
    "dataset.batch_size=8", f"optimization.max_update={TINY_UPDATES}",
    f"lr_scheduler.total_num_update={TINY_UPDATES}", "lr_scheduler.warmup_updates=2",
    "common.log_interval=2",
]


def train_with_shell_recipe(data: Path, save_dir: Path, extra_env=None, extra_args=()):
    env = dict(TINY_SHELL_ENV, DATA=str(data), SAVE_DIR=str(save_dir), **(extra_env or {}))
    return run_cli(
        [REPO_ROOT / "recipes/roberta/demo.sh", "--log-format", "json", "--no-progress-bar",
         *extra_args],
        env=env,
    )


def train_with_hydra_recipe(data: Path, save_dir: Path, extra_overrides=(),
                            sizes=tuple(TINY_HYDRA_OVERRIDES)):
    """fairseq-hydra-train on the demo YAML; `sizes=()` keeps the demo's own sizes."""
    return run_cli(
        [fairseq_cli("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "recipes/config/roberta",
         "--config-name", "demo", f"task.data={data}", f"checkpoint.save_dir={save_dir}",
         "common.log_format=json", "common.no_progress_bar=true", *sizes,
         *extra_overrides],
        cwd=REPO_ROOT,
    )


@pytest.fixture(scope="session")
def shell_trained(tiny_data_bin, tmp_path_factory):
    """(checkpoint dir, completed process) of the demo recipe run through `fairseq-train`."""
    save_dir = tmp_path_factory.mktemp("ckpt_shell")
    return save_dir, train_with_shell_recipe(tiny_data_bin, save_dir)


@pytest.fixture(scope="session")
def hydra_trained(tiny_data_bin, tmp_path_factory):
    """(checkpoint dir, completed process) of the demo YAML run through `fairseq-hydra-train`."""
    save_dir = tmp_path_factory.mktemp("ckpt_hydra")
    return save_dir, train_with_hydra_recipe(tiny_data_bin, save_dir)


@pytest.fixture
def build_uninitialised(monkeypatch):
    """``build`` without BERT's weight initialisation (a CPU-side normal_ over every weight,
    seconds at large size), for tests that only count parameters."""
    import fairseq.models.roberta.model as roberta_model
    from bert_models import build

    import fairseq_ext.models.bert_rab as bert_rab

    for module in (roberta_model, bert_rab):
        monkeypatch.setattr(module, "init_bert_params", lambda _: None)
    return lambda arch, **kwargs: build(arch, **kwargs)[0]


class CliRuns:
    """fairseq's console scripts run with their stdout and stderr in a log file, one torch
    thread each: through the fork server's shims (:func:`fairseq_cli`, served where it can be),
    or with ``real`` the installed scripts, with the server's socket out of their environment
    (so that nothing they start is served either)."""

    def __init__(self, real: bool = False):
        self.real = real
        self.proc = None

    def _popen(self, cli, args, log):
        env = dict(os.environ, PATH=search_path(), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if self.real:
            from cli_zygote import SOCKET_ENV

            env.pop(SOCKET_ENV, None)
        with open(log, "w") as out:
            return subprocess.Popen([fairseq_cli(cli, real=self.real), *map(str, args)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)

    def run(self, cli: str, args, log: Path, check: bool = True, timeout=600) -> str:
        """Run ``cli`` (``fairseq-train``, ...) with ``args``, its output in ``log``. Returns the
        log's text; raises with its tail when the run fails and ``check``."""
        proc = self._popen(cli, args, log)
        try:
            returncode = proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = Path(log).read_text()
        if check and returncode != 0:
            raise AssertionError(f"{cli} {' '.join(map(str, args))} failed ({returncode}):\n"
                                 f"{output[-6000:]}")
        return output

    def start(self, cli: str, args, log: Path) -> int:
        """Start ``cli`` as :meth:`run` does, without waiting: returns the pid to signal (with
        ``real``, the run's; else the shim's, which passes signals on, and whose kill takes its
        run with it); :meth:`wait` then returns its exit status (negative: killed by that
        signal). One run at a time."""
        self.proc = self._popen(cli, args, log)
        return self.proc.pid

    def wait(self, timeout=600) -> int:
        """The exit status of the run :meth:`start` started, once it has ended."""
        proc, self.proc = self.proc, None
        return proc.wait(timeout=timeout)


@pytest.fixture(scope="session")
def served_cli():
    """fairseq's CLIs with a log file each (:class:`CliRuns`), served by this pytest process's
    fork server where it can (each run a fresh fork: nothing passes between runs or tests)."""
    return CliRuns()


@pytest.fixture(scope="session")
def fresh_cli():
    """fairseq's CLIs with a log file each (:class:`CliRuns`), each a real process: for the
    tests whose point is what a fresh process does (exact resume, kills, determinism)."""
    return CliRuns(real=True)

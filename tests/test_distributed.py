"""Multi-process training, on the CPU with torch.distributed's gloo backend.

* **Two processes equal one with ``--update-freq 2``**, for a tiny model of every family: the
  per-update loss and gradient norm of the json log, and the final weights and Adam state of
  the checkpoints, to fp32 tolerance (they come out bit for bit equal). fairseq 0.12 starts no
  CPU processes itself (it spawns one per CUDA device, and its ``c10d`` / ``pytorch_ddp``
  backend hands torch's ``DistributedDataParallel`` a ``device_ids=[0]`` that torch refuses for
  a CPU module), so each rank is its own ``fairseq-train --distributed-no-spawn
  --distributed-rank R`` meeting the other through a ``file://`` rendezvous, with fairseq's
  ``--ddp-backend legacy_ddp`` (its own all-reduce of the gradients, on torch.distributed).
* **The batches that could leave a parameter without a gradient** (a 3ML batch without
  ``<mask>``: no decoder query; a ``msk_*`` batch whose documents all fell to plain LM: nothing
  to predict) run in those two-process runs (the log shows such updates), and, one by one,
  under torch's ``DistributedDataParallel`` with ``find_unused_parameters=False`` (what fairseq's
  default ``c10d`` backend builds on GPUs): every parameter gets a gradient, so no family needs
  ``--find-unused-parameters`` (docs/scaling.md). A control shows the check fails on a model
  with an unused parameter.
* **Optimizer-state sharding** (``--zero-sharding os``, fairscale's OSS, what the 2.7B and 6.7B
  recipes use): two processes equal one, the consolidated Adam state included.
* **fairseq's fully_sharded backend** (fairscale's FSDP) needs CUDA: on the CPU it stops before
  training (the canary below; docs/scaling.md).
"""
import concurrent.futures

import pytest
import torch
import torch.distributed as dist
from recipe_checks import dry_run

import fairseq_ext  # noqa: F401  (the allow-list: torch.load of fairseq checkpoints)
from conftest import REPO_ROOT, USER_DIR, json_log_records

MLM = ["--task", "masked_lm", "--criterion", "masked_lm_flops", "--batch-size", "4"]
#: One tiny model of each family with its recipe's task and criterion. 3ML-cross masks 1% (some
#: batches hold no <mask>); bidirectional_lm is MskBi with 70% plain-LM documents in one-row
#: batches (some updates have nothing to predict), one document per line (--document-format
#: lines: several documents a row, so the first update has something to predict on some rank).
FAMILIES = {
    "roberta": [*MLM, "--arch", "roberta_tiny"],
    "3ml_self": [*MLM, "--arch", "3ml_self_tiny", "--mask-prob", "0.4"],
    "3ml_cross": [*MLM, "--arch", "3ml_cross_tiny", "--mask-prob", "0.01"],
    "bert_rab": [*MLM, "--arch", "bert_rab_tiny"],
    "swishrnn_bert": [*MLM, "--arch", "swishrnn_bert_tiny"],
    "bidirectional_lm": ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm",
                         "--variant", "msk_bi", "--plain-lm-prob", "0.7", "--max-tokens", "32",
                         "--arch", "bidir_lm_tiny", "--document-format", "lines"],
}
#: The families whose edge case the two-process run must contain: an update whose records lack
#: loss_mask (3ML-cross: no <mask> on either rank; MskBi: nothing predicted, loss "nan").
EDGE_FAMILIES = ("3ml_cross", "bidirectional_lm")

#: No dropout (the ranks' RNG streams differ from the single process's); the recipes' optimizer.
COMMON = ["--user-dir", USER_DIR, "--tokens-per-sample", "32", "--optimizer", "fused_adamw",
          "--adam-betas", "(0.9,0.98)", "--weight-decay", "0.01", "--lr", "1e-3",
          "--dropout", "0", "--attention-dropout", "0", "--seed", "3", "--cpu",
          "--num-workers", "0", "--log-format", "json", "--log-interval", "1",
          "--no-progress-bar", "--disable-validation", "--required-batch-size-multiple", "1",
          "--no-epoch-checkpoints", "--max-update", "4"]


@pytest.fixture(scope="module")
def ranks(served_cli):
    """The runs of rank 0 (and of the one-process reference) and of rank 1: two served runs at
    once (:class:`conftest.CliRuns`)."""
    return served_cli, served_cli


def train_both_ways(ranks, args, tmp_path, ddp_args=()):
    """(records, checkpoint) of one process with --update-freq 2, then of two processes."""
    first, second = ranks
    one = first.run("fairseq-train", [*args, "--update-freq", "2", "--save-dir", tmp_path / "one"],
                    tmp_path / "one.log")

    def rank(server, r):
        return server.run("fairseq-train", [
            *args, "--save-dir", tmp_path / "two", "--distributed-world-size", "2",
            "--distributed-rank", r, "--distributed-no-spawn", "--distributed-backend", "gloo",
            "--distributed-init-method", f"file://{tmp_path / 'rendezvous'}",
            "--ddp-backend", "legacy_ddp", *ddp_args], tmp_path / f"rank{r}.log")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        two = [pool.submit(rank, server, r) for r, server in enumerate(ranks)]
        two = [future.result(timeout=300) for future in two][0]
    return [(records(output), torch.load(tmp_path / name / "checkpoint_last.pt",
                                         map_location="cpu"))
            for output, name in ((one, "one"), (two, "two"))]


def records(output):
    return [r for r in json_log_records(output) if "gnorm" in r]


def assert_same_training(one, two):
    """Same per-update log (rounded to 3 decimals by fairseq) and, to fp32 tolerance, the same
    weights and Adam state after the last update."""
    (log_one, ckpt_one), (log_two, ckpt_two) = one, two
    assert [r["num_updates"] for r in log_one] == [r["num_updates"] for r in log_two] \
        == ["1", "2", "3", "4"]
    for a, b in zip(log_one, log_two):
        for key in ("loss", "gnorm", "wpb", "bsz"):
            assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-3, nan_ok=True), (key, a, b)
    torch.testing.assert_close(ckpt_two["model"], ckpt_one["model"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ckpt_two["last_optimizer_state"]["state"],
                               ckpt_one["last_optimizer_state"]["state"], rtol=1e-5, atol=1e-7)
    # the updates did change the weights: the comparison is not of two fresh models
    assert float(log_one[0]["gnorm"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_two_processes_equal_update_freq_2(family, ranks, tiny_data_bin, tmp_path):
    one, two = train_both_ways(ranks, [tiny_data_bin, *FAMILIES[family], *COMMON], tmp_path)
    assert_same_training(one, two)
    if family in EDGE_FAMILIES:
        with_mask = [r.get("loss_mask") is not None for r in one[0]]
        assert any(with_mask) and not all(with_mask), one[0]


@pytest.mark.slow
def test_optimizer_state_sharding_equals_one_process(ranks, tiny_data_bin, tmp_path):
    """--zero-sharding os: each rank keeps and updates half of Adam's state; the checkpoint
    holds the state consolidated on rank 0, which must equal the single process's."""
    one, two = train_both_ways(ranks, [tiny_data_bin, *FAMILIES["bidirectional_lm"], *COMMON],
                               tmp_path, ddp_args=["--zero-sharding", "os"])
    assert_same_training(one, two)
    assert two[1]["cfg"]["distributed_training"]["zero_sharding"] == "os"


# --- every parameter gets a gradient: torch's DistributedDataParallel, one process ----------

def build(data, family_args):
    """(task, model, criterion, batches) as fairseq-train builds them from ``family_args``."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(
        parser, [str(a) for a in [data, *family_args, *COMMON]]))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    batches = task.get_batch_iterator(
        dataset=task.dataset("train"), max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size, required_batch_size_multiple=1,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        seed=cfg.common.seed).next_epoch_itr(shuffle=True)
    return task, model, criterion, batches


def is_edge(task, batch) -> bool:
    """A batch that may leave parameters out: no <mask> in the input (3ML's decoder gets no
    query; the masked-LM criterion of a batch without targets asks for every position), or
    nothing to predict (bidirectional_lm documents that fell to plain LM under MskBi)."""
    if task.__class__.__name__ == "BidirectionalLMTask":
        return bool(batch["target"].eq(task.source_dictionary.pad()).all())
    return not bool(batch["net_input"]["src_tokens"].eq(task.mask_idx).any())


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def train_under_ddp(model, criterion, batches):
    """Forward and backward of each batch through torch's DDP without unused-parameter
    detection, as fairseq's c10d backend wraps a model (less device_ids: CPU); returns the
    parameters each backward left without a gradient. DDP itself raises at the next forward
    when one did."""
    from fairseq.distributed import ModuleProxyWrapper

    model.train()
    wrapped = ModuleProxyWrapper(torch.nn.parallel.DistributedDataParallel(
        model, find_unused_parameters=False))
    missing = []
    for batch in batches:
        loss, _, _ = criterion(wrapped, batch)
        loss.backward()
        missing.append([name for name, p in model.named_parameters() if p.grad is None])
        model.zero_grad(set_to_none=True)
    return missing


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_gets_a_gradient(family, tiny_data_bin, process_group):
    rare_masks = [] if family == "bidirectional_lm" else ["--mask-prob", "0.01"]
    task, model, criterion, batches = build(tiny_data_bin, [*FAMILIES[family], *rare_masks])
    edge = normal = None
    for batch in batches:
        if is_edge(task, batch):
            edge = edge or batch
        else:
            normal = normal or batch
        if edge and normal:
            break
    assert edge is not None and normal is not None, "no edge batch in the first epoch"
    assert train_under_ddp(model, criterion, [edge, normal, edge, normal]) == [[]] * 4


def test_the_check_catches_an_unused_parameter(tiny_data_bin, process_group):
    task, model, criterion, batches = build(tiny_data_bin, FAMILIES["roberta"])
    model.register_parameter("never_used", torch.nn.Parameter(torch.zeros(3)))
    first, second = next(batches), next(batches)
    with pytest.raises(RuntimeError, match="parameters that were not used in producing loss"):
        train_under_ddp(model, criterion, [first, second])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU: scripts/gpu_suite.sh checks FSDP")
def test_fully_sharded_needs_cuda(process_group):
    """fairseq's --ddp-backend fully_sharded wraps the model as fairseq-train does here; fairscale
    0.4.13's FSDP moves a tensor to CUDA to check the process group (and runs its backward on
    CUDA streams), so on a CPU it stops before any training. When this fails, fairscale runs on
    CPUs: test fully_sharded against one process and update docs/scaling.md."""
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed.fully_sharded_data_parallel import fsdp_enable_wrap, fsdp_wrap

    config = DistributedTrainingConfig(distributed_world_size=1, ddp_backend="fully_sharded")
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        with fsdp_enable_wrap(config):
            fsdp_wrap(torch.nn.Linear(4, 4))


@pytest.mark.parametrize("recipe, env, sharded", [
    ("bidirectional/pretrain.sh", {"SIZE": "6_7b", "NUM_GPUS": "8"}, True),
    ("bidirectional/pretrain.sh", {"SIZE": "2_7b", "NUM_GPUS": "1", "NNODES": "2"}, True),
    ("bidirectional/pretrain.sh", {"SIZE": "6_7b", "NUM_GPUS": "1"}, False),  # nothing to shard
    ("bidirectional/pretrain.sh", {"SIZE": "125m", "NUM_GPUS": "8"}, False),
    ("3ml/pretrain_efficient.sh", {"NUM_GPUS": "8"}, False),
    ("3ml/pretrain_efficient.sh", {"NUM_GPUS": "8", "ZERO_SHARDING": "os"}, True),
])
def test_recipes_shard_the_optimizer_state_of_the_large_models(recipe, env, sharded):
    _, flags = dry_run(REPO_ROOT / "recipes" / recipe, **env)
    assert flags.get("--zero-sharding") == ("os" if sharded else None)


def test_recipes_refuse_an_unknown_sharding():
    import subprocess

    proc = subprocess.run(["bash", str(REPO_ROOT / "recipes/roberta/pretrain.sh")],
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "DATA": "D",
                               "NUM_GPUS": "8", "ZERO_SHARDING": "full"})
    assert proc.returncode == 2 and proc.stderr == (
        "error: ZERO_SHARDING=full: use none or os (optimizer-state sharding)\n")


def test_recipes_name_the_sharding_extra_when_fairscale_is_missing(tmp_path):
    """fairscale is the optional `sharding` extra: a recipe asked to shard without it stops
    before fairseq with the command that installs it."""
    import subprocess

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name, body in (("python", "exit 1"), ("fairseq-train", "echo TRAINING")):
        (fake_bin / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake_bin / name).chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    proc = subprocess.run(["bash", str(REPO_ROOT / "recipes/roberta/pretrain.sh")],
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DATA": str(data), "NUM_GPUS": "8",
                               "FAIRSEQ_BIN": str(fake_bin), "ZERO_SHARDING": "os"})
    assert proc.returncode == 2 and "TRAINING" not in proc.stdout
    assert proc.stderr.splitlines()[-1] == (
        "error: ZERO_SHARDING=os needs fairscale (the optional sharding extra): pip install -r "
        "requirements-sharding.txt -c constraints.txt")

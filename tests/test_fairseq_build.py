"""The fairseq build we install batches every example, runs every sample-break mode and writes
each record to ``--log-file`` once.

Three defects of the Python-3.11 fairseq 0.12.3 builds on the registry (``ve-fairseq``,
``fairseq-fixed``; the third is in fairseq's own code) are checked here; ``make install``
installs ``ve-fairseq`` with the patch series ``patches/series`` applied (README, "Install"):

1. ``data_utils.batch_by_size`` dropped the last batch whenever it held fewer items than
   ``--required-batch-size-multiple``, so ``fairseq-validate`` scored a subset of the validation
   set and training skipped sequences every epoch. fairseq v0.12.2 keeps that batch.
2. numpy 2 removed ``np.compat``, which ``TokenBlockDataset`` used in the ``eos`` break mode.
3. ``progress_bar`` added a ``--log-file`` handler per epoch, so epoch N wrote each record N
   times and held N files open.

The first group guards the install itself, in-process: fairseq's compiled batching and
token-block helpers against pure-Python computations written here from the documented
semantics, and the progress bars of three epochs sharing one log file. The second group runs
the user's commands: ``fairseq-validate`` must log a ``bsz`` equal to the validation set's
size, and ``fairseq-train --sample-break-mode eos`` must train. Patch item 4 (start-up imports)
is checked at the end; items 5 and 6 (atomic checkpoint files, the one-line error for a
truncated checkpoint) in ``tests/test_checkpoint_faults.py``.
"""
import numpy as np
import pytest
import torch

from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli

# --- the install: compiled helpers against pure-Python computations -------------------------


def reference_batches(num_tokens, max_tokens, max_sentences, bsz_mult):
    """Batches of positions 0..n-1 as fairseq's ``batch_by_size`` documents them.

    Greedy, in order: a batch grows while its padded size (items x longest item) stays within
    ``max_tokens`` and its item count within ``max_sentences`` (a limit <= 0 is no limit). When
    the next item does not fit, or the items run out, the batch is cut to the largest multiple
    of ``bsz_mult`` it holds, unless it holds no more than ``bsz_mult`` items; what is cut off
    starts the next batch. So every item is in exactly one batch, and only batches that had to
    stop short of a multiple are smaller than ``bsz_mult``.
    """
    batches, start, n = [], 0, len(num_tokens)
    while start < n:
        end = start + 1  # one item always fits (fairseq asserts item size <= max_tokens)
        while end < n:
            count, longest = end + 1 - start, max(num_tokens[start:end + 1])
            if (max_sentences > 0 and count > max_sentences) or (
                    max_tokens > 0 and count * longest > max_tokens):
                break
            end += 1
        count = end - start
        if count > bsz_mult:
            count -= count % bsz_mult
        batches.append(list(range(start, start + count)))
        start += count
    return batches


BATCHING_CASES = [
    # (items, max_tokens, max_sentences, bsz_mult): the two cases of 10-token items first
    (20, None, 16, 8),
    (2, None, 16, 8),
    (37, None, 5, 1),
    (37, 300, None, 8),
    (100, 512, 16, 8),
    (101, None, 12, 8),
    (64, 1000, 24, 4),
    (7, 60, None, 3),
]


@pytest.mark.parametrize("items,max_tokens,max_sentences,bsz_mult", BATCHING_CASES)
@pytest.mark.parametrize("pass_sizes_as", ["function", "vector"])
def test_batch_by_size_matches_reference_and_keeps_every_item(
        items, max_tokens, max_sentences, bsz_mult, pass_sizes_as):
    from fairseq.data import data_utils

    rng = np.random.RandomState(items)
    sizes = rng.randint(1, 40, size=items).astype(np.int64)
    if (items, max_sentences) in ((20, 16), (2, 16)):
        sizes[:] = 10  # every item has 10 tokens
    order = rng.permutation(items).astype(np.int64)  # fairseq passes shuffled/sorted indices
    size_of = dict(zip(order.tolist(), sizes.tolist()))
    kwargs = dict(max_tokens=max_tokens, max_sentences=max_sentences,
                  required_batch_size_multiple=bsz_mult)
    if pass_sizes_as == "function":
        batches = data_utils.batch_by_size(order, size_of.__getitem__, **kwargs)
    else:
        batches = data_utils.batch_by_size(order, None, num_tokens_vec=sizes, **kwargs)

    got = [list(map(int, b)) for b in batches]
    expected = [[int(order[p]) for p in positions] for positions in reference_batches(
        sizes, max_tokens or -1, max_sentences or -1, bsz_mult)]
    assert got == expected
    assert sum(got, []) == order.tolist(), "every index exactly once, in order"


def test_batch_by_size_random_settings_against_reference():
    """200 random settings: the compiled batching equals the pure-Python one."""
    from fairseq.data.data_utils_fast import batch_by_size_vec

    rng = np.random.RandomState(0)
    for _ in range(200):
        items = int(rng.randint(1, 90))
        sizes = rng.randint(1, 50, size=items).astype(np.int64)
        max_tokens = int(rng.choice([-1, 50, 128, 400]))
        max_sentences = int(rng.choice([-1, 1, 3, 8, 16, 33]))
        bsz_mult = int(rng.choice([1, 2, 3, 8]))
        indices = np.arange(items, dtype=np.int64)
        got = [list(map(int, b)) for b in
               batch_by_size_vec(indices, sizes, max_tokens, max_sentences, bsz_mult)]
        assert got == reference_batches(sizes, max_tokens, max_sentences, bsz_mult), (
            items, max_tokens, max_sentences, bsz_mult)


def reference_blocks(sizes, break_mode, block_size):
    """Token spans [start, end) of a stream of sentences cut as ``TokenBlockDataset`` documents:
    ``none``: fixed blocks of block_size tokens; ``eos``: one block per sentence; ``complete``:
    whole sentences packed up to block_size (a longer sentence alone); ``complete_doc``: the same
    within a document, where an empty sentence (eos only) ends the document and belongs to no
    block, and blocks of a single token are left out."""
    ends = np.cumsum(sizes).tolist()
    starts = [0] + ends[:-1]
    if break_mode == "none":
        return [(s, min(s + block_size, ends[-1])) for s in range(0, ends[-1], block_size)]
    if break_mode == "eos":
        return list(zip(starts, ends))
    blocks, block = [], []  # block: the (start, end) spans of its sentences

    def close():
        if block and (break_mode == "complete" or block[-1][1] - block[0][0] > 1):
            blocks.append((block[0][0], block[-1][1]))
        block.clear()

    for start, end in zip(starts, ends):
        if break_mode == "complete_doc" and end - start == 1:
            close()
            continue
        if block and end - block[0][0] > block_size:
            close()
        block.append((start, end))
    close()
    return blocks


@pytest.mark.parametrize("break_mode", ["none", "eos", "complete", "complete_doc"])
def test_token_blocks_match_reference(break_mode):
    """fairseq's TokenBlockDataset (compiled slicing, numpy index arrays) cuts the stream as the
    pure-Python reference does, in every break mode; the ``eos`` mode used to crash on numpy 2."""
    from fairseq.data import TokenBlockDataset

    rng = np.random.RandomState(1)
    sizes = rng.randint(2, 30, size=60)
    sizes[rng.choice(60, 8, replace=False)] = 1  # document separators (eos only)
    stream = torch.arange(int(sizes.sum()))
    sentences = list(torch.split(stream, sizes.tolist()))
    blocks = TokenBlockDataset(sentences, sizes, block_size=40, pad=0, eos=1,
                               break_mode=break_mode)
    got = [(int(blocks[i][0]), int(blocks[i][-1]) + 1) for i in range(len(blocks))]
    assert got == reference_blocks(sizes, break_mode, 40)
    assert blocks.sizes.tolist() == [end - start for start, end in got]


def test_log_file_gets_each_record_once_across_epochs(tmp_path):
    """fairseq-train makes one progress bar per epoch, each given ``--log-file``; every record
    of epoch N used to be written N times (one file handler per epoch, all kept open)."""
    import logging

    from fairseq.logging import progress_bar

    log_file = tmp_path / "train.log"
    bar_logger = progress_bar.logger
    handlers, level = list(bar_logger.handlers), bar_logger.level
    bar_logger.setLevel(logging.INFO)
    try:
        for epoch in (1, 2, 3):
            bar = progress_bar.progress_bar(iter(()), log_format="json", log_file=str(log_file),
                                            epoch=epoch, prefix=f"epoch {epoch:03d}")
            bar.print({"num_updates": epoch}, tag="train")
        added = [h for h in bar_logger.handlers if h not in handlers]
        assert len(added) == 1
    finally:
        for handler in bar_logger.handlers[:]:
            if handler not in handlers:
                handler.close()
                bar_logger.removeHandler(handler)
        bar_logger.setLevel(level)
    records = json_log_records(log_file.read_text(), key="train_num_updates")
    assert [int(r["epoch"]) for r in records] == [1, 2, 3]


# --- the user's commands: fairseq-validate scores every example once; eos mode trains --------

EOS_TRAIN_UPDATES = 4


@pytest.fixture(scope="module")
def eos_trained_3ml(tiny_data_bin, tmp_path_factory):
    """(checkpoint, output) of ``fairseq-train --sample-break-mode eos`` on a tiny 3ML model."""
    save_dir = tmp_path_factory.mktemp("ckpt_eos_3ml")
    proc = run_cli([
        fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR,
        "--task", "masked_lm", "--sample-break-mode", "eos", "--tokens-per-sample", "64",
        "--arch", "3ml_self_tiny", "--mask-prob", "0.4", "--criterion", "masked_lm_categories",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
        "--max-update", str(EOS_TRAIN_UPDATES), "--log-interval", "1", "--log-format", "json",
        "--no-progress-bar", "--save-dir", save_dir, "--no-epoch-checkpoints", "--cpu",
        "--num-workers", "0", "--seed", "1",
    ])
    return save_dir / "checkpoint_last.pt", proc.stdout + proc.stderr


def test_eos_break_mode_trains(eos_trained_3ml, tiny_data_bin):
    _, output = eos_trained_3ml
    records = json_log_records(output)
    assert [int(r["num_updates"]) for r in records] == list(range(1, EOS_TRAIN_UPDATES + 1))
    assert all(np.isfinite(float(r["loss"])) for r in records)
    # eos mode: one sample per line, so a batch of 8 holds 8 sentences
    assert {float(r["bsz"]) for r in records} == {8.0}


def line_count(data_bin, split):
    """Sentences (lines, blank ones included) in a binarized split: one ``eos`` sample each."""
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(data_bin / split), None)
    return len(dataset)


def validation_set_size(checkpoint, data_bin, overrides):
    """len() of the validation dataset the checkpoint's task builds (no batching involved)."""
    from fairseq import checkpoint_utils, tasks

    import fairseq_ext  # noqa: F401  (checkpoint loading, our archs)

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint), arg_overrides=overrides)["cfg"]
    cfg.task.data = str(data_bin)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid", combine=False, epoch=1)
    return len(task.dataset("valid"))


BATCH_SETTINGS = [
    ["--batch-size", "16", "--required-batch-size-multiple", "8"],
    ["--batch-size", "12", "--required-batch-size-multiple", "8"],
    ["--batch-size", "5", "--required-batch-size-multiple", "1"],
    ["--max-tokens", "300", "--required-batch-size-multiple", "8"],
]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["roberta_masked_lm", "3ml_self_eos"])
@pytest.mark.parametrize("batching", BATCH_SETTINGS, ids=lambda a: "-".join(a[1::2]))
def test_fairseq_validate_scores_every_example_once(model, batching, request, tiny_data_bin):
    if model == "roberta_masked_lm":  # fairseq's roberta + masked_lm, complete mode, 64 tokens
        checkpoint = request.getfixturevalue("shell_trained")[0] / "checkpoint_last.pt"
        criterion, overrides = "masked_lm", {}
    else:  # 3ML + our criterion, eos mode: one example per line, a hand-countable size
        checkpoint = request.getfixturevalue("eos_trained_3ml")[0]
        criterion = "masked_lm_categories"
        overrides = {"sample_break_mode": "eos"}
    expected = validation_set_size(checkpoint, tiny_data_bin, overrides)
    if model == "3ml_self_eos":
        assert expected == line_count(tiny_data_bin, "valid")

    proc = run_cli([
        fairseq_cli("fairseq-validate"), tiny_data_bin, "--user-dir", USER_DIR,
        "--task", "masked_lm", "--criterion", criterion, "--path", checkpoint,
        "--model-overrides", repr(overrides), "--cpu", "--log-format", "json", *batching,
    ])
    (record,) = json_log_records(proc.stdout + proc.stderr, key="valid_loss")
    assert int(float(record["valid_bsz"])) == expected, (
        f"fairseq-validate scored {record['valid_bsz']} of {expected} validation examples")


def test_fairseq_starts_without_scikit_learn_and_scipy_stats():
    """Patch item 4: `import fairseq` (which imports every task and criterion) no longer loads
    scikit-learn and scipy.stats, 1.2 s of every fairseq process's start."""
    import subprocess
    import sys

    code = ("import sys, fairseq.tasks, fairseq.criterions, fairseq.models; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn' "
            "or m.startswith('scipy.stats')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_sentence_prediction_metrics_still_compute():
    """The GLUE metrics whose imports moved into them, against hand computations."""
    from fairseq.criterions import sentence_prediction as sp

    preds, labels = np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1])
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) with TP 2, TN 1, FP 1, FN 0
    assert sp.matthews_corrcoef(preds, labels) == pytest.approx(2 / np.sqrt(3 * 2 * 2 * 1))
    assert sp.acc_and_f1(preds, labels)["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 0))
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 4.0])
    corr = sp.pearson_and_spearman(x, y)
    assert corr["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert corr["spearmanr"] == pytest.approx(0.8)  # ranks differ by one swap: 1 - 6*2/(4*15)

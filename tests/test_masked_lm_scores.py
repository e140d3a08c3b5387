"""Masked-LM scores with error bars (fairseq_ext_lab.evaluation.masked_lm_scores): the training
unigram against hand counts, the per-sequence sums against a one-sequence-at-a-time
reference, and the delta-method errors of a loss and of a paired difference against hand
computations."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import train_with_shell_recipe
from fairseq_ext.reporting.uncertainty import mean_loss, paired_mean_loss_difference
from fairseq_ext_lab.evaluation.masked_lm_scores import (
    SequenceScores,
    Unigram,
    commonest_piece,
    load_for_scoring,
    paired_difference_bits,
    score,
    score_checkpoints,
    spread_indices,
    train_unigram,
)


def test_unigram_is_add_one_smoothed_over_the_targets_and_its_commonest_piece_is_not_special():
    # entries: 0 <s>, 1 <pad>, 2 </s>, 3 <unk>, 4 "a", 5 "b", 6 <mask>
    unigram = Unigram.from_counts([2, 0, 5, 0, 9, 3, 0], never_targets=[1, 6],
                                  specials=[0, 1, 2, 3, 6])
    # smoothed counts 3, -, 6, 1, 10, 4, - over 24
    expected = {0: 3 / 24, 2: 6 / 24, 3: 1 / 24, 4: 10 / 24, 5: 4 / 24}
    for index, probability in expected.items():
        assert unigram.log_probs[index] == pytest.approx(math.log(probability))
    assert unigram.log_probs[1] == -math.inf and unigram.log_probs[6] == -math.inf
    assert unigram.commonest == 4  # "a"; </s> is more frequent in no row but special anyway
    assert unigram.cross_entropy_bits([4, 5]) == pytest.approx(
        -(math.log2(10 / 24) + math.log2(4 / 24)) / 2)


def test_mean_loss_and_its_delta_method_error_by_hand():
    losses, tokens = [2.0, 6.0, 1.0], [1.0, 2.0, 1.0]
    estimate = mean_loss(losses, tokens)
    assert estimate.value == pytest.approx(9.0 / 4.0)
    # residuals l - R n: -0.25, 1.5, -1.25; sum of squares 3.875; D/(D-1) = 1.5
    assert estimate.standard_error == pytest.approx(math.sqrt(1.5 * 3.875) / 4.0)


def test_paired_difference_with_different_positions_by_hand():
    """Two masking rates: the same sequences, other positions (tokens) per sequence."""
    losses_a, tokens_a = [2.0, 6.0, 1.0], [1.0, 2.0, 1.0]     # R_A = 9/4
    losses_b, tokens_b = [3.0, 3.0, 6.0], [2.0, 1.0, 3.0]     # R_B = 12/6 = 2
    estimate = paired_mean_loss_difference(losses_a, tokens_a, losses_b, tokens_b)
    assert estimate.value == pytest.approx(0.25)
    # u_d = (l_A - R_A n_A)/N_A - (l_B - R_B n_B)/N_B
    u = [(-0.25) / 4 - (3 - 4) / 6, 1.5 / 4 - (3 - 2) / 6, (-1.25) / 4 - (6 - 6) / 6]
    assert estimate.standard_error == pytest.approx(math.sqrt(1.5 * sum(x * x for x in u)))


def test_paired_difference_of_a_model_with_itself_shifted_has_no_error():
    """Same positions, B = A + 0.5 nat on every token: the difference is exact."""
    tokens = np.array([3.0, 5.0, 2.0, 4.0])
    losses_a = np.array([7.0, 11.0, 3.0, 9.5])
    estimate = paired_mean_loss_difference(losses_a + 0.5 * tokens, tokens, losses_a, tokens)
    assert estimate.value == pytest.approx(0.5)
    assert estimate.standard_error == pytest.approx(0.0, abs=1e-12)
    # while each model's own error is not zero
    assert mean_loss(losses_a, tokens).standard_error > 0.05


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_data_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("tiny_masked_lm")
    train_with_shell_recipe(tiny_data_bin, save_dir,
                            extra_env={"MASK_PROB": "0.3"},
                            extra_args=["--disable-validation"])
    return save_dir / "checkpoint_last.pt"


def test_train_unigram_counts_the_training_stream_by_hand(tiny_data_bin, tiny_checkpoint):
    model, task = load_for_scoring(tiny_checkpoint, tiny_data_bin, 0.15, seed=1)
    unigram = train_unigram(task)
    dictionary = task.source_dictionary
    lines = (tiny_data_bin.parent / "train.txt").read_text().splitlines()
    words = [word for line in lines for word in line.split()]
    for word in ("the", words[0], words[-1]):
        assert unigram.counts[dictionary.index(word)] == words.count(word)
    assert unigram.counts[dictionary.eos()] == len(lines)  # fairseq ends every line with </s>
    task.load_dataset("train", combine=False, epoch=1)
    assert unigram.counts[dictionary.bos()] == len(task.dataset("train"))  # one <s> per block
    assert unigram.counts[dictionary.pad()] == 0
    commonest = max((w for w in set(words)), key=lambda w: (words.count(w), w))
    assert dictionary[unigram.commonest] == commonest
    assert commonest_piece(tiny_data_bin)[1] == dictionary[unigram.commonest]


def test_scores_sum_per_sequence_as_a_one_at_a_time_reference(tiny_data_bin, tiny_checkpoint):
    """Batched scoring (padding, the masked-token gather) equals scoring each sequence alone
    with the full logits, position by position; <s> is never scored."""
    model, task = load_for_scoring(tiny_checkpoint, tiny_data_bin, 0.3, seed=3)
    unigram = train_unigram(task)
    scores = score(model, task, unigram, batch_size=7)
    dataset = task.dataset("valid")
    dictionary = task.source_dictionary
    mask_idx = dictionary.index("<mask>")
    assert scores.ids.tolist() == list(range(len(dataset)))
    nll = -torch.from_numpy(unigram.log_probs)
    bos_corrupted = 0
    with torch.no_grad():
        for index in range(len(dataset)):
            item = dataset[index]
            source, target = item["net_input.src_tokens"], item["target"]
            logits = model(source.unsqueeze(0))[0][0]
            expected = dict.fromkeys(("mask_loss", "mask_tokens", "mask_unigram_loss",
                                      "corrupted_loss", "corrupted_tokens",
                                      "corrupted_unigram_loss"), 0.0)
            for position in range(len(target)):
                token = int(target[position])
                if token == dictionary.pad():
                    continue
                if token == dictionary.bos():
                    bos_corrupted += 1
                    continue
                loss = float(F.cross_entropy(logits[position], target[position]))
                expected["corrupted_loss"] += loss
                expected["corrupted_tokens"] += 1
                expected["corrupted_unigram_loss"] += float(nll[token])
                if int(source[position]) == mask_idx:
                    expected["mask_loss"] += loss
                    expected["mask_tokens"] += 1
                    expected["mask_unigram_loss"] += float(nll[token])
            for field, value in expected.items():
                assert getattr(scores, field)[index] == pytest.approx(value, rel=1e-4, abs=1e-4)
    assert bos_corrupted > 0  # the exclusion was exercised
    assert scores.mask_tokens.sum() > 0.5 * scores.corrupted_tokens.sum()  # 80% of corrupted


def test_two_checkpoints_are_scored_on_the_same_positions_and_paired(tiny_data_bin,
                                                                     tiny_checkpoint, tmp_path):
    results = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.15)
    a = results[str(tiny_checkpoint)]
    again = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.15)[str(tiny_checkpoint)]
    assert np.array_equal(a.mask_tokens, again.mask_tokens)  # same positions, run to run
    np.testing.assert_allclose(a.mask_loss, again.mask_loss, rtol=1e-6)
    difference = paired_difference_bits(a, again)
    assert difference.value == pytest.approx(0.0, abs=1e-9)
    below = a.below_unigram_bits()
    own, reference = a.loss_bits(), a.loss_bits(unigram=True)
    assert below.value == pytest.approx(reference.value - own.value)
    assert SequenceScores.from_json(a.to_json()).mask_loss.tolist() == a.mask_loss.tolist()
    other = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.4)[str(tiny_checkpoint)]
    assert not np.array_equal(other.mask_tokens, a.mask_tokens)  # another rate, other positions
    paired = paired_difference_bits(other, a)  # paired over sequences only
    assert math.isfinite(paired.standard_error) and paired.standard_error > 0


def test_spread_indices_by_hand():
    assert spread_indices(10, 4).tolist() == [0, 2, 5, 7]  # floor(0, 2.5, 5, 7.5)
    assert spread_indices(3, 3).tolist() == [0, 1, 2]
    assert spread_indices(3, 7).tolist() == [0, 1, 2]
    assert spread_indices(71278, 3000)[-1] == 71254


def test_max_sequences_scores_spread_rows_of_the_whole_split_on_its_positions(tiny_data_bin,
                                                                            tiny_checkpoint):
    """The fixed subset is the whole split's scoring at the spread indices, row for row: the
    same corrupted positions and the same losses."""
    whole = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.3)[str(tiny_checkpoint)]
    spread = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.3,
                               max_sequences=5)[str(tiny_checkpoint)]
    kept = spread_indices(len(whole.ids), 5)
    assert len(whole.ids) > 10 and kept[-1] > len(whole.ids) // 2  # not only the first rows
    assert spread.ids.tolist() == kept.tolist()
    rows = np.searchsorted(whole.ids, kept)
    for field in ("mask_tokens", "corrupted_tokens"):
        assert getattr(spread, field).tolist() == getattr(whole, field)[rows].tolist()
    for field in ("mask_loss", "mask_unigram_loss", "corrupted_loss", "corrupted_unigram_loss"):
        np.testing.assert_allclose(getattr(spread, field), getattr(whole, field)[rows], rtol=1e-6)
    more = score_checkpoints([tiny_checkpoint], tiny_data_bin, 0.3,
                             max_sequences=10 ** 6)[str(tiny_checkpoint)]
    assert more.ids.tolist() == whole.ids.tolist()


def test_a_runs_scoring_passes_its_fixed_subset_to_the_scorer(tiny_data_bin, tiny_checkpoint,
                                                             tmp_path):
    """``score_run(..., max_sequences=N)`` (the demo's scoring, in its own process) scores the
    spread subset at the demo's corruption rate, as the in-process scorer does."""
    from fairseq_ext_lab.recipe_runs import SCORING_MASK_PROB
    from fairseq_ext_lab.recipe_training import score_run

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_last.pt").symlink_to(tiny_checkpoint)
    by_updates = score_run(tiny_data_bin, tmp_path, 10, max_sequences=5)
    assert list(by_updates) == [10]
    expected = score_checkpoints([tiny_checkpoint], tiny_data_bin, SCORING_MASK_PROB,
                                 max_sequences=5)[str(tiny_checkpoint)]
    assert by_updates[10].ids.tolist() == expected.ids.tolist()
    assert by_updates[10].mask_tokens.tolist() == expected.mask_tokens.tolist()
    np.testing.assert_allclose(by_updates[10].mask_loss, expected.mask_loss, rtol=1e-6)


def test_max_sequences_below_one_is_refused(tiny_data_bin, tiny_checkpoint, capsys):
    from fairseq_ext_lab.evaluation import masked_lm_scores

    with pytest.raises(SystemExit) as exit_info:
        masked_lm_scores.main([str(tiny_data_bin), str(tiny_checkpoint), "--max-sequences", "0"])
    assert exit_info.value.code == 2
    assert "--max-sequences 0: give 1 or more" in capsys.readouterr().err


def test_device_cuda_is_refused_where_torch_sees_no_gpu(tiny_data_bin, tiny_checkpoint,
                                                        monkeypatch, capsys):
    """The GPU studies score on --device cuda; without a GPU that is said before any model is
    loaded (the CUDA path itself runs in the GPU suite's study stage)."""
    from fairseq_ext_lab.evaluation import masked_lm_scores

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        masked_lm_scores.main([str(tiny_data_bin), str(tiny_checkpoint), "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err

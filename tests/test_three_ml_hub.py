"""3ML keeps fairseq's RoBERTa contract: the same output shapes as ``roberta`` for
every argument combination ``RobertaModel.forward`` accepts, and fairseq's hub ``fill_mask``
works on a 3ML checkpoint written by ``fairseq-train``."""
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the archs, loads checkpoints)
from conftest import USER_DIR, fairseq_cli, run_cli
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch

ARCHS = ["3ml_self_tiny", "3ml_cross_tiny"]


def right_padded_batch(task, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    pad = task.source_dictionary.pad()
    src = torch.randint(4, task.mask_idx, (len(lengths), max(lengths)), generator=g)
    for row, length in enumerate(lengths):
        src[row, length:] = pad
    src[0, 2] = src[1, 0] = task.mask_idx
    return src


def asked_positions(src, pad, which):
    if which == "none":
        return None
    if which == "gpu_all_true":  # fairseq's criterion on a GPU batch without corrupted tokens
        return torch.where(torch.tensor(False), src.ne(pad), src.new_ones(1, dtype=torch.bool))
    return src.ne(pad) & (torch.arange(src.size(1)) % 3 == 0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("which", ["none", "mask", "gpu_all_true"])
def test_lm_output_shapes_are_robertas(arch, which):
    task = MaskedLmTaskStub(50)
    src = right_padded_batch(task, [9, 6, 4])
    masked_tokens = asked_positions(src, task.source_dictionary.pad(), which)
    outputs = {}
    for name in (arch, "roberta_tiny"):
        torch.manual_seed(0)
        model = build_arch(name, task, 64).eval()
        with torch.no_grad():
            outputs[name] = model(src, masked_tokens=masked_tokens)[0]
    assert outputs[arch].shape == outputs["roberta_tiny"].shape
    assert outputs[arch].dtype == outputs["roberta_tiny"].dtype


@pytest.mark.parametrize("arch", ARCHS)
def test_every_position_call_equals_the_masked_call(arch):
    """``masked_tokens=None`` gives ``(B, T, V)``: at each real position the logits of asking for
    that position alone; zero at padding."""
    task = MaskedLmTaskStub(50)
    pad = task.source_dictionary.pad()
    src = right_padded_batch(task, [9, 6, 4], seed=1)
    model = build_arch(arch, task, 64).eval()
    real = src.ne(pad)
    with torch.no_grad():
        full, _ = model(src)
        asked, _ = model(src, masked_tokens=real)
    assert full.shape == (*src.shape, len(task.source_dictionary))
    torch.testing.assert_close(full[real], asked, rtol=0, atol=0)
    assert bool(full[~real].eq(0).all())


@pytest.mark.parametrize("arch", ARCHS)
def test_features_only_and_all_hiddens_are_robertas(arch):
    task = MaskedLmTaskStub(50)
    src = right_padded_batch(task, [9, 6, 4], seed=2)
    results = {}
    for name in (arch, "roberta_tiny"):
        model = build_arch(name, task, 64).eval()
        with torch.no_grad():
            features, extra = model(src, features_only=True, return_all_hiddens=True)
        results[name] = (features.shape, [h.shape for h in extra["inner_states"]])
    assert results[arch] == results["roberta_tiny"]


class WordLevelBpe:
    """The tiny data-bin is word-level: its 'BPE' is the identity."""

    def encode(self, text):
        return text

    def decode(self, text):
        return " " + text  # a word carries its leading space, as GPT-2's BPE tokens do


@pytest.fixture(scope="module")
def trained_checkpoints(tiny_data_bin, tmp_path_factory):
    """checkpoint_last.pt of a few fairseq-train updates for each arch."""
    checkpoints = {}
    for arch in (*ARCHS, "roberta_tiny"):
        save_dir = tmp_path_factory.mktemp(f"hub_{arch}")
        run_cli([
            fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR,
            "--task", "masked_lm", "--arch", arch, "--criterion", "masked_lm_categories",
            "--tokens-per-sample", "64", "--mask-prob", "0.4", "--optimizer", "adam",
            "--lr", "1e-3", "--batch-size", "8", "--max-update", "3", "--no-progress-bar",
            "--save-dir", save_dir, "--no-epoch-checkpoints", "--cpu", "--num-workers", "0",
        ])
        checkpoints[arch] = save_dir
    return checkpoints


@pytest.mark.slow
@pytest.mark.parametrize("arch", (*ARCHS, "roberta_tiny"))
def test_hub_fill_mask_on_a_checkpoint(trained_checkpoints, tiny_data_bin, arch):
    from fairseq.models.roberta import RobertaModel

    hub = RobertaModel.from_pretrained(str(trained_checkpoints[arch]), "checkpoint_last.pt",
                                       str(tiny_data_bin), bpe=None)
    hub.bpe = WordLevelBpe()
    hub.eval()
    sentence = "the man said that <mask> was good"
    filled = hub.fill_mask(sentence, topk=3)
    # the probabilities are the softmax of the model's logits at the mask, asked directly
    tokens = hub.task.source_dictionary.encode_line(
        "<s> " + sentence + " </s>", append_eos=False, add_if_not_exist=False).long()[None]
    at_mask = tokens.eq(hub.task.mask_idx)
    with torch.no_grad():
        logits, _ = hub.model(tokens, masked_tokens=at_mask)
    values, index = logits[0].softmax(-1).topk(3)
    # fairseq's fill_mask reads the words from Dictionary.string (which drops </s>) and pairs
    # them with the top probabilities in order; the same pairing from the masked call:
    words = hub.task.source_dictionary.string(index).split(" ")
    assert len(filled) == len(words) >= 2
    for (text, prob, word), expected_word, expected_prob in zip(filled, words, values.tolist()):
        assert word == " " + expected_word
        assert prob == pytest.approx(expected_prob, rel=1e-5)
        assert text == sentence.replace(" <mask>", word)

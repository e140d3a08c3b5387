"""Hub directories: ``scripts/export_encoder.py CKPT DIR`` writes ``model.pt``,
``dict.txt`` and the sentencepiece model, and ``RobertaModel.from_pretrained(DIR)`` loads it
with no further argument, offline, with a working ``encode``/``decode``/``fill_mask``; with
``--keep-decoder`` the 3ML model keeps its decoder and ``fill_mask`` runs through it."""
import json
import subprocess
import sys

import pytest
import sentencepiece
import torch

import fairseq_ext  # noqa: F401  (registers the archs, loads checkpoints)
from conftest import REPO_ROOT, USER_DIR, fairseq_cli, run_cli
from fairseq_ext.export import encoder as export_module

HELD_OUT = "the man said that it was good"
MASKED = "the man said that <mask> was good"


def fill_mask_tokens(hub, masked):
    """The token ids fairseq's ``fill_mask`` builds: each text span through the BPE, joined by
    the literal ``<mask>`` symbol."""
    spans = " <mask> ".join(hub.bpe.encode(span.rstrip()) for span in masked.split("<mask>"))
    return hub.task.source_dictionary.encode_line(
        f"<s> {spans.strip()} </s>", append_eos=False, add_if_not_exist=False).long()[None]


def train(data, arch, save_dir, extra=()):
    run_cli([
        fairseq_cli("fairseq-train"), data, "--user-dir", USER_DIR, "--task", "masked_lm",
        "--arch", arch, "--criterion", "masked_lm_categories", "--tokens-per-sample", "64",
        "--mask-prob", "0.4", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
        "--max-update", "3", "--no-progress-bar", "--save-dir", save_dir,
        "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--seed", "3", *extra,
    ])
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def hub_checkpoints(spm_data_bin, tmp_path_factory):
    """checkpoint_last.pt of 3ML-self (decoder dim = encoder dim, so the encoder-only export
    copies the trained MLM head) and of RoBERTa, a few updates each on the spm data-bin."""
    root = tmp_path_factory.mktemp("hub")
    return {
        "3ml": train(spm_data_bin, "3ml_self_tiny", root / "3ml",
                     ["--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "128"]),
        "roberta": train(spm_data_bin, "roberta_tiny", root / "roberta"),
    }


@pytest.fixture(scope="module")
def hub_dirs(hub_checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("hub_dirs")
    dirs = {"encoder": (hub_checkpoints["3ml"], []), "full": (hub_checkpoints["3ml"],
                                                              ["--keep-decoder"]),
            "roberta": (hub_checkpoints["roberta"], [])}
    for name, (checkpoint, flags) in dirs.items():
        assert export_module.main([str(checkpoint), str(root / name), *map(str, flags)]) == 0
    return {name: root / name for name in dirs}


# Runs in a fresh interpreter without fairseq_ext and with every socket refused: what a user
# gets from one line of stock fairseq.
STOCK_HUB = r"""
import json, socket, sys
def refuse(*args, **kwargs):
    raise RuntimeError("network access attempted")
socket.socket.connect = refuse
socket.create_connection = refuse
from fairseq.models.roberta import RobertaModel
hub = RobertaModel.from_pretrained(sys.argv[1]).eval()
tokens = hub.encode(sys.argv[2])
filled = hub.fill_mask(sys.argv[3], topk=3)
print(json.dumps({"tokens": tokens.tolist(), "decoded": hub.decode(tokens), "filled": filled,
                  "plugin": "fairseq_ext" in sys.modules}))
"""


@pytest.mark.parametrize("name", ["encoder", "roberta"])
def test_stock_from_pretrained_loads_offline_with_its_tokenizer(name, hub_dirs, spm_data_bin):
    hub_dir = hub_dirs[name]
    assert sorted(p.name for p in hub_dir.iterdir()) == ["dict.txt", "model.pt",
                                                         "sentencepiece.bpe.model"]
    masked = MASKED
    proc = subprocess.run([sys.executable, "-c", STOCK_HUB, str(hub_dir), HELD_OUT, masked],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["plugin"]

    # encode by hand: <s>, the sentencepiece pieces looked up in dict.txt, </s>
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(str(spm_data_bin / "dict.txt"))
    pieces = sentencepiece.SentencePieceProcessor(
        model_file=str(spm_data_bin / "spm.model")).encode(HELD_OUT, out_type=str)
    expected = [dictionary.bos()] + [dictionary.index(p) for p in pieces] + [dictionary.eos()]
    assert out["tokens"] == expected and dictionary.unk() not in expected
    assert out["decoded"] == HELD_OUT

    # fill_mask: the top-3 words and probabilities of the model's softmax at the mask
    from fairseq.models.roberta import RobertaModel

    hub = RobertaModel.from_pretrained(str(hub_dir)).eval()
    tokens = fill_mask_tokens(hub, masked)
    assert int(tokens.eq(hub.task.mask_idx).sum()) == 1
    assert hub.task.source_dictionary.unk() not in tokens
    with torch.no_grad():
        logits, _ = hub.model(tokens, masked_tokens=tokens.eq(hub.task.mask_idx))
    probs, index = logits[0].softmax(-1).topk(3)
    # fairseq's fill_mask reads the pieces from Dictionary.string (which drops </s>, so an
    # almost untrained model can give fewer than topk) and pairs them with the top
    # probabilities in order; a word-initial piece keeps its space.
    pieces = hub.task.source_dictionary.string(index).split(" ")
    assert len(out["filled"]) == len(pieces) >= 2
    for (text, prob, word), piece, expected_prob in zip(out["filled"], pieces, probs.tolist()):
        expected_word = piece.replace("\u2581", " ").strip()
        if piece.startswith("\u2581"):
            expected_word = " " + expected_word
        assert (word, text) == (expected_word, masked.replace(" <mask>", expected_word))
        assert prob == pytest.approx(expected_prob, rel=1e-5)


def test_keep_decoder_fills_through_the_decoder(hub_dirs, hub_checkpoints):
    """``ThreeMLModel.from_pretrained`` on a ``--keep-decoder`` directory: the same weights as
    the training checkpoint, and fill_mask's probabilities are the 3ML model's at the [MASK]
    (its decoder appended the [MASK] after the encoder), not the encoder-only export's."""
    from fairseq import checkpoint_utils

    from fairseq_ext.models.three_ml import ThreeMLModel

    full = ThreeMLModel.from_pretrained(str(hub_dirs["full"])).eval()
    assert type(full.model).__name__ == "ThreeMLSelfModel"
    trained = checkpoint_utils.load_checkpoint_to_cpu(str(hub_checkpoints["3ml"]))["model"]
    assert full.model.state_dict().keys() == trained.keys()
    for key, value in full.model.state_dict().items():
        assert torch.equal(value, trained[key]), key

    masked = MASKED
    tokens = fill_mask_tokens(full, masked)
    at_mask = tokens.eq(full.task.mask_idx)
    with torch.no_grad():
        logits, _ = full.model(tokens, masked_tokens=at_mask)
    probs = logits[0].softmax(-1)
    filled = full.fill_mask(masked, topk=5)
    top = probs.topk(5).values.tolist()
    assert len(filled) >= 3  # fairseq's fill_mask drops </s> (see the test above)
    assert [p for _, p, _ in filled] == pytest.approx(top[:len(filled)], rel=1e-5)

    from fairseq.models.roberta import RobertaModel

    encoder_only = RobertaModel.from_pretrained(str(hub_dirs["encoder"])).eval()
    with torch.no_grad():
        encoder_logits, _ = encoder_only.model(tokens, masked_tokens=at_mask)
    assert not torch.allclose(encoder_logits, logits, atol=1e-3)


def test_hub_export_errors(hub_checkpoints, hub_dirs, tmp_path, spm_data_bin, capsys):
    checkpoint = hub_checkpoints["3ml"]

    def error_of(*argv):
        assert export_module.main([str(a) for a in argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].startswith("export_encoder.py: error: ")
        return lines[-1]

    # nothing is overwritten without --force; with it the directory is replaced whole
    assert "exists; pass --force" in error_of(checkpoint, hub_dirs["encoder"])
    replaced = tmp_path / "replaced"
    replaced.mkdir()
    (replaced / "stale.txt").write_text("x")
    assert export_module.main([str(checkpoint), str(replaced), "--force"]) == 0
    assert not (replaced / "stale.txt").exists() and (replaced / "model.pt").is_file()

    short_dict = tmp_path / "dict.txt"
    short_dict.write_text("".join((spm_data_bin / "dict.txt").read_text().splitlines(True)[:-5]))
    message = error_of(checkpoint, tmp_path / "a", "--dict", short_dict)
    assert "embedding has" in message and "--dict" in message
    assert "--sentencepiece-model" in error_of(checkpoint, tmp_path / "b",
                                               "--sentencepiece-model", tmp_path / "no.model")
    assert "has no decoder" in error_of(hub_checkpoints["roberta"], tmp_path / "c",
                                        "--keep-decoder")
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary left

    with pytest.raises(SystemExit):
        export_module.main([str(checkpoint), str(tmp_path / "x.pt"), "--keep-decoder"])
    assert "for a hub directory" in capsys.readouterr().err


# --- fill-mask on held-out text: decoder kept against encoder only ------------------------------

def test_mask_positions_by_hand():
    from fairseq_ext_lab.evaluation.fill_mask import mask_positions

    blocks = [torch.tensor([0] + [7] * 998 + [2]), torch.tensor([0, 9, 2]), torch.tensor([0, 2])]
    masks = mask_positions(blocks, (0, 1, 2), mask_prob=0.15, seed=4)
    again = mask_positions(blocks, (0, 1, 2), mask_prob=0.15, seed=4)  # the same for all models
    assert all(torch.equal(a, b) for a, b in zip(masks, again))
    assert not torch.equal(masks[0], mask_positions(blocks, (0, 1, 2), 0.15, seed=5)[0])
    assert not masks[0][[0, -1]].any() and 110 < int(masks[0].sum()) < 190  # 15% of 998
    assert masks[1].tolist() == [False, True, False]  # at least one per block
    assert not masks[2].any()  # nothing but specials


def test_fill_mask_scores_batched_equal_one_block_at_a_time(hub_dirs, spm_data_bin):
    from fairseq_ext_lab.evaluation import fill_mask

    hub = fill_mask.load_hub(hub_dirs["full"])
    dictionary = hub.task.source_dictionary
    blocks = fill_mask.held_out_blocks(spm_data_bin, "valid", dictionary, 64)[:12]
    assert all(b[0] == dictionary.bos() and len(b) <= 64 for b in blocks)
    masks = fill_mask.mask_positions(blocks, (0, 1, 2), 0.15, seed=1)
    batched = fill_mask.score(hub.model, hub.task.mask_idx, dictionary.pad(), blocks, masks, 5)
    one_by_one = fill_mask.FillMaskScore()
    for block, mask in zip(blocks, masks):  # by hand: the model's logits at the masked positions
        with torch.no_grad():
            logits, _ = hub.model(block.masked_fill(mask, hub.task.mask_idx)[None],
                                  masked_tokens=mask[None])
        one_by_one.masked_tokens += int(mask.sum())
        one_by_one.correct += int(logits.argmax(-1).eq(block[mask]).sum())
        one_by_one.nll_nats -= float(logits.log_softmax(-1).gather(
            1, block[mask][:, None]).sum())
    assert (batched.masked_tokens, batched.correct) == (one_by_one.masked_tokens,
                                                        one_by_one.correct)
    assert batched.nll_nats == pytest.approx(one_by_one.nll_nats, rel=1e-5)


def test_compare_fill_mask_command(hub_dirs, spm_data_bin, tmp_path):
    script = REPO_ROOT / "scripts/compare_fill_mask.py"
    proc = run_cli([sys.executable, script, "--data", spm_data_bin, "--tokens-per-sample", "64",
                    hub_dirs["full"], hub_dirs["encoder"]])
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[2].strip() for row in rows] == ["3ML, decoder kept", "encoder only"]
    assert len({row.split("|")[3] for row in rows}) == 1  # the same masked tokens for both
    other = tmp_path / "other"
    other.mkdir()
    for name in ("model.pt", "sentencepiece.bpe.model"):
        (other / name).symlink_to(hub_dirs["encoder"] / name)
    lines = (hub_dirs["encoder"] / "dict.txt").read_text().splitlines(True)
    (other / "dict.txt").write_text("".join([lines[1], lines[0], *lines[2:]]))
    proc = run_cli([sys.executable, script, "--data", spm_data_bin, other], check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"compare_fill_mask.py: error: {other}/dict.txt differs from {spm_data_bin}/dict.txt: "
        "the model was trained on another data-bin")


@pytest.mark.parametrize("name", ["full", "roberta"])
def test_top_guesses_keep_every_piece_with_its_own_probability(name, hub_dirs):
    """``top_guesses``: fairseq's ``fill_mask`` tokens and softmax, each of the top pieces
    paired with its own probability, ``<s>`` and ``</s>`` included (``fill_mask`` drops them
    and shifts the words after them onto the probabilities before them)."""
    from fairseq_ext_lab.evaluation import fill_mask

    hub = fill_mask.load_hub(hub_dirs[name])
    tokens = fill_mask_tokens(hub, MASKED)
    with torch.no_grad():
        logits, _ = hub.model(tokens, masked_tokens=tokens.eq(hub.task.mask_idx))
    probs, index = logits[0].softmax(-1).topk(8)
    dictionary = hub.task.source_dictionary
    guesses = fill_mask.top_guesses(hub, MASKED, topk=8)
    assert [word for word, _ in guesses] == [
        dictionary[i].replace("\u2581", "").strip() or dictionary[i] for i in index.tolist()]
    assert [p for _, p in guesses] == pytest.approx(probs.tolist(), rel=1e-5)
    # where fairseq's fill_mask keeps the words it has, it agrees (up to its leading space)
    filled = hub.fill_mask(MASKED, topk=8)
    kept = [word for word, _ in guesses if word not in ("<s>", "</s>")]
    assert [word.strip() for _, _, word in filled] == kept[:len(filled)]
    with pytest.raises(fill_mask.FillMaskError, match="exactly one blank"):
        fill_mask.top_guesses(hub, "no blank here")


def test_unigram_guesses_are_the_commonest_training_pieces(spm_data_bin):
    """The unigram's guesses: the training split's commonest non-special pieces with their
    shares, counted here from the encoded text by hand, ties broken by dictionary id."""
    import collections

    from fairseq_ext_lab.evaluation import fill_mask

    encoded = (spm_data_bin.parent / "train.spm").read_text().split()
    counts = collections.Counter(encoded)
    total = sum(counts.values())
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(str(spm_data_bin / "dict.txt"))  # ties: the lower id first
    top = sorted(counts.items(), key=lambda item: (-item[1], dictionary.index(item[0])))[:4]
    guesses = fill_mask.unigram_guesses(spm_data_bin, topk=4)
    assert [p for _, p in guesses] == pytest.approx([n / total for _, n in top])
    assert [word for word, _ in guesses] == [fill_mask.piece_word(piece) for piece, _ in top]
    assert fill_mask.piece_word("\u2581the") == "the" and fill_mask.piece_word("</s>") == "</s>"

"""scripts/export_hf.py / fairseq_ext.export.huggingface: fairseq checkpoints to Hugging Face
``transformers`` directories.

Everything is built here, in this process: a small sentencepiece model trained on this module's
own text, a ``dict.txt`` over its pieces in an order that is *not* sentencepiece's (and padded
with ``madeupword``s, as fairseq-preprocess writes a counted dictionary), and tiny models of each
kind, built as ``fairseq-train`` builds them and with every parameter (LayerNorms and biases
included) moved off its initial value, saved with the config ``fairseq-train`` saves. The
exports are loaded back with ``AutoModel*`` / ``AutoTokenizer.from_pretrained`` (offline) and
compared with fairseq: the ids of ``RobertaHubInterface.encode`` (or of fairseq-preprocess's
binarizer, for the causal LM) on held-out text, and the logits to 1e-4.
"""
import json
import random
import socket
from pathlib import Path

import pytest
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

import fairseq_ext
from conftest import REPO_ROOT, WORDS, run_cli
from fairseq_ext.export import encoder as export_encoder
from fairseq_ext.export import huggingface as hf_export

transformers = pytest.importorskip("transformers")  # a guard only: make test installs the extra
sentencepiece = pytest.importorskip("sentencepiece")

TOKENS = 48
#: Text the sentencepiece model never saw: new words, capitals, digits, accents, NFKC-folded
#: forms (ligature, full-width), characters outside its vocabulary, and odd spacing.
HELD_OUT = [
    "the zebra quietly said that it was good.",
    "  Leading, trailing   and   repeated   spaces  ",
    "tabs\tand\nnewlines between words",
    "café naïve ﬁne ＦＵＬＬ width １２３",
    "emoji 😀😀 and 漢字 are unknown characters",
    "Numbers: 3.14159, 2026 and -42!",
    "x",
]
PAIR = ("the first sentence", "and the second one")


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def training_text(path: Path) -> None:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
             + rng.choice([".", ",", "!", "?", ""]) for _ in range(400)]
    lines += ["Numbers 123 456, café naïve résumé.", "(parentheses) [brackets] -- dashes: yes"]
    path.write_text("\n".join(lines) + "\n")


def shuffled_dictionary(model_file: Path, seed: int = 1, drop=()) -> Dictionary:
    """The pieces of the sentencepiece model in a shuffled order (as a counted dictionary
    orders them by frequency), without ``drop``, padded to a multiple of 8 with madeupwords."""
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
              if not (processor.is_control(i) or processor.is_unknown(i))]
    random.Random(seed).shuffle(pieces)
    dictionary = Dictionary()
    for piece in pieces:
        if piece not in drop:
            dictionary.add_symbol(piece)
    dictionary.pad_to_multiple_(8)
    return dictionary


def write_checkpoint(data: Path, task: str, flags, path: Path, seed: int) -> Path:
    """A checkpoint of ``fairseq-train DATA --task TASK FLAGS``: the model built as fairseq-train
    builds it, every parameter then moved by N(0, 0.1) noise (LayerNorm weights and biases and
    the zero-initialised head bias would otherwise hide mapping mistakes)."""
    parser = options.get_training_parser(default_task=task)
    args = options.parse_args_and_arch(parser, input_args=[
        str(data), "--task", task, "--user-dir", fairseq_ext.__path__[0],
        "--tokens-per-sample", str(TOKENS), "--seed", "1", *flags])
    cfg = convert_namespace_to_omegaconf(args)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    torch.save({"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                "model": model.state_dict(), "extra_state": {"train_iterator": {"epoch": 1}},
                "optimizer_history": [{"criterion_name": "x", "optimizer_name": "y",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 0}]},
               path)
    return path


MASKED_LM = ["--criterion", "masked_lm"]
CAUSAL = ["--criterion", "bidirectional_lm", "--arch", "bidir_lm_tiny"]
#: name -> (task, flags)
CHECKPOINTS = {
    "3ml_self": ("masked_lm", MASKED_LM + ["--arch", "3ml_self_tiny"]),  # post-LN
    "3ml_pre_ln": ("masked_lm", MASKED_LM + ["--arch", "3ml_cross_tiny",
                                             "--normalization", "pre-ln"]),
    "roberta_pre_ln": ("masked_lm", MASKED_LM + ["--arch", "roberta_tiny",
                                                 "--encoder-normalize-before"]),
    "nxt_uni": ("bidirectional_lm", CAUSAL + ["--variant", "nxt_uni"]),
    "nxt_pre": ("bidirectional_lm", CAUSAL + ["--variant", "nxt_pre"]),
    "msk_bi": ("bidirectional_lm", CAUSAL + ["--variant", "msk_bi"]),
    "hyb_uni": ("bidirectional_lm", CAUSAL + ["--variant", "hyb_uni"]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``data`` (dict.txt and spm.model, as scripts/prepare_corpus.sh lays a data-bin out) and
    name -> checkpoint; ``hub`` and ``pre_ln_hub`` are the hub directories
    scripts/export_encoder.py writes for the post-LN and the pre-LN 3ML model."""
    root = tmp_path_factory.mktemp("hf_export")
    data = root / "data"
    data.mkdir()
    training_text(root / "train.txt")
    sentencepiece.SentencePieceTrainer.train(
        input=str(root / "train.txt"), model_prefix=str(data / "spm"), vocab_size=200,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        num_threads=1)
    shuffled_dictionary(data / "spm.model").save(str(data / "dict.txt"))
    checkpoints = {name: write_checkpoint(data, task, flags, root / f"{name}.pt", seed)
                   for seed, (name, (task, flags)) in enumerate(CHECKPOINTS.items())}
    hubs = {"hub": root / "hub", "pre_ln_hub": root / "pre_ln_hub"}
    for hub, name in (("hub", "3ml_self"), ("pre_ln_hub", "3ml_pre_ln")):
        assert export_encoder.main([str(checkpoints[name]), str(hubs[hub])]) == 0
    return {"root": root, "data": data, "checkpoints": checkpoints, **hubs}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No network: the exports must load from their directories alone."""
    def refuse(*args, **kwargs):
        raise RuntimeError("network access attempted")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def fairseq_model(checkpoint: Path, data: Path):
    from fairseq import checkpoint_utils

    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)})
    return model.eval(), task.source_dictionary


def padded(rows, pad: int, left: bool = False) -> torch.Tensor:
    """Lists of ids as one batch, right- (or left-) padded as fairseq collates it."""
    return data_utils.collate_tokens([torch.tensor(row) for row in rows], pad, left_pad=left)


def max_logit_diff(ours, hf_model, batch, pad):
    mask = batch.ne(pad)
    with torch.no_grad():
        theirs = hf_model(input_ids=batch, attention_mask=mask.long()).logits
        mine = ours(batch)[0]
    assert mine.shape == theirs.shape
    return float((mine[mask] - theirs[mask]).abs().max())


def test_3ml_hub_directory_to_roberta_for_masked_lm(built, tmp_path):
    """The 3ML -> export_encoder hub directory -> RobertaForMaskedLM chain: AutoTokenizer gives
    RobertaHubInterface.encode's ids on held-out text (single and pair), and AutoModelForMaskedLM
    fairseq's logits."""
    from fairseq.models.roberta import RobertaModel
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "hf"
    assert hf_export.main([str(built["hub"]), str(out)]) == 0
    info = json.loads((out / hf_export.EXPORT_INFO).read_text())
    assert info["transformers_class"] == "RobertaForMaskedLM"
    assert info["max_abs_logit_diff"] < 1e-4 and info["missing_pieces"] == []

    hub = RobertaModel.from_pretrained(str(built["hub"])).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    assert type(model).__name__ == "RobertaForMaskedLM"
    dictionary = hub.task.source_dictionary
    assert tokenizer.convert_ids_to_tokens(list(range(len(dictionary)))) == dictionary.symbols
    assert dictionary.symbols.index("▁the") != sentencepiece.SentencePieceProcessor(
        model_file=str(built["data"] / "spm.model")).piece_to_id("▁the") + 1  # not spm order

    expected = [hub.encode(text).tolist() for text in HELD_OUT]
    assert [tokenizer(text)["input_ids"] for text in HELD_OUT] == expected
    assert any(dictionary.unk() in ids for ids in expected)  # the unknown characters
    assert tokenizer(*PAIR)["input_ids"] == hub.encode(*PAIR).tolist()
    # <mask> as fairseq's fill_mask reads it: the span before it right-stripped
    spans = " <mask> ".join(hub.bpe.encode(span.rstrip())
                            for span in "the man said <mask>, it was good".split("<mask>"))
    assert tokenizer("the man said <mask>, it was good")["input_ids"] == \
        dictionary.encode_line(f"<s> {spans} </s>", append_eos=False,
                               add_if_not_exist=False).tolist()

    batch = padded(expected, dictionary.pad())
    assert max_logit_diff(hub.model, model, batch, dictionary.pad()) < 1e-4
    # the comparison can fail: a changed weight shows
    with torch.no_grad():
        model.roberta.encoder.layer[0].attention.self.query.weight[0, 0] += 0.1
    assert max_logit_diff(hub.model, model, batch, dictionary.pad()) > 1e-3


def test_pre_ln_roberta_to_roberta_prelayernorm(built, tmp_path):
    """A pre-LN RoBERTa with an embedding LayerNorm, from a checkpoint file (dict.txt and
    spm.model found in its cfg.task.data), maps onto RobertaPreLayerNormForMaskedLM."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "hf"
    checkpoint = built["checkpoints"]["roberta_pre_ln"]
    assert hf_export.main([str(checkpoint), str(out)]) == 0
    model = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    assert type(model).__name__ == "RobertaPreLayerNormForMaskedLM"
    ours, dictionary = fairseq_model(checkpoint, built["data"])
    ids = AutoTokenizer.from_pretrained(str(out))(HELD_OUT)["input_ids"]
    assert max_logit_diff(ours, model, padded(ids, dictionary.pad()), dictionary.pad()) < 1e-4


def test_pre_ln_3ml_hub_directory_to_xlm_roberta_xl(built, tmp_path):
    """3ML --normalization pre-ln (pre-LN on the raw embeddings, a final LayerNorm) -> its
    export_encoder hub directory -> XLMRobertaXLForMaskedLM: fairseq's logits with right and left
    padding, and a changed weight of the layout only this class has shows."""
    from fairseq.models.roberta import RobertaModel
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "hf"
    assert hf_export.main([str(built["pre_ln_hub"]), str(out)]) == 0
    model = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    assert type(model).__name__ == "XLMRobertaXLForMaskedLM"
    hub = RobertaModel.from_pretrained(str(built["pre_ln_hub"])).eval()
    encoder = hub.model.encoder.sentence_encoder
    assert encoder.layernorm_embedding is None and encoder.layer_norm is not None
    expected = [hub.encode(text).tolist() for text in HELD_OUT]
    assert AutoTokenizer.from_pretrained(str(out))(HELD_OUT)["input_ids"] == expected
    pad = hub.task.source_dictionary.pad()
    for left in (False, True):
        assert max_logit_diff(hub.model, model, padded(expected, pad, left=left), pad) < 1e-4
    with torch.no_grad():
        model.roberta.encoder.layer[0].attention.self_attn_layer_norm.weight[0] += 0.1
    assert max_logit_diff(hub.model, model, padded(expected, pad), pad) > 1e-3


def test_nxt_uni_to_opt_for_causal_lm(built, tmp_path):
    """NxtUni -> OPTForCausalLM: the tokenizer gives fairseq-preprocess's ids (pieces, </s>),
    and the logits equal fairseq's with right and with left padding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "hf"
    checkpoint = built["checkpoints"]["nxt_uni"]
    assert hf_export.main([str(checkpoint), str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert type(model).__name__ == "OPTForCausalLM"
    assert not model.config.tie_word_embeddings  # fairseq scales the input embedding by sqrt(d)
    ours, dictionary = fairseq_model(checkpoint, built["data"])
    processor = sentencepiece.SentencePieceProcessor(model_file=str(built["data"] / "spm.model"))
    expected = [dictionary.encode_line(" ".join(processor.encode(text, out_type=str)),
                                       append_eos=True, add_if_not_exist=False).tolist()
                for text in HELD_OUT]
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert [tokenizer(text)["input_ids"] for text in HELD_OUT] == expected
    for left in (False, True):
        batch = padded(expected, dictionary.pad(), left=left)
        assert max_logit_diff(ours, model, batch, dictionary.pad()) < 1e-4


REFUSALS = {
    "3ml_raw": (lambda b: b["checkpoints"]["3ml_self"], "export its encoder first"),
    "nxt_pre": (lambda b: b["checkpoints"]["nxt_pre"], "a bidirectional prefix"),
    "msk_bi": (lambda b: b["checkpoints"]["msk_bi"], "a bidirectional prefix (tokens j < n_bidir"
               " are attended from every position) and masked tokens moved to the end"),
    "hyb_uni": (lambda b: b["checkpoints"]["hyb_uni"], "trains masked tokens moved to the end of "
                "the document with their original positions"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_refuses_what_no_stock_class_computes(name, built, tmp_path, capsys):
    source, reason = REFUSALS[name]
    out = tmp_path / "hf"
    assert hf_export.main([str(source(built)), str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("export_hf.py: error: ") and "\n" not in err
    assert reason in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_refuses_r_bidir_and_a_wrong_dictionary(built, tmp_path, capsys):
    state = torch.load(built["checkpoints"]["nxt_uni"], weights_only=False)
    state["cfg"]["model"].r_bidir = 0.5  # fine-tuned with --r-bidir 0.5 (fairseq-train's Namespace)
    torch.save(state, tmp_path / "r_bidir.pt")
    assert hf_export.main([str(tmp_path / "r_bidir.pt"), str(tmp_path / "a")]) == 2
    assert "fine-tuned with --r-bidir 0.5" in capsys.readouterr().err

    small = Dictionary()
    small.add_symbol("▁the")
    small.save(str(tmp_path / "small.txt"))
    assert hf_export.main([str(built["hub"]), str(tmp_path / "b"), "--dict",
                           str(tmp_path / "small.txt")]) == 2
    assert "not the dictionary it was trained with (give the right one with --dict)" in (
        capsys.readouterr().err)
    assert hf_export.main([str(built["hub"]), str(tmp_path / "c"), "--sentencepiece-model",
                           str(tmp_path / "none.model")]) == 2
    assert "--sentencepiece-model" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r_bidir.pt", "small.txt"]


def test_force_and_atomic_replacement(built, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert hf_export.main([str(built["hub"]), str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert hf_export.main([str(built["hub"]), str(out), "--force"]) == 0
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors",
                                               "tokenizer.json", hf_export.EXPORT_INFO}
    assert not (out / "mine.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no temporary directory left


def test_pieces_the_dictionary_lacks_are_reported(built):
    """A piece of the sentencepiece model that dict.txt lacks is <unk> in fairseq; the HF
    vocabulary cannot map it to <unk>, leaves it out, and the export lists it."""
    spm_model = built["data"] / "spm.model"
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    dropped = "▁the"
    dictionary = shuffled_dictionary(spm_model, drop={dropped})
    dictionary.add_symbol("<mask>")
    tokenizer, notes = hf_export.build_tokenizer(dictionary, spm_model, "roberta", TOKENS)
    assert notes["missing_pieces"] == [dropped]
    text = "the man"
    fairseq_ids = dictionary.encode_line(" ".join(processor.encode(text, out_type=str)),
                                         append_eos=False, add_if_not_exist=False).tolist()
    assert fairseq_ids[0] == dictionary.unk()
    hf_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert dictionary.unk() not in hf_ids and hf_ids[-1] == fairseq_ids[-1]  # ▁man


@pytest.mark.slow
def test_script_is_a_thin_command(built, tmp_path):
    """scripts/export_hf.py runs hf_export.main: one-line errors, exit status 2, nothing loaded
    when OUTPUT exists (the conversion itself is tested through main() above)."""
    (tmp_path / "hf").mkdir()
    proc = run_cli([REPO_ROOT / "scripts/export_hf.py", built["hub"], tmp_path / "hf"],
                   check=False)
    assert proc.returncode == 2
    # the last line: with the sharding extra installed, importing fairseq first prints
    # fairscale's FutureWarnings
    assert proc.stderr.strip().splitlines()[-1] == (
        f"export_hf.py: error: {tmp_path / 'hf'} exists; pass --force to overwrite it")


def test_bpe_sentencepiece_tokenizer(built, tmp_path):
    """A BPE-type sentencepiece model (prepare_corpus.sh --spm-model-type bpe) converts too: its
    merges in sentencepiece's order, its vocabulary in the dictionary's."""
    sentencepiece.SentencePieceTrainer.train(
        input=str(built["root"] / "train.txt"), model_prefix=str(tmp_path / "bpe"),
        vocab_size=200, model_type="bpe", character_coverage=1.0, hard_vocab_limit=False,
        minloglevel=2, num_threads=1)
    spm_model = tmp_path / "bpe.model"
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    dictionary = shuffled_dictionary(spm_model)
    dictionary.add_symbol("<mask>")
    tokenizer, notes = hf_export.build_tokenizer(dictionary, spm_model, "roberta", TOKENS)
    assert notes == {"sentencepiece_type": "bpe", "missing_pieces": []}
    for text in HELD_OUT:
        pieces = " ".join(processor.encode(text, out_type=str))
        assert tokenizer(text)["input_ids"] == dictionary.encode_line(
            f"<s> {pieces} </s>", append_eos=False, add_if_not_exist=False).tolist(), text

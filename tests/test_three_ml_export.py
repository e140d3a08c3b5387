"""fairseq_ext.export.encoder / scripts/export_encoder.py (3ML -> plain fairseq RoBERTa) and the GLUE
fine-tuning recipes.

Tiny 3ML models are pre-trained with the real CLIs (fairseq-train, and fairseq-hydra-train for
the dict-config case), exported, loaded back as fairseq's own RobertaModel, compared with the 3ML
encoder, and fine-tuned with recipes/3ml/finetune_glue.sh on a small two-class data-bin.
"""
import argparse
import json
import math
import random
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fairseq import checkpoint_utils, utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.models.roberta import RobertaModel
from omegaconf import OmegaConf
from recipe_checks import flag_values

import fairseq_ext  # noqa: F401  (3ML archs; argparse.Namespace allowed by torch.load)
from conftest import (
    REPO_ROOT,
    USER_DIR,
    WORDS,
    fairseq_cli,
    json_log_records,
    run_cli,
    train_with_hydra_recipe,
)
from fairseq_ext.export import encoder as export_encoder
from fairseq_ext.models.three_ml import ThreeMLModel

SCRIPT = REPO_ROOT / "scripts/export_encoder.py"
FINETUNE = REPO_ROOT / "recipes/3ml/finetune_glue.sh"
GRID = REPO_ROOT / "recipes/3ml/finetune_glue_grid.sh"
TOKENS = 64

# name -> (trainer, arch, extra flags, encoder pre-LN?, MLM head dense copied?)
PRETRAIN_RUNS = {
    "self": ("fairseq-train", "3ml_self_tiny", [], False, False),
    "cross": ("fairseq-train", "3ml_cross_tiny", [], True, False),
    # decoder dim == encoder dim: the head's dense is (64 x 64) and is copied
    "self_pre_ln_wide": ("fairseq-train", "3ml_self_tiny",
                         ["--normalization", "pre-ln", "--decoder-embed-dim", "64",
                          "--decoder-attention-heads", "2"], True, True),
    # cfg.model is a dict (fairseq-hydra-train), not an argparse.Namespace
    "cross_hydra": ("fairseq-hydra-train", "3ml_cross_tiny", [], True, False),
}


def pretrain(name, data, save_dir):
    trainer, arch, extra, _, _ = PRETRAIN_RUNS[name]
    if trainer == "fairseq-hydra-train":
        train_with_hydra_recipe(data, save_dir, sizes=[
            f"model._name={arch}", f"model.max_positions={TOKENS}",
            f"task.tokens_per_sample={TOKENS}", "dataset.batch_size=8",
            "optimization.max_update=3", "lr_scheduler.total_num_update=3",
            "lr_scheduler.warmup_updates=1", "dataset.disable_validation=true",
            "dataset.num_workers=0"])
    else:
        run_cli([
            fairseq_cli("fairseq-train"), data, "--user-dir", USER_DIR, "--cpu",
            "--task", "masked_lm", "--criterion", "masked_lm_categories", "--arch", arch, *extra,
            "--tokens-per-sample", TOKENS, "--max-positions", TOKENS, "--mask-prob", "0.4",
            "--batch-size", "8", "--optimizer", "adam", "--lr", "1e-3",
            "--lr-scheduler", "polynomial_decay", "--warmup-updates", "1",
            "--total-num-update", "3", "--max-update", "3", "--disable-validation",
            "--save-dir", save_dir, "--no-epoch-checkpoints", "--num-workers", "0",
            "--log-format", "json", "--no-progress-bar", "--seed", "1",
        ], env={"OMP_NUM_THREADS": "1"})
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def pretrained(tiny_data_bin, tmp_path_factory):
    """name -> 3ML checkpoint; the runs are independent, so they run side by side."""
    root = tmp_path_factory.mktemp("three_ml_pretrain")
    with ThreadPoolExecutor(max_workers=len(PRETRAIN_RUNS)) as pool:
        futures = {name: pool.submit(pretrain, name, tiny_data_bin, root / name)
                   for name in PRETRAIN_RUNS}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def exported(pretrained, tmp_path_factory):
    """name -> exported RoBERTa checkpoint (the script's main(), in this process)."""
    root = tmp_path_factory.mktemp("three_ml_export")
    out = {}
    for name, checkpoint in pretrained.items():
        out[name] = root / f"{name}.pt"
        assert export_encoder.main([str(checkpoint), str(out[name])]) == 0
    return out


def load(path, data):
    [model], cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(path)], arg_overrides={"data": str(data)})
    return model.eval(), cfg, task


def unmasked_batch(dictionary, generator):
    """<s> w ... </s> rows of different lengths, right-padded, no <mask>."""
    lengths = [TOKENS, 37, 9]
    words = torch.randint(dictionary.nspecial, dictionary.index("<mask>"), (len(lengths), TOKENS),
                          generator=generator)
    src = torch.full((len(lengths), TOKENS), dictionary.pad())
    for row, length in enumerate(lengths):
        src[row, :length] = words[row, :length]
        src[row, 0], src[row, length - 1] = dictionary.bos(), dictionary.eos()
    return src


@pytest.mark.parametrize("name", PRETRAIN_RUNS)
def test_export_computes_what_the_3ml_encoder_computed(name, pretrained, exported, tiny_data_bin):
    three_ml, _, task = load(pretrained[name], tiny_data_bin)
    roberta, _, _ = load(exported[name], tiny_data_bin)
    assert isinstance(three_ml, ThreeMLModel)
    assert type(roberta) is RobertaModel and roberta.encoder.lm_head is not None
    dictionary = task.source_dictionary
    src = unmasked_batch(dictionary, torch.Generator().manual_seed(0))
    pad = dictionary.pad()
    with torch.no_grad():
        features = roberta(src, features_only=True)[0]
        stock = three_ml(src, features_only=True)[0]  # fairseq's encoder forward
        positioned = three_ml.encoder.sentence_encoder.forward_positioned(
            src, utils.make_positions(src, pad), src.eq(pad)).transpose(0, 1)
    real = src.ne(pad)
    assert features.shape == (3, TOKENS, 64)
    assert (features - stock).abs().max().item() <= 1e-5
    assert (features - positioned)[real].abs().max().item() <= 1e-5


STOCK_FAIRSEQ_FEATURES = """
import json, sys, torch
from fairseq import checkpoint_utils
assert "fairseq_ext" not in sys.modules
[model], _, _ = checkpoint_utils.load_model_ensemble_and_task(
    [sys.argv[1]], arg_overrides={"data": sys.argv[2]})
src = torch.load(sys.argv[3])
with torch.no_grad():
    features = model.eval()(src, features_only=True)[0]
print(json.dumps({"plugin": "fairseq_ext" in sys.modules, "features": features.tolist()}))
"""


@pytest.mark.parametrize("name", ["self", "cross_hydra"])  # fairseq-train and hydra sources
def test_export_loads_in_stock_fairseq_without_the_plugin(name, exported, tiny_data_bin,
                                                          tmp_path):
    """A fresh process that never imports fairseq_ext (torch's weights-only loading, no
    allow-list) loads the export and computes what it computes here."""
    roberta, _, task = load(exported[name], tiny_data_bin)
    src = unmasked_batch(task.source_dictionary, torch.Generator().manual_seed(1))
    torch.save(src, tmp_path / "src.pt")
    proc = run_cli([sys.executable, "-c", STOCK_FAIRSEQ_FEATURES, exported[name],
                    tiny_data_bin, tmp_path / "src.pt"], cwd=tmp_path)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["plugin"] is False
    with torch.no_grad():
        expected = roberta(src, features_only=True)[0]
    torch.testing.assert_close(torch.tensor(result["features"]), expected, rtol=0, atol=1e-6)


def test_export_log_counts_only_the_decoder_parameters_it_drops(pretrained, caplog):
    """The tied head weight is the token embedding, which the export keeps: it is not
    'dropped', so the figure is the decoder's own parameters."""
    path = pretrained["self"]
    state = export_encoder.load_checkpoint(path)
    with caplog.at_level("INFO", logger="fairseq_ext.export.encoder"):
        export_encoder.export(state, path)
    decoder_only = sum(v.numel() for k, v in state["model"].items()
                       if k.startswith("mask_decoder.") and k != "mask_decoder.lm_head.weight")
    line = next(r.getMessage() for r in caplog.records if "dropped" in r.getMessage())
    assert f"({decoder_only / 1e6:.2f}M parameters: mask_decoder)" in line


@pytest.mark.parametrize("name", PRETRAIN_RUNS)
def test_export_is_a_clean_roberta_checkpoint(name, pretrained, exported):
    trainer, _, _, pre_ln, dense_copied = PRETRAIN_RUNS[name]
    # plain dicts only: it loads with weights-only unpickling and no allow-list
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(exported[name])) == []
    state = torch.load(exported[name], weights_only=True)
    source = torch.load(pretrained[name], weights_only=True)["model"]
    weights = state["model"]

    assert not [k for k in weights if k.startswith("mask_decoder")]
    assert all(k.startswith(("encoder.sentence_encoder.", "encoder.lm_head.")) for k in weights)
    for key, value in source.items():
        if key.startswith("encoder.sentence_encoder."):
            assert torch.equal(weights[key], value), key

    model_cfg = state["cfg"]["model"]
    assert isinstance(model_cfg, dict)  # an argparse.Namespace from fairseq-train included
    if trainer == "fairseq-train":
        assert model_cfg["arch"] == "roberta"
    assert model_cfg["_name"] == "roberta"  # tiny dims: the generic arch, dims explicit
    assert ARCH_MODEL_REGISTRY[model_cfg["_name"]] is RobertaModel
    assert model_cfg["encoder_normalize_before"] is pre_ln
    # post-LN: RoBERTa's embedding LayerNorm; pre-LN: none, unless the run asked for one (the
    # hydra source is the 3ML demo YAML, which has it)
    assert model_cfg["layernorm_embedding"] is (not pre_ln or trainer == "fairseq-hydra-train")
    assert (model_cfg["encoder_layers"], model_cfg["encoder_embed_dim"],
            model_cfg["encoder_ffn_embed_dim"], model_cfg["encoder_attention_heads"],
            model_cfg["max_positions"]) == (2, 64, 256, 2, TOKENS)
    assert not {"normalization", "decoder_layers", "decoder_embed_dim"} & set(model_cfg)

    # the MLM head RoBERTa's strict loading needs
    embed = weights["encoder.sentence_encoder.embed_tokens.weight"]
    assert torch.equal(weights["encoder.lm_head.weight"], embed)
    for part in ("bias", "layer_norm.weight", "layer_norm.bias"):
        assert torch.equal(weights[f"encoder.lm_head.{part}"],
                           source[f"mask_decoder.lm_head.{part}"])
    dense = weights["encoder.lm_head.dense.weight"]
    dense_bias = weights["encoder.lm_head.dense.bias"]
    assert dense.shape == (64, 64)
    if dense_copied:
        assert torch.equal(dense, source["mask_decoder.lm_head.dense.weight"])
        assert torch.equal(dense_bias, source["mask_decoder.lm_head.dense.bias"])
    else:
        assert source["mask_decoder.lm_head.dense.weight"].shape == (64, 32)
        assert 0.018 < dense.std().item() < 0.022 and not dense_bias.any()
    assert state["export"]["lm_head_dense"] == ("copied" if dense_copied else "initialised")

    # model only: nothing that makes fairseq resume the pre-training run
    assert "last_optimizer_state" not in state and state["criterion"] is None
    assert [h["num_updates"] for h in state["optimizer_history"]] == [0]
    assert state["extra_state"] == {"train_iterator": {
        "version": 2, "epoch": 1, "iterations_in_epoch": 0, "shuffle": True}}
    assert state["export"]["source_num_updates"] == 3


@pytest.mark.parametrize("name, arch", [
    ("self", ["--arch", "roberta_tiny"]),
    ("cross", ["--arch", "roberta_prenorm", "--encoder-layers", "2", "--encoder-embed-dim", "64",
               "--encoder-ffn-embed-dim", "256", "--encoder-attention-heads", "2"]),
])
def test_finetune_args_rebuild_the_exported_encoder(name, arch, exported, pretrained,
                                                   tiny_data_bin):
    """The flags the recipe gets build a model that loads the export strictly."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(exported[name]))
    flags = export_encoder.finetune_args(state, exported[name])
    assert flags == arch + ["--max-positions", str(TOKENS)]
    args = argparse.Namespace(**{
        flag[2:].replace("-", "_"): int(value) for flag, value in zip(flags[2::2], flags[3::2])})
    ARCH_CONFIG_REGISTRY[flags[1]](args)
    _, _, task = load(exported[name], tiny_data_bin)
    model = RobertaModel.build_model(args, task)
    model.load_state_dict(state["model"], strict=True)

    with pytest.raises(export_encoder.ExportError, match="export its encoder first"):
        export_encoder.finetune_args(checkpoint_utils.load_checkpoint_to_cpu(
            str(pretrained[name])), pretrained[name])


# --- fine-tuning --------------------------------------------------------------------------

POSITIVE, NEGATIVE = ["good", "great", "right", "well"], ["never", "no", "against", "off"]


def write_classification_split(root, split, n, rng):
    """Sentences whose label (0/1) is decided by which marker words they contain."""
    neutral = [w for w in WORDS if w not in POSITIVE + NEGATIVE]
    labels = [i % 2 for i in range(n)]
    rng.shuffle(labels)
    with open(root / f"{split}.input0", "w") as text, open(root / f"{split}.label", "w") as out:
        for label in labels:
            words = [rng.choice(neutral) for _ in range(rng.randint(5, 12))]
            markers = POSITIVE if label else NEGATIVE
            for _ in range(2):
                words.insert(rng.randrange(len(words) + 1), rng.choice(markers))
            text.write(" ".join(words) + "\n")
            out.write(f"{label}\n")


@pytest.fixture(scope="module")
def classification_bin(tiny_data_bin, tmp_path_factory):
    """DATA/input0 (the 3ML dictionary) and DATA/label, as fairseq's sentence_prediction reads."""
    root = tmp_path_factory.mktemp("classification")
    rng = random.Random(0)
    write_classification_split(root, "train", 200, rng)
    write_classification_split(root, "valid", 40, rng)
    dest = root / "data-bin"

    def binarize(kind, extra):
        run_cli([fairseq_cli("fairseq-preprocess"), "--only-source",
                 "--trainpref", root / f"train.{kind}", "--validpref", root / f"valid.{kind}",
                 "--destdir", dest / ("input0" if kind == "input0" else "label"),
                 "--workers", "1", *extra])

    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(binarize, "input0", ["--srcdict", tiny_data_bin / "dict.txt"]),
                pool.submit(binarize, "label", [])]
        for job in jobs:
            job.result()
    return dest


def test_finetune_recipe_trains_the_export(exported, classification_bin, tmp_path):
    """Stock sentence_prediction fine-tunes the (pre-LN) export through the recipe; the model
    flags are read from the export."""
    save_dir = tmp_path / "finetune"
    proc = run_cli([FINETUNE, "--log-format", "json", "--no-progress-bar", "--log-interval", "2"],
                   env={"TASK": "SST-2", "DATA": str(classification_bin),
                        "PRETRAINED": str(exported["self_pre_ln_wide"]), "SAVE_DIR": str(save_dir),
                        "BATCH_SIZE": "16", "MAX_SENTENCES": "8", "EPOCHS": "3", "LR": "3e-04",
                        "CPU": "1", "NUM_WORKERS": "0", "NUM_GPUS": "1",
                        "OMP_NUM_THREADS": "1"})
    output = proc.stdout + proc.stderr
    command = proc.stdout.splitlines()[0]
    assert command.startswith("+ ") and "fairseq-train" in command
    flags = shlex.split(command[2:])
    for expected in (["--criterion", "sentence_prediction"], ["--task", "sentence_prediction"],
                     ["--restore-file", str(exported["self_pre_ln_wide"])],
                     ["--arch", "roberta_prenorm"], ["--max-positions", str(TOKENS)],
                     ["--num-classes", "2"], ["--update-freq", "2"],
                     # 200 examples / 16 per update = 13 updates x 3 epochs, 6% warmup = 2
                     ["--total-num-update", "39"], ["--warmup-updates", "2"],
                     ["--reset-optimizer", "--reset-dataloader", "--reset-meters"]):
        assert any(flags[i:i + len(expected)] == expected for i in range(len(flags))), expected
    assert f"Loaded checkpoint {exported['self_pre_ln_wide']} (epoch 1 @ 0 updates)" in output

    train = [r for r in json_log_records(output) if "loss" in r]
    assert train and all(math.isfinite(float(r["loss"])) and "accuracy" in r for r in train)
    # it learns: the labels follow marker words, chance is 50% (3 epochs reach 100% here)
    valid = json_log_records(output, key="valid_accuracy")
    assert [int(r["epoch"]) for r in valid] == [1, 2, 3]
    assert float(valid[-1]["valid_accuracy"]) >= 90.0
    assert float(valid[-1]["valid_loss"]) < 0.5 * float(valid[0]["valid_loss"])
    final = json_log_records(output, key="train_num_updates")
    assert int(final[-1]["train_num_updates"]) == 39
    assert (save_dir / "checkpoint_best.pt").is_file()


def test_finetune_args_for_a_mean_pooling_head(exported, tiny_data_bin):
    """--pooling mean: the same encoder on roberta_pooled(_prenorm), strictly loadable."""
    from fairseq_ext.models.roberta_pooled import PooledRobertaModel

    for name, base in (("self", ["--arch", "roberta_pooled"]),
                       ("cross", ["--arch", "roberta_pooled_prenorm"])):
        state = checkpoint_utils.load_checkpoint_to_cpu(str(exported[name]))
        flags = export_encoder.finetune_args(state, exported[name], pooling="mean")
        assert flags[:2] == base and flags[-4:] == [
            "--classification-pooling", "mean", "--max-positions", str(TOKENS)]
        args = argparse.Namespace(**{flag[2:].replace("-", "_"): int(value) for flag, value in
                                     zip(flags[2:-4:2], flags[3:-4:2])},
                                  classification_pooling="mean", max_positions=TOKENS)
        ARCH_CONFIG_REGISTRY[flags[1]](args)
        assert ARCH_MODEL_REGISTRY[flags[1]] is PooledRobertaModel
        _, _, task = load(exported[name], tiny_data_bin)
        model = PooledRobertaModel.build_model(args, task)
        model.load_state_dict(state["model"], strict=True)


def test_finetune_recipe_with_a_mean_pooling_head(exported, classification_bin, tmp_path):
    """POOLING=mean through the recipe: fairseq-train builds roberta_pooled_prenorm from the
    export, the head's logits are those of RoBERTa's head on the mean of the non-padding
    features (checked on the fine-tuned checkpoint), and it learns."""
    from fairseq_ext.modules.classification_heads import MeanPoolClassificationHead

    save_dir = tmp_path / "finetune"
    proc = run_cli([FINETUNE, "--log-format", "json", "--no-progress-bar", "--log-interval", "2"],
                   env={"TASK": "SST-2", "DATA": str(classification_bin), "POOLING": "mean",
                        "PRETRAINED": str(exported["self_pre_ln_wide"]), "SAVE_DIR": str(save_dir),
                        "BATCH_SIZE": "16", "MAX_SENTENCES": "8", "EPOCHS": "3", "LR": "3e-04",
                        "CPU": "1", "NUM_WORKERS": "0", "NUM_GPUS": "1",
                        "OMP_NUM_THREADS": "1"})
    flags = shlex.split(proc.stdout.splitlines()[0][2:])
    for expected in (["--arch", "roberta_pooled_prenorm"], ["--classification-pooling", "mean"]):
        assert any(flags[i:i + len(expected)] == expected for i in range(len(flags))), expected
    valid = json_log_records(proc.stdout + proc.stderr, key="valid_accuracy")
    assert float(valid[-1]["valid_accuracy"]) >= 90.0

    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / "checkpoint_best.pt")],
        arg_overrides={"data": str(classification_bin)})
    model.eval()
    head = model.classification_heads["sentence_classification_head"]
    assert isinstance(head, MeanPoolClassificationHead)
    pad = task.source_dictionary.pad()
    tokens = torch.tensor([[0, 10, 11, 12, 2], [0, 13, 2, pad, pad]])
    with torch.no_grad():
        logits, _ = model(tokens, classification_head_name="sentence_classification_head")
        features, _ = model(tokens, features_only=True)
        by_hand = []
        for row, length in enumerate((5, 3)):
            pooled = features[row, :length].mean(dim=0)
            hidden = torch.tanh(head.dense(pooled))
            by_hand.append(head.out_proj(hidden))
    torch.testing.assert_close(logits, torch.stack(by_hand))


def test_finetune_recipe_with_layer_lr_decay(exported, classification_bin, tmp_path):
    """LAYER_LR_DECAY=0.5 with the <s> head: the recipe moves the export to roberta_pooled*
    with --layer-lr-decay 0.5; fairseq-train's model tags the encoder and fused_adamw steps
    L + 2 groups at lr x 0.5^(L+1) ... 0.5, 1 (embeddings, each layer, the rest)."""
    import re

    save_dir = tmp_path / "finetune"
    proc = run_cli([FINETUNE, "--log-format", "json", "--no-progress-bar", "--log-interval", "2"],
                   env={"TASK": "SST-2", "DATA": str(classification_bin), "POOLING": "first",
                        "LAYER_LR_DECAY": "0.5",
                        "PRETRAINED": str(exported["self_pre_ln_wide"]), "SAVE_DIR": str(save_dir),
                        "BATCH_SIZE": "16", "MAX_SENTENCES": "8", "EPOCHS": "1", "LR": "3e-04",
                        "CPU": "1", "NUM_WORKERS": "0", "NUM_GPUS": "1",
                        "OMP_NUM_THREADS": "1"})
    flags = shlex.split(proc.stdout.splitlines()[0][2:])
    values = flag_values(flags)
    assert values["--arch"].startswith("roberta_pooled")
    assert (values["--classification-pooling"], values["--layer-lr-decay"]) == ("first", "0.5")
    layers = int(values["--encoder-layers"])
    output = proc.stdout + proc.stderr
    expected = ", ".join(f"{0.5 ** k:.3g}" for k in range(layers + 1, 0, -1)) + ", 1"
    assert re.search(rf"fused_adamw: {layers + 2} parameter groups at lr x {expected}\b",
                     output), output[-3000:]
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_best.pt"))
    assert state["cfg"]["model"].layer_lr_decay == 0.5


def test_yaml_fine_tunes_with_a_mean_pooling_head(exported, classification_bin, tmp_path):
    """The YAML twin with model._name=roberta_pooled_prenorm +model.classification_pooling=mean
    +model.layer_lr_decay=0.5 (the pre-LN export's encoder) trains through fairseq-hydra-train
    with the decayed rates and saves a mean head."""
    from fairseq_ext.modules.classification_heads import MeanPoolClassificationHead

    save_dir = tmp_path / "hydra"
    proc = run_cli([fairseq_cli("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "recipes/config/3ml",
             "--config-name", "finetune_glue", f"task.data={classification_bin}",
             f"checkpoint.restore_file={exported['cross']}", f"checkpoint.save_dir={save_dir}",
             "model._name=roberta_pooled_prenorm", "+model.classification_pooling=mean",
             "+model.layer_lr_decay=0.5", "+model.encoder_layers=2", "+model.encoder_embed_dim=64",
             "+model.encoder_ffn_embed_dim=256", "+model.encoder_attention_heads=2",
             f"model.max_positions={TOKENS}", f"task.max_positions={TOKENS}",
             "optimization.max_epoch=1", "lr_scheduler.total_num_update=13",
             "lr_scheduler.warmup_updates=1", "dataset.num_workers=0", "common.cpu=true",
             "optimization.update_freq=[1]", "common.log_format=json",
             "common.no_progress_bar=true"], cwd=REPO_ROOT, env={"OMP_NUM_THREADS": "1"})
    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / "checkpoint_best.pt")], arg_overrides={"data": str(classification_bin)})
    head = model.classification_heads["sentence_classification_head"]
    assert isinstance(head, MeanPoolClassificationHead)
    assert model.args.layer_lr_decay == 0.5  # and fused_adamw stepped its 4 groups:
    assert "fused_adamw: 4 parameter groups at lr x 0.125, 0.25, 0.5, 1" in proc.stdout + proc.stderr


def dry_run(script, **env):
    proc = run_cli([script], env={"DRY_RUN": "1", "NUM_GPUS": "1", **env})
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


def test_recipe_and_yaml_are_the_same_grid_point(tmp_path):
    """The YAML is the shell recipe's defaults for RTE (2,490 training examples) with a
    roberta_base export."""
    pretrained = tmp_path / "export.pt"
    pretrained.touch()
    [command] = dry_run(FINETUNE, TASK="rte", DATA="RTE-bin", PRETRAINED=str(pretrained),
                        ARCH="roberta_base", MAX_POSITIONS="512", TRAIN_EXAMPLES="2490")
    flags = flag_values(command)
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config/3ml/finetune_glue.yaml")
    same = {
        "--arch": "model._name", "--max-positions": "model.max_positions",
        "--task": "task._name", "--num-classes": "task.num_classes",
        "--init-token": "task.init_token", "--separator-token": "task.separator_token",
        "--shorten-method": "task.shorten_method", "--criterion": "criterion",
        "--dropout": "model.dropout", "--attention-dropout": "model.attention_dropout",
        "--optimizer": "optimizer._name", "--adam-betas": "optimizer.adam_betas",
        "--adam-eps": "optimizer.adam_eps", "--weight-decay": "optimizer.weight_decay",
        "--clip-norm": "optimization.clip_norm", "--lr": "optimization.lr.0",
        "--lr-scheduler": "lr_scheduler._name",
        "--total-num-update": "lr_scheduler.total_num_update",
        "--warmup-updates": "lr_scheduler.warmup_updates", "--max-epoch": "optimization.max_epoch",
        "--batch-size": "dataset.batch_size", "--update-freq": "optimization.update_freq.0",
        "--required-batch-size-multiple": "dataset.required_batch_size_multiple",
        "--valid-subset": "dataset.valid_subset",
        "--best-checkpoint-metric": "checkpoint.best_checkpoint_metric",
        "--seed": "common.seed", "--num-workers": "dataset.num_workers",
        "--log-interval": "common.log_interval", "--save-dir": "checkpoint.save_dir",
        "--log-file": "common.log_file",
    }
    for flag, key in same.items():
        shell, yaml = flags[flag], OmegaConf.select(cfg, key)
        try:
            assert float(shell) == float(yaml), (flag, key)
        except ValueError:
            assert str(shell).replace(" ", "") == str(yaml).replace(" ", ""), (flag, key)
    assert flags["--max-positions"] == str(cfg.task.max_positions)
    switches = {
        "--reset-optimizer": "checkpoint.reset_optimizer",
        "--reset-dataloader": "checkpoint.reset_dataloader",
        "--reset-meters": "checkpoint.reset_meters",
        "--maximize-best-checkpoint-metric": "checkpoint.maximize_best_checkpoint_metric",
        "--find-unused-parameters": "distributed_training.find_unused_parameters",
        "--no-epoch-checkpoints": "checkpoint.no_epoch_checkpoints",
        "--no-last-checkpoints": "checkpoint.no_last_checkpoints",
    }
    for flag, key in switches.items():
        assert flags.get(flag) is True and OmegaConf.select(cfg, key) is True, flag
    # ... and the YAML sets nothing else (but the required data and restore_file, and what
    # differs by form only)
    plain = OmegaConf.to_container(cfg)
    leaves = {f"{group}.{k}" if isinstance(value, dict) else group
              for group, value in plain.items() if group != "hydra"
              for k in (value if isinstance(value, dict) else [None])}
    covered = {key.removesuffix(".0") for key in [*same.values(), *switches.values()]}
    extra = leaves - covered - {"task.max_positions", "task.data", "checkpoint.restore_file",
                                "common.user_dir", "common.log_format"}
    assert not extra, extra
    # Table 5 for RTE: 3 epochs of ceil(2490 / 32) = 78 updates, 6% warmup
    assert (flags["--total-num-update"], flags["--warmup-updates"]) == ("234", "14")


@pytest.mark.parametrize("task, lrs, batch_sizes, epochs, metric", [
    ("QQP", {"5e-05", "8e-05"}, {"32"}, {"3", "5"}, "acc_and_f1"),
    ("MNLI", {"5e-05", "8e-05"}, {"32"}, {"3", "5"}, "accuracy"),
    ("STS-B", {"1e-05", "3e-05", "5e-05", "8e-05"}, {"16", "32"}, {"3", "5", "10"},
     "pearson_and_spearman"),
])
def test_grid_is_table_5_times_five_seeds(task, lrs, batch_sizes, epochs, metric, tmp_path):
    pretrained = tmp_path / "export.pt"
    pretrained.touch()
    commands = dry_run(GRID, TASK=task, DATA="glue", PRETRAINED=str(pretrained),
                       ARCH="roberta_base", MAX_POSITIONS="512", TRAIN_EXAMPLES="1000",
                       SAVE_ROOT=str(tmp_path / "grid"))
    points = {(f["--lr"], str(int(f["--batch-size"]) * int(f["--update-freq"])), f["--max-epoch"],
               f["--seed"]) for f in map(flag_values, commands)}
    assert points == {(lr, b, e, s) for lr in lrs for b in batch_sizes for e in epochs
                      for s in "12345"}
    assert len(commands) == len(points)  # and one save dir each
    assert len({f["--save-dir"] for f in map(flag_values, commands)}) == len(points)
    for flags in map(flag_values, commands):
        assert flags["--best-checkpoint-metric"] == metric
        assert flags["--criterion"] == "sentence_prediction" and flags["--weight-decay"] == "0.1"
        total = int(flags["--max-epoch"]) * math.ceil(1000 / (int(flags["--batch-size"])
                                                              * int(flags["--update-freq"])))
        assert int(flags["--total-num-update"]) == total
        assert int(flags["--warmup-updates"]) == round(0.06 * total)
    if task == "STS-B":
        assert all(f.get("--regression-target") is True and f["--num-classes"] == "1"
                   for f in map(flag_values, commands))


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_missing_input_is_one_line_exit_2(tmp_path):
    proc = run_cli([sys.executable, SCRIPT,
                    tmp_path / "nope.pt", tmp_path / "out.pt"], check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"export_encoder.py: error: {tmp_path / 'nope.pt'}: no such file"]
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("kind", ["exported roberta", "fairseq-train roberta", "not a checkpoint"])
def test_non_3ml_input_is_refused(kind, exported, shell_trained, tiny_data_bin, tmp_path, capsys):
    source = {"exported roberta": exported["self"],
              "fairseq-train roberta": shell_trained[0] / "checkpoint_last.pt",
              "not a checkpoint": tiny_data_bin / "dict.txt"}[kind]
    assert export_encoder.main([str(source), str(tmp_path / "out.pt")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    expected = "cannot read it as a fairseq checkpoint" if kind == "not a checkpoint" \
        else "not a 3ML checkpoint: a 'roberta"
    assert line.startswith("export_encoder.py: error: ") and expected in line
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(pretrained, tmp_path, capsys):
    out = tmp_path / "out.pt"
    out.write_bytes(b"keep me")
    assert export_encoder.main([str(pretrained["self"]), str(out)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "exists; pass --force" in line and out.read_bytes() == b"keep me"
    assert export_encoder.main([str(pretrained["self"]), str(out), "--force"]) == 0
    assert "encoder.lm_head.weight" in torch.load(out, weights_only=True)["model"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pt"]  # no temporary left


def test_recipe_refuses_a_missing_pretrained_file(tmp_path):
    """fairseq-train would silently start from scratch."""
    proc = run_cli([FINETUNE], env={"TASK": "RTE", "DATA": str(tmp_path),
                                    "PRETRAINED": str(tmp_path / "nope.pt")}, check=False)
    assert proc.returncode == 2 and "nope.pt: no such file" in proc.stderr

"""Training FLOPs: the Appendix D formulas against hand counts, Table 3's speedups, the
calculator CLI, the calculator against FlopCounterMode, bad input, and the ``masked_lm_flops``
criterion (in-process on hand-made batches, and in real fairseq-train runs across a resume)."""
import argparse
import os
import re
import subprocess
import threading

import pytest
import torch
from fairseq import metrics
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.data import Dictionary

import fairseq_ext  # noqa: F401  (registers archs and criteria)
from conftest import REPO_ROOT, USER_DIR, fairseq_cli, json_log_records, python_cli, search_path
from fairseq_ext import flops
from fairseq_ext.criterions.masked_lm_flops import MaskedLmFlopsLoss
from fairseq_ext.flops import ModelSpec, NoFlopsFormula, Stack, training_metrics
from fairseq_ext.flops.cli import build_parser
from fairseq_ext.models.masked_lm_run import MASKED_LM_RUN
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch

V = flops.ROBERTA_VOCAB_SIZE


def build_model(arch, task):
    return build_arch(arch, task, 64)


# --- 1. building blocks, counted by hand ----------------------------------------------------------
# Every count below is multiply-adds (MACs) of the matrix products, written out product by
# product; FLOPs = 2 x MACs. L=4 tokens, D=2, F=3 unless stated.

def test_self_attention_by_hand():
    qkvo = 4 * (4 * 2 * 2)   # Q, K, V, output projections: (L x D) @ (D x D) each
    scores = 4 * 4 * 2       # Q @ K^T: (L x D) @ (D x L)
    apply = 4 * 4 * 2        # attention @ V: (L x L) @ (L x D)
    assert qkvo + scores + apply == 128
    assert flops.self_attention_flops(4, 2) == 2 * 128 == 256


def test_feed_forward_by_hand():
    up, down = 4 * 2 * 3, 4 * 3 * 2  # (L x D) @ (D x F), (L x F) @ (F x D)
    assert flops.feed_forward_flops(4, 2, 3) == 2 * (up + down) == 96


def test_cross_attention_by_hand():
    # 3 queries over 5 keys, D=2
    q, kv, o = 3 * 2 * 2, 2 * (5 * 2 * 2), 3 * 2 * 2
    scores, apply = 3 * 5 * 2, 3 * 5 * 2
    assert q + kv + o + scores + apply == 124
    assert flops.cross_attention_flops(3, 5, 2) == 248


def test_prediction_head_by_hand():
    # 3 predicted tokens: dense 2 -> 4, then the tied projection 4 -> V=10
    dense, vocab = 3 * 2 * 4, 3 * 4 * 10
    assert flops.prediction_head_flops(3, 2, 4, 10) == 2 * (dense + vocab) == 288


def test_projection_by_hand_and_none_when_dims_agree():
    assert flops.projection_flops(5, 4, 2) == 2 * (5 * 4 * 2) == 80
    assert flops.projection_flops(5, 4, 4) == 0


def test_swishrnn_by_hand():
    # W1, W2: d -> d' ; W3: d' -> d ; L=4, d=2, d'=3
    assert flops.swishrnn_flops(4, 2, 3) == 2 * (4 * 2 * 3 + 4 * 2 * 3 + 4 * 3 * 2) == 144
    assert flops.swishrnn_bert_block_flops(4, 2, 3) == 256 + 144


def test_decoder_lm_by_hand():
    # 2 blocks (attention 256 + FFN 96 each), output projection of 3 predicted tokens, V=10
    assert flops.decoder_lm_forward_flops(4, 2, 3, 2, 10, 3) == 2 * (256 + 96) + 2 * (3 * 2 * 10)
    assert flops.decoder_lm_forward_flops(4, 2, 3, 2, 10, 3) == 824


# --- 1b. whole models on hand-built specs ---------------------------------------------------------
# L=4, V=10, mask_prob 0.5 and mask_fraction 0.5: 2 corrupted tokens, 1 [MASK], 1 other.
# RoBERTa: 2 blocks of D=2, F=3. 3ML: encoder 1 block of D_e=4, F=8; decoder 1 block D_d=2, F=3.
ROBERTA_SPEC = ModelSpec("roberta", Stack(2, 2, 3))
SELF_SPEC = ModelSpec("3ml_self", Stack(1, 4, 8), Stack(1, 2, 3))
CROSS_SPEC = ModelSpec("3ml_cross", Stack(1, 4, 8), Stack(1, 2, 3))

ENCODER_3ML = 2 * ((4 * 3 * 4 * 4 + 2 * 3 * 3 * 4)   # attention on L_e = 3 kept tokens
                   + (2 * 3 * 4 * 8))                # FFN 4 -> 8 -> 4
PROJECTION_3ML = 2 * (3 * 4 * 2)                     # 3 kept tokens, 4 -> 2


def test_roberta_forward_by_hand():
    encoder = 2 * (256 + 96)            # 2 blocks on all 4 tokens
    head = 2 * 2 * (2 * 2 + 2 * 10)     # 2 corrupted tokens: dense 2 -> 2, vocab 2 -> 10
    assert encoder + head == 800
    assert flops.forward_flops(ROBERTA_SPEC, 4, 0, 1, 1, 10) == 800
    assert flops.expected_forward_flops(ROBERTA_SPEC, 4, 0.5, 10, mask_fraction=0.5) == 800
    assert flops.training_flops_per_sequence(ROBERTA_SPEC, 4, 0.5, 10, 0.5) == 2400


def test_3ml_self_forward_by_hand():
    decoder = 256 + 96                  # 1 block on all 4 positions, D_d=2, F=3
    head = 2 * 2 * (2 * 4 + 4 * 10)     # 2 corrupted tokens: dense 2 -> 4, vocab 4 -> 10
    assert ENCODER_3ML == 912 and PROJECTION_3ML == 48
    total = ENCODER_3ML + PROJECTION_3ML + decoder + head
    assert total == 1504
    assert flops.forward_flops(SELF_SPEC, 3, 4, 1, 1, 10) == total
    assert flops.expected_forward_flops(SELF_SPEC, 4, 0.5, 10, mask_fraction=0.5) == total


def test_3ml_cross_forward_by_hand():
    self_attention = 2 * (4 * 1 * 2 * 2 + 1 * 1 * 2 + 1 * 1 * 2)     # 1 [MASK] query
    cross = 2 * (1 * 2 * 2 + 2 * 3 * 2 * 2 + 1 * 2 * 2 + 2 * 1 * 3 * 2)  # over 3 kept keys
    ffn = 2 * (2 * 1 * 2 * 3)
    head = (2 * 1 * (2 * 4 + 4 * 10)     # the [MASK], from the decoder: dense 2 -> 4
            + 2 * 1 * (4 * 4 + 4 * 10))  # the other corrupted token: dense 4 -> 4 (Eq. 4)
    total = ENCODER_3ML + PROJECTION_3ML + self_attention + cross + ffn + head
    assert (self_attention, cross, ffn, head, total) == (40, 88, 24, 208, 1320)
    assert flops.forward_flops(CROSS_SPEC, 3, 1, 1, 1, 10) == total
    assert flops.expected_forward_flops(CROSS_SPEC, 4, 0.5, 10, mask_fraction=0.5) == total


# --- 2. Table 3 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, baseline, length, mask_prob, speedup", [
    ("3ml_self_large", "roberta_large", 128, 0.4, 1.34),
    ("3ml_self_large", "roberta_large", 128, 0.5, 1.47),
    ("3ml_cross_large", "roberta_large", 128, 0.4, 1.37),
    ("3ml_self_base", "roberta_base", 512, 0.4, 1.22),
    ("3ml_self_base", "roberta_base", 512, 0.5, 1.28),
])
def test_table_3_speedups(arch, baseline, length, mask_prob, speedup):
    ours = flops.training_flops_per_sequence(flops.spec_for_arch(arch), length, mask_prob, V)
    theirs = flops.training_flops_per_sequence(flops.spec_for_arch(baseline), length, 0.15, V)
    assert theirs / ours == pytest.approx(speedup, abs=0.015)


def test_spec_for_arch_reads_the_registered_hyperparameters():
    assert flops.spec_for_arch("roberta_large") == ModelSpec("roberta", Stack(24, 1024, 4096))
    assert flops.spec_for_arch("3ml_cross_base") == ModelSpec(
        "3ml_cross", Stack(12, 768, 3072), Stack(2, 384, 1536))
    assert flops.spec_for_arch("3ml_self_large", decoder_layers=4) == ModelSpec(
        "3ml_self", Stack(24, 1024, 4096), Stack(4, 512, 2048))


# --- 3. the calculator CLI ------------------------------------------------------------------------

def calculator(capsys, *argv):
    code = flops.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def printed_flops(out, label):
    """A model's 'training FLOPs per sequence' as printed (4 significant digits)."""
    block = out.split(f"{label}: ", 1)[1]
    return float(re.search(r"training FLOPs per sequence: (\S+)", block).group(1))


@pytest.mark.slow
def test_cli_as_a_module_prints_speedup_last():
    proc = subprocess.run(
        [python_cli(), "-m", "fairseq_ext.flops", "--arch", "3ml_self_large", "--mask-prob",
         "0.5", "--tokens-per-sample", "128"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "speedup: 1.46"  # Table 3: 1.47 (+-0.015)


def test_cli_budget_and_per_update_totals(capsys):
    code, out, _ = calculator(capsys, "--arch", "3ml_self_base", "--mask-prob", "0.4",
                              "--tokens-per-sample", "512", "--budget-of", "roberta_base:125000",
                              "--batch-size", "8", "--max-update", "10")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[-1] == "speedup: 1.22"
    assert "updates: 152441" in lines
    assert "budget: 3ml_self_base gets 152441 updates for the FLOPs of roberta_base" in out
    per_sequence = flops.training_flops_per_sequence(flops.spec_for_arch("3ml_self_base"), 512,
                                                     0.4, V)
    assert printed_flops(out, "A") == pytest.approx(per_sequence, rel=1e-3)
    a_block = out.split("B: ", 1)[0]
    per_update = float(re.search(r"per update \(batch 8\): (\S+)", a_block).group(1))
    total = float(re.search(r"total \(10 updates\): (\S+)", a_block).group(1))
    assert per_update == pytest.approx(8 * per_sequence, rel=1e-3)
    assert total == pytest.approx(80 * per_sequence, rel=1e-3)


@pytest.mark.parametrize("arch, override, spec", [
    ("roberta_base", ["--encoder-layers", "6"], ModelSpec("roberta", Stack(6, 768, 3072))),
    ("3ml_self_base", ["--decoder-layers", "4", "--decoder-embed-dim", "256"],
     ModelSpec("3ml_self", Stack(12, 768, 3072), Stack(4, 256, 1024))),  # FFN follows: 4 x 256
])
def test_cli_overrides_change_model_a_only(capsys, arch, override, spec):
    vs = ("--vs", "roberta_base")
    _, plain, _ = calculator(capsys, "--arch", arch, "--tokens-per-sample", "128", *vs)
    _, changed, _ = calculator(capsys, "--arch", arch, "--tokens-per-sample", "128", *override, *vs)
    expected = flops.training_flops_per_sequence(spec, 128, 0.15, V)
    assert printed_flops(changed, "A") == pytest.approx(expected, rel=1e-3)  # 4 digits printed
    assert printed_flops(changed, "A") != printed_flops(plain, "A")
    assert printed_flops(changed, "B") == printed_flops(plain, "B")  # roberta_base as it is
    baseline = flops.training_flops_per_sequence(flops.spec_for_arch("roberta_base"), 128, 0.15, V)
    assert changed.strip().splitlines()[-1] == f"speedup: {baseline / expected:.2f}"


SIX_BY_512 = ("--encoder-layers", "6", "--encoder-embed-dim", "512", "--encoder-ffn-embed-dim",
              "2048")


def test_cli_costs_a_size_whose_heads_differ_from_the_arch(capsys):
    """6 blocks of 512 with 8 heads: base's 12 heads do not divide 512, so the heads are given
    too, and the figure is the formula's for that shape (App. D, Eq. 2 for roberta)."""
    code, out, err = calculator(capsys, "--arch", "roberta_base", *SIX_BY_512,
                                "--encoder-attention-heads", "8", "--tokens-per-sample", "128")
    assert code == 0, err
    length, dim, ffn, corrupted = 128, 512, 2048, 0.15 * 128
    block = 2 * (4 * length * dim ** 2 + 2 * length ** 2 * dim + 2 * length * dim * ffn)
    head = 2 * corrupted * (dim * dim + dim * V)
    assert printed_flops(out, "A") == pytest.approx(3 * (6 * block + head), rel=1e-3)

    code, out, err = calculator(capsys, "--arch", "3ml_self_base", *SIX_BY_512,
                                "--encoder-attention-heads", "8", "--decoder-embed-dim", "320",
                                "--decoder-attention-heads", "5", "--tokens-per-sample", "128")
    assert code == 0, err
    spec = ModelSpec("3ml_self", Stack(6, 512, 2048), Stack(2, 320, 1280))  # decoder FFN 4 x 320
    assert flops.spec_for_arch("3ml_self_base", encoder_layers=6, encoder_embed_dim=512,
                               encoder_ffn_embed_dim=2048, encoder_attention_heads=8,
                               decoder_embed_dim=320, decoder_attention_heads=5) == spec
    expected = flops.training_flops_per_sequence(spec, 128, 0.15, V)
    assert printed_flops(out, "A") == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("size, flag", [
    (("--encoder-embed-dim", "512"), "--encoder-attention-heads"),  # base: 12 heads
    (("--decoder-embed-dim", "200"), "--decoder-attention-heads"),  # Table 4: 200 // 64 = 3 heads
])
def test_cli_names_the_heads_flag_it_takes(capsys, size, flag):
    """The one-line size error names a heads flag the calculator takes; given, it runs."""
    code, out, err = calculator(capsys, "--arch", "3ml_self_base", *size)
    assert code == 2 and "speedup" not in out
    assert f"must be divisible by {flag}" in err and len(err.strip().splitlines()) == 1
    assert flag in build_parser().format_help()
    code, _, err = calculator(capsys, "--arch", "3ml_self_base", *size, flag, "8")
    assert code == 0, err


def test_default_baseline_is_roberta_with_the_encoder_of_a(capsys):
    """Without --vs, B is fairseq's roberta with A's encoder (the paper's RoBERTa of A's size):
    a tiny 3ML is compared with a tiny RoBERTa, not with roberta_base."""
    _, out, _ = calculator(capsys, "--arch", "3ml_self_tiny", "--encoder-layers", "3",
                           "--tokens-per-sample", "128", "--mask-prob", "0.4")
    spec_a = flops.spec_for_arch("3ml_self_tiny", encoder_layers=3)
    expected_b = flops.training_flops_per_sequence(ModelSpec("roberta", spec_a.encoder), 128, 0.15, V)
    assert printed_flops(out, "B") == pytest.approx(expected_b, rel=1e-3)
    a = flops.training_flops_per_sequence(spec_a, 128, 0.4, V)
    assert out.strip().splitlines()[-1] == f"speedup: {expected_b / a:.2f}"


def test_budget_arch_is_the_baseline_without_vs(capsys):
    """--budget-of B:N without --vs compares A with B itself, not with A's default baseline
    (for swishrnn_bert that default is bert_rab)."""
    _, out, _ = calculator(capsys, "--arch", "swishrnn_bert_base", "--budget-of",
                           "bert_orig_base:1000")
    assert "B: bert_orig_base (roberta)" in out and "bert_rab" not in out
    _, out, _ = calculator(capsys, "--arch", "swishrnn_bert_base", "--vs", "bert_rab_base",
                           "--budget-of", "bert_orig_base:1000")
    assert "B: bert_rab_base (bert_rab)" in out  # --vs wins


def test_cli_reads_vocab_size_from_a_data_bin(capsys, tiny_data_bin, tmp_path):
    words = len((tiny_data_bin / "dict.txt").read_text().splitlines())
    vocab = words + 4 + 1  # <s> <pad> </s> <unk>, and the <mask> the masked_lm task adds
    assert vocab == len(Dictionary.load(str(tiny_data_bin / "dict.txt"))) + 1
    code, out, _ = calculator(capsys, "--arch", "3ml_self_tiny", "--vs", "roberta_tiny",
                              "--data", tiny_data_bin, "--tokens-per-sample", "64")
    assert code == 0 and out.count(f", V={vocab}\n") == 2  # A and B
    expected = flops.training_flops_per_sequence(flops.spec_for_arch("3ml_self_tiny"), 64, 0.15,
                                                 vocab)
    assert printed_flops(out, "A") == pytest.approx(expected, rel=1e-3)
    code, _, err = calculator(capsys, "--arch", "3ml_self_tiny", "--data", tmp_path)
    assert code == 2 and "no dict.txt" in err


# --- 4. against FlopCounterMode -------------------------------------------------------------------

@pytest.mark.slow
def test_cli_measure_agrees_with_flop_counter(capsys, one_thread):
    """3ml_self_base (A) and roberta_base (B) at base size, L=64."""
    code, out, _ = calculator(capsys, "--arch", "3ml_self_base", "--mask-prob", "0.4",
                              "--tokens-per-sample", "64", "--measure")
    assert code == 0
    ratios = dict(re.findall(r"measure \w \((\S+)\): .* ratio (\S+)", out))
    assert set(ratios) == {"3ml_self_base", "roberta"}  # default B: roberta with A's encoder
    for arch, ratio in ratios.items():
        assert float(ratio) == pytest.approx(1.0, abs=0.03), arch


@pytest.mark.slow
def test_3ml_cross_base_agrees_with_flop_counter(one_thread):
    from fairseq_ext.flops.measure import measure_training_flops

    spec = flops.spec_for_arch("3ml_cross_base")
    measured, analytic = measure_training_flops("3ml_cross_base", spec, 64, 0.4, V, 0.8, {})
    assert measured == pytest.approx(analytic, rel=0.03)


# --- 5. bad input ---------------------------------------------------------------------------------

def test_unknown_arch(capsys):
    code, out, err = calculator(capsys, "--arch", "no_such_arch_xyz")
    assert code == 2 and "no_such_arch_xyz" in err and "speedup" not in out


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "1"])
def test_bad_mask_prob(capsys, value):
    code, _, err = calculator(capsys, "--arch", "roberta_base", "--mask-prob", value)
    assert code == 2 and "--mask-prob must be in (0, 1)" in err
    with pytest.raises(ValueError, match="--mask-prob"):
        flops.expected_forward_flops(ROBERTA_SPEC, 4, float(value), 10)
    run_args = argparse.Namespace(tokens_per_sample=4, mask_prob=float(value),
                                  leave_unmasked_prob=0.1, random_token_prob=0.1)
    with pytest.raises(ValueError, match="--mask-prob"):
        flops.masked_lm_predicted_per_sequence(run_args)


@pytest.mark.parametrize("budget, message", [
    ("roberta_base:0", "UPDATES must be positive"),
    ("roberta_base:-5", "UPDATES must be positive"),
    ("roberta_base", "must be ARCH:UPDATES"),
    ("roberta_base:many", "UPDATES must be a number"),
    ("no_such_arch_xyz:100", "no_such_arch_xyz"),
])
def test_bad_budget(capsys, budget, message):
    code, out, err = calculator(capsys, "--arch", "3ml_self_base", "--budget-of", budget)
    assert code == 2 and message in err
    assert "speedup" not in out and "updates:" not in out


@pytest.mark.parametrize("arch, model", [("transformer_lm", "transformer_lm"),
                                         ("bart_base", "bart")])
def test_arch_without_formula_is_an_error_never_zero(capsys, arch, model):
    with pytest.raises(NoFlopsFormula, match=f"'{arch}'.*'{model}'"):
        flops.spec_for_arch(arch)
    code, out, err = calculator(capsys, "--arch", arch)
    assert code == 2 and f"no FLOPs formula for arch '{arch}'" in err and "speedup" not in out
    code, out, err = calculator(capsys, "--arch", "roberta_base", "--vs", arch)
    assert code == 2 and arch in err and "speedup" not in out


def test_criterion_stops_on_an_arch_without_formula():
    task = MaskedLmTaskStub(60, mask_prob=0.4)
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)

    class Model:
        training = True
        args = argparse.Namespace(arch="transformer_lm")

    sample = {"net_input": {"src_tokens": torch.zeros(2, 5, dtype=torch.long)}}
    log = {"n_mask": 1, "n_replaced": 0, "n_unchanged": 0}
    with pytest.raises(NoFlopsFormula, match="transformer_lm"):
        criterion.add_logging(Model(), sample, {}, log)


# --- 6c/6d. the criterion on hand-made batches ----------------------------------------------------

def hand_made_sample(task, masks_per_row):
    """3 right-padded rows of lengths 12, 9, 12; row ``b`` has ``masks_per_row[b]`` [MASK]s at
    its first positions and two more corrupted tokens after them (one replaced by another
    word, one left unchanged)."""
    d, mask = task.source_dictionary, task.mask_idx
    lengths = [12, 9, 12]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(d.nspecial, mask - 1, (3, 12), generator=g)
    src, target = tokens.clone(), torch.full_like(tokens, d.pad())
    for b, (length, n_mask) in enumerate(zip(lengths, masks_per_row)):
        src[b, length:] = d.pad()
        target[b, :n_mask + 2] = tokens[b, :n_mask + 2]
        src[b, :n_mask] = mask
        src[b, n_mask] = mask - 1  # a word no row's original tokens use: "replaced"
    ntokens = int(src.ne(d.pad()).sum())
    return {"net_input": {"src_tokens": src}, "target": target, "ntokens": ntokens,
            "nsentences": 3}


def flops_from_shapes(arch, spec, sample, task):
    """3 x forward x batch from the batch itself: the encoder on the mean kept (non-pad,
    non-[MASK]) tokens per row (its linear layers see no padding), the decoder on L (self) or
    the most [MASK]s of a row (cross)."""
    src, target = sample["net_input"]["src_tokens"], sample["target"]
    pad, mask = task.source_dictionary.pad(), task.mask_idx
    batch, length = src.shape
    predicted = target.ne(pad)
    is_mask = src.eq(mask)
    n_mask = int((is_mask & predicted).sum())
    n_other = int(predicted.sum()) - n_mask
    if spec.family == "roberta":
        encoder_length, decoder_length = length, 0
    else:
        encoder_length = int((src.ne(pad) & ~is_mask).sum()) / batch
        decoder_length = length if spec.family == "3ml_self" else int(is_mask.sum(1).max())
    vocab = len(task.source_dictionary)
    return 3 * batch * flops.forward_flops(spec, encoder_length, decoder_length, n_mask / batch,
                                           n_other / batch, vocab), encoder_length


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny", "roberta_tiny"])
def test_criterion_flops_come_from_the_batch_shapes(arch):
    task = MaskedLmTaskStub(60, mask_prob=0.4)
    model = build_model(arch, task).train()
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    spec = flops.spec_for_arch(arch)
    assert criterion.training_flops.model_spec(model) == spec
    few, many = hand_made_sample(task, [1, 2, 1]), hand_made_sample(task, [4, 6, 5])
    results = {}
    for name, sample in (("few", few), ("many", many)):
        _, _, log = criterion(model, sample)
        expected, encoder_length = flops_from_shapes(arch, spec, sample, task)
        assert log["train_flops"] == pytest.approx(expected, rel=1e-12)
        results[name] = log["train_flops"], encoder_length
    if arch == "roberta_tiny":  # all 12 positions either way; only the head grows
        assert results["many"][0] > results["few"][0]
    else:
        # rows keep 11, 7, 11 tokens, then 8, 3, 7: the encoder runs on fewer tokens
        assert (results["few"][1], results["many"][1]) == (29 / 3, 6)
        assert results["many"][0] < results["few"][0]


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_criterion_uses_the_models_encoder_length(arch, monkeypatch):
    """The model's ``encoder_length`` (its ``MaskedLmRun``) is the length counted (not the
    input's)."""
    task = MaskedLmTaskStub(60, mask_prob=0.4)
    model = build_model(arch, task).train()
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    sample = hand_made_sample(task, [3, 2, 1])
    _, _, log = criterion(model, sample)
    real = model.masked_lm_logits

    def longer(*args, **kwargs):
        logits, extra = real(*args, **kwargs)
        run = extra[MASKED_LM_RUN]
        return logits, dict(extra, **{MASKED_LM_RUN: run._replace(
            encoder_length=run.encoder_length + 5)})

    monkeypatch.setattr(model, "masked_lm_logits", longer)
    _, _, longer_log = criterion(model, sample)
    spec = criterion.training_flops.model_spec(model)
    dim, ffn = spec.encoder.dim, spec.encoder.ffn_dim
    kept = 9  # rows keep 9, 7, 11 tokens: 9 per row
    per_sequence_growth = (
        spec.encoder.layers * (flops.transformer_block_flops(kept + 5, dim, ffn)
                               - flops.transformer_block_flops(kept, dim, ffn))
        + flops.projection_flops(5, dim, spec.decoder.dim))
    if spec.family == "3ml_cross":  # the decoder's cross-attention reads 5 more keys
        per_sequence_growth += spec.decoder.layers * (
            flops.cross_attention_flops(3, kept + 5, spec.decoder.dim)
            - flops.cross_attention_flops(3, kept, spec.decoder.dim))
    assert longer_log["train_flops"] - log["train_flops"] == pytest.approx(
        3 * 3 * per_sequence_growth, rel=1e-9)


@pytest.fixture
def fresh_metrics():
    """fairseq's global metrics (the running total lives in its ``default`` aggregator),
    fresh for the test and reset after it."""
    metrics.reset()
    yield
    metrics.reset()


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "roberta_tiny"])
def test_validation_counts_no_training_flops(arch, fresh_metrics):
    task = MaskedLmTaskStub(60, mask_prob=0.4)
    model = build_model(arch, task).eval()
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    with torch.no_grad():
        _, _, log = criterion(model, hand_made_sample(task, [3, 2, 1]))
    assert "train_flops" not in log
    with metrics.aggregate(new_root=True) as agg:
        MaskedLmFlopsLoss.reduce_metrics([log, log])
    assert "loss" in agg.get_smoothed_values()
    assert not any("pflops" in key for key in agg.get_smoothed_values())
    assert metrics.get_meter("default", training_metrics._TOTAL_KEY) is None


def test_reduce_metrics_sums_an_update_and_keeps_a_running_total(fresh_metrics):
    """Logging outputs of one update (e.g. --update-freq 2) are summed; the total grows by
    each update and is read from the ``default`` aggregator by any aggregator."""
    update = [
        {"loss": 2.0, "sample_size": 2, "ntokens": 20, "nsentences": 2, "train_flops": 2e12},
        {"loss": 1.0, "sample_size": 1, "ntokens": 10, "nsentences": 1, "train_flops": 1e12}]
    for expected_total, expected_tokens in ((0.003, 30), (0.006, 60)):
        with metrics.aggregate(new_root=True) as agg:
            MaskedLmFlopsLoss.reduce_metrics(update)
            values = agg.get_smoothed_values()
        assert values["pflops"] == pytest.approx(0.003)
        assert values["total_pflops"] == pytest.approx(expected_total)
        assert values["total_tokens"] == expected_tokens
    assert metrics.get_meter("default", training_metrics._TOTAL_KEY).sum == pytest.approx(0.006)
    assert metrics.get_meter("default", training_metrics._TOKENS_KEY).sum == 60


# --- 6a/6b/6d. real fairseq-train runs, and a resume ----------------------------------------------

FIRST_UPDATES, RESUMED_UPDATES = 3, 5


def fairseq_train(data, save_dir, arch, max_update, log_path):
    args = [fairseq_cli("fairseq-train"), data, "--user-dir", USER_DIR, "--task", "masked_lm",
            "--criterion", "masked_lm_flops", "--arch", arch, "--tokens-per-sample", "64",
            "--mask-prob", "0.4", "--batch-size", "8", "--optimizer", "adam", "--lr", "1e-4",
            "--max-update", str(max_update), "--save-dir", save_dir, "--no-epoch-checkpoints",
            "--cpu", "--num-workers", "0", "--seed", "1", "--log-format", "json",
            "--log-interval", "1", "--no-progress-bar"]
    env = dict(os.environ, PATH=search_path(), OMP_NUM_THREADS="1")  # two runs on 2 cores
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(a) for a in args], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    proc.log_path = log_path
    return proc


def finish(proc, timeout=600):
    proc.wait(timeout=timeout)
    output = open(proc.log_path).read()
    assert proc.returncode == 0, f"fairseq-train failed ({proc.returncode}):\n{output[-6000:]}"
    return output


class BackgroundRuns:
    """3ML-self (3 updates, then resumed in the same --save-dir to 5) and RoBERTa (3 updates),
    the first two side by side, run in a thread while the in-process tests of this module
    (FlopCounterMode on base models) use the CPU."""

    def __init__(self, data, root):
        self.data, self.root = data, root
        self.logs, self.error, self.procs = {}, None, []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _start(self, name, arch, save_dir, max_update):
        proc = fairseq_train(self.data, self.root / save_dir, arch, max_update,
                             self.root / f"{len(self.procs)}.log")
        self.procs.append(proc)
        return name, proc

    def _run(self):
        try:
            first = self._start("3ml_self_tiny", "3ml_self_tiny", "3ml_self", FIRST_UPDATES)
            roberta = self._start("roberta_tiny", "roberta_tiny", "roberta", FIRST_UPDATES)
            self.logs[first[0]] = finish(first[1])
            resumed = self._start("3ml_self_tiny resumed", "3ml_self_tiny", "3ml_self",
                                  RESUMED_UPDATES)
            for name, proc in (roberta, resumed):
                self.logs[name] = finish(proc)
        except BaseException as error:  # reported by the tests that read the logs
            self.error = error

    def wait(self):
        self.thread.join(timeout=900)
        if self.error is not None:
            raise self.error
        assert not self.thread.is_alive(), "fairseq-train runs did not finish"
        return self.logs

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.thread.join(timeout=60)


@pytest.fixture(scope="module", autouse=True)
def background_runs(request, tmp_path_factory):
    """Starts the runs with the module when a selected test of it needs them."""
    wanted = any("train_runs" in item.fixturenames for item in request.session.items
                 if item.module is request.module)
    if not wanted:
        yield None
        return
    runs = BackgroundRuns(request.getfixturevalue("tiny_data_bin"),
                          tmp_path_factory.mktemp("flops_runs"))
    yield runs
    runs.stop()


@pytest.fixture(scope="module")
def train_runs(background_runs):
    """{name: fairseq-train output} of :class:`BackgroundRuns`."""
    return background_runs.wait()


def train_inner_records(output):
    return [r for r in json_log_records(output) if "total_pflops" in r]


@pytest.mark.parametrize("name", ["3ml_self_tiny", "roberta_tiny"])
def test_running_total_is_the_sum_of_per_update_flops(train_runs, name):
    records = train_inner_records(train_runs[name])
    assert [int(r["num_updates"]) for r in records] == list(range(1, FIRST_UPDATES + 1))
    running, tokens = 0.0, 0.0
    for record in records:  # one record per update: its wpb is the update's tokens
        assert float(record["pflops"]) > 0
        running += float(record["pflops"])
        tokens += float(record["wpb"])
        assert float(record["total_pflops"]) == pytest.approx(running, rel=1e-4)
        assert float(record["total_tokens"]) == tokens
    (summary,) = json_log_records(train_runs[name], key="train_num_updates")
    assert float(summary["train_total_pflops"]) == pytest.approx(running, rel=1e-4)


def test_running_total_survives_a_resume(train_runs):
    before = train_inner_records(train_runs["3ml_self_tiny"])
    output = train_runs["3ml_self_tiny resumed"]
    assert f"@ {FIRST_UPDATES} updates" in output  # resumed from checkpoint_last.pt
    after = train_inner_records(output)
    assert [int(r["num_updates"]) for r in after] == list(
        range(FIRST_UPDATES + 1, RESUMED_UPDATES + 1))
    running = sum(float(r["pflops"]) for r in before)
    tokens = sum(float(r["wpb"]) for r in before)
    for record in after:
        running += float(record["pflops"])
        tokens += float(record["wpb"])
        assert float(record["total_pflops"]) == pytest.approx(running, rel=1e-4)
        assert float(record["total_tokens"]) == tokens


def test_validation_records_carry_no_flops(train_runs):
    for output in train_runs.values():
        records = json_log_records(output, key="valid_loss")
        assert records
        for record in records:
            assert not any("pflops" in key for key in record), record


def test_cli_budget_is_rounded_down_on_both_lines(capsys):
    """19,591.6 updates buy the budget: both lines say 19591, the planner's rule
    (fairseq_ext_lab/budget.py; recipes/3ml/english.sh trains them)."""
    code, out, _ = calculator(capsys, "--arch", "3ml_self_mini", "--decoder-layers", "1",
                              "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "128",
                              "--mask-prob", "0.4", "--tokens-per-sample", "64",
                              "--vocab-size", "8002", "--batch-size", "64",
                              "--vs-mask-prob", "0.15", "--budget-of", "roberta_mini_prenorm:24000")
    assert code == 0
    assert "updates: 19591" in out.splitlines()
    assert "gets 19591 updates for the FLOPs of roberta_mini_prenorm" in out

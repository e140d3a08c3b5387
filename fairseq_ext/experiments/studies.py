"""Studies: each paper's claims as the paper states them, measured at CPU scale over several
seeds, with error bars (``scripts/study.py``, ``recipes/studies/<name>.sh``, docs/studies.md).

A study (:class:`Study`, registered in :data:`STUDIES`) is one entry: its models (a recipe and
its overrides each, the first the baseline), its seeds, the baseline's updates and the budget
(:data:`EQUAL_FLOPS`: every other model gets the updates that buy the same analytic training
FLOPs, :func:`fairseq_ext.experiments.demo.equal_flops_updates`; :data:`EQUAL_TOKENS`: the
same updates of the same batch), the learning-rate grid, its kind of evaluation and the claims,
each a :class:`Claim` naming two models, a metric, and where it comes from (the paper's table or
figure, its metric and figures, whether we measure a proxy; or :data:`OUR_QUESTION`). The runner:

0. chooses each model's peak learning rate (:func:`select_learning_rates`): one run per rate of
   the grid on the training split without its last 5% (:mod:`fairseq_ext.corpus.heldout`),
   scored on that 5%, never on the valid split the compared figures come from;
1. trains every (model, seed) through the model's bash recipe at its rate (``--seed S``
   appended), two runs at a time at one torch thread each (a study on the GPU,
   ``Study.device == "cuda"``: one at a time, :data:`GPU_RUN_ENV`), into
   ``<runs-dir>/<model>/seed<S>/``;
   a run is *finished* when its ``result.json`` exists (written atomically after training and
   evaluation); a finished run is never retrained, and a run directory without one (the study
   was killed there) is removed and redone; every path a run records is relative to the runs
   directory, which can be moved or copied and resumed;
2. evaluates each run: masked LMs by :mod:`fairseq_ext.evaluation.masked_lm_scores` at
   :data:`~fairseq_ext.experiments.demo.CURVE_POINTS` checkpoints, on the same valid positions
   (15%) for every model and seed; bidirectional LMs by stock ``fairseq-validate --eval-mode``
   runs (:func:`fairseq_ext.evaluation.bidirectional_report.evaluate_checkpoint`), the
   training-objective valid loss logged by fairseq at four points giving the curve;
3. prints per study a table of models (each figure the mean over seeds ± its standard error
   over seeds, :func:`~fairseq_ext.reporting.uncertainty.mean_over_seeds`, beside the trivial
   baseline: the training unigram for [MASK] loss, always guessing the commonest piece for
   infilling), the learning rates chosen, and a table of claims: the measured difference, paired
   over the same evaluation rows within a seed and then over seeds
   (:func:`~fairseq_ext.reporting.uncertainty.paired_over_seeds`), its 95% t interval over seeds
   (``S - 1`` degrees of freedom: 4.30 SE for 3 seeds) and the verdict (:func:`verdict`:
   ``holds`` / ``fails`` when the interval excludes 0 on the paper's side / the other, else
   ``unresolved``; an ``on_par`` claim against its margin);
4. writes ``study.json`` (every figure, per seed too, the flat ``figures`` and ``provenance``
   sections of :mod:`fairseq_ext.reporting.figures` that ``--compare`` reads, and the study's
   wall time summed over the invocations that trained) and ``curves.png`` (valid loss against
   training PFLOPs, the mean over seeds with a ±1 SE band).

May import: see :mod:`fairseq_ext.experiments`.
"""
import argparse
import dataclasses
import json
import math
import shutil
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_ext.experiments import demo, finetuning
from fairseq_ext.experiments.finetuning import FinetuneArm, FinetuneProtocol
from fairseq_ext.reporting import figures
from fairseq_ext.reporting.curves import CurvePoint
from fairseq_ext.reporting.text_tables import ascii_table
from fairseq_ext.reporting.uncertainty import (
    CONFIDENCE,
    Estimate,
    mean_over_seeds,
    paired_over_seeds,
    perplexity,
)
from fairseq_ext.training.output_files import write_text

#: A study's budget: equal analytic training FLOPs, or equal training tokens (equal updates).
EQUAL_FLOPS, EQUAL_TOKENS = "flops", "tokens"
#: The learning-rate selection: its seed (none of the study's), its runs' directory under the
#: study's runs directory, and the share of the training split held out to score them on.
SELECTION_SEED, SELECTION_DIR, HELDOUT_SHARE = 101, "lr-selection", 0.05
#: The file that marks a run finished (training and evaluation done), written last, atomically.
RESULT = "result.json"
STUDY_JSON, STUDY_PLOT = "study.json", "curves.png"
MASKED_LM, BIDIRECTIONAL = "masked_lm", "bidirectional"
#: A fine-tuning claim's metric: dev accuracy after fine-tuning, averaged over the suite's tasks
#: (:mod:`fairseq_ext.experiments.finetuning`), as the papers average GLUE.
FINETUNE_METRIC = "finetune_avg"
#: What counts as "on par" after fine-tuning: 1 accuracy point of the task average, fixed before
#: any run (3ML's Table 3 calls 84.8 against 85.0 "slightly worse").
ON_PAR_POINTS = 1.0
#: Bidirectional evaluation: R values of the suffix-ppl and infilling columns (the demo's; its
#: 4 masked positions per document too).
R_VALUES = demo.BIDIRECTIONAL_R_VALUES
#: fairseq validations of a bidirectional run (its curve), and checkpoints of a masked-LM run.
CURVE_POINTS = demo.CURVE_POINTS
#: Valid batches of each of a bidirectional run's curve validations (the same first batches
#: every time; the full split is scored once, at the end, by the evaluation modes).
CURVE_VALID_BATCHES = 25
#: Characters per line of a curve plot's title (:func:`plot_study`).
TITLE_WIDTH = 80
#: Where a study's runs train (:attr:`Study.device`).
DEVICES = ("cpu", "cuda")
#: The recipes' environment for a study on the GPU: off the CPU (the demo recipes default to
#: ``CPU=1``), fairseq's fp16 (the shell recipes' GPU precision: fairseq-train 0.12 makes
#: ``--bf16`` TPU training, docs/scaling.md) and no memory plan printed before each run (one
#: Python start-up less per run).
GPU_RUN_ENV = {"CPU": "0", "PRECISION": "--fp16", "MEMORY_PLAN": "0"}
#: Claims that read where a [MASK]-loss curve reaches a target, and the curve's axis each reads
#: (training PFLOPs, or seconds of training on the wall clock), with its ratio's unit.
REACH_AXES = {"fewer_flops": ("pflops", "FLOP ratio"), "less_time": ("wall", "time ratio")}
CLAIM_KINDS = ("better", "on_par", *REACH_AXES)


@dataclasses.dataclass(frozen=True)
class StudyModel:
    """One model of a study: its recipe, the environment it runs with and flags appended to the
    recipe's fairseq-train command (a shape)."""

    name: str
    recipe: str
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    args: Tuple[str, ...] = ()

    def run(self, seed: Optional[int] = None) -> demo.DemoRun:
        seed_args = () if seed is None else ("--seed", str(seed))
        return demo.DemoRun(self.name, self.recipe, dict(self.env), args=(*self.args, *seed_args))


#: ``Claim.source`` of a comparison the paper does not make: a question of ours, labelled so.
OUR_QUESTION = "our question"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One comparison of model ``a`` with model ``b``, with where it comes from.

    ``kind``:

    * ``"better"``: ``a`` has the better ``metric`` (lower loss or ppl, higher accuracy);
    * ``"on_par"``: ``a`` and ``b`` are within ``margin`` (the metric's unit) of each other;
    * ``"fewer_flops"``: ``a`` reaches ``b``'s final [MASK] loss with fewer training FLOPs
      (the ratio of its PFLOPs to reach it over ``b``'s whole budget is below 1);
    * ``"less_time"``: the same on the wall clock: ``a`` reaches ``b``'s final [MASK] loss in
      less training time than ``b`` took for its whole budget (fairseq's logged ``wall``: the
      seconds since its trainer started, whole seconds; for a study on one GPU, where the runs
      do not share the device).

    ``metric``: ``"mask_loss"`` (bits) for masked LMs; for bidirectional LMs a column,
    ``"full"``, ``"suffix:R"`` or ``"infill:R"``, with ``metric_b`` where ``b`` is read at
    another R (its rows are paired by document and position).

    Where it comes from: ``source`` is the paper's table, figure or section
    (:data:`OUR_QUESTION` for a comparison the paper does not make), ``paper_metric`` the metric
    the paper reports it in and ``paper_figure`` the paper's own figures, in its direction;
    ``proxy`` says the study measures another metric than the paper's (a pre-training loss in
    place of GLUE), and ``differs`` what else is not as in the paper (scale, budget, data).

    ``per_task`` (fine-tuning claims): read on every task of the suite as well as on its
    average (the "pre-training helps" claims, :func:`pretraining_helps_claims`).
    """

    text: str
    kind: str
    a: str
    b: str
    metric: str = "mask_loss"
    metric_b: Optional[str] = None
    source: str = OUR_QUESTION
    paper_metric: str = ""
    paper_figure: str = ""
    proxy: bool = False
    differs: str = ""
    margin: Optional[float] = None
    per_task: bool = False

    @property
    def ours(self) -> bool:
        return self.source == OUR_QUESTION


@dataclasses.dataclass(frozen=True)
class Study:
    """A comparison: models (the first is the baseline whose ``baseline_updates`` set the
    budget), seeds, the kind of evaluation, the claims and the wall-time budget.

    ``device``: where the runs train and are scored, ``"cpu"`` (:data:`~fairseq_ext.experiments.
    recipe_runs.WORKERS` runs at a time, one torch thread each) or ``"cuda"`` (one run at a
    time on the GPU with :data:`GPU_RUN_ENV`; scored on the GPU); ``scripts/study.py --device``
    overrides it.

    ``budget``: :data:`EQUAL_FLOPS` (every model the updates that buy the baseline's analytic
    training FLOPs, as 3ML's Table 3 compares) or :data:`EQUAL_TOKENS` (every model the
    baseline's updates of the same batch: the same training tokens, as the bidirectionality
    paper trains its variants). ``lr_grid``: peak learning rates each model chooses from on a
    held-out part of the training split before the study's runs (:func:`select_learning_rates`;
    empty: the recipe's own)."""

    name: str
    title: str
    kind: str
    models: Tuple[StudyModel, ...]
    seeds: Tuple[int, ...]
    baseline_updates: int
    claims: Tuple[Claim, ...]
    minutes: int = 60
    notes: str = ""
    budget: str = "flops"
    lr_grid: Tuple[str, ...] = ()
    finetune: Optional[FinetuneProtocol] = None
    finetune_claims: Tuple[Claim, ...] = ()
    device: str = "cpu"

    def model(self, name: str) -> StudyModel:
        return next(model for model in self.models if model.name == name)


def check_study(study: Study) -> None:
    """Refuse a malformed entry before anything is trained, saying what to change."""
    names = [model.name for model in study.models]
    problems = []
    if len(set(names)) != len(names):
        problems.append(f"model names repeat: {names}")
    if len(study.seeds) < 1 or len(set(study.seeds)) != len(study.seeds):
        problems.append(f"seeds must be distinct, at least one: {study.seeds}")
    if study.kind not in (MASKED_LM, BIDIRECTIONAL):
        problems.append(f"kind must be {MASKED_LM} or {BIDIRECTIONAL}, got {study.kind!r}")
    if study.device not in DEVICES:
        problems.append(f"device must be one of {DEVICES}, got {study.device!r}")
    if study.budget not in (EQUAL_FLOPS, EQUAL_TOKENS):
        problems.append(f"budget must be {EQUAL_FLOPS} or {EQUAL_TOKENS}, got {study.budget!r}")
    for lr in finetuning.not_positive(study.lr_grid):
        problems.append(f"lr_grid: {lr!r} is not a positive learning rate")
    if study.baseline_updates < 1:
        problems.append(f"baseline_updates must be positive, got {study.baseline_updates}")
    for claim in study.claims:
        if {claim.a, claim.b} - set(names):
            problems.append(f"claim {claim.text!r} names models outside {names}")
        if claim.kind not in CLAIM_KINDS:
            problems.append(f"claim {claim.text!r}: unknown kind {claim.kind!r}")
        if claim.kind in REACH_AXES and study.kind != MASKED_LM:
            problems.append(f"claim {claim.text!r}: {claim.kind} needs [MASK]-loss curves")
        if claim.kind == "on_par" and not (claim.margin or 0) > 0:
            problems.append(f"claim {claim.text!r}: on_par needs a positive margin (what counts "
                            "as on par, in the metric's unit)")
        if not claim.ours and not (claim.paper_metric and claim.paper_figure):
            problems.append(f"claim {claim.text!r} cites {claim.source!r}: give its "
                            "paper_metric and paper_figure, or make it OUR_QUESTION")
    if study.finetune is not None:
        problems += finetuning.check_protocol(study.finetune, names)
        arms = [arm.name for arm in study.finetune.arms]
        for claim in study.finetune_claims:
            if {claim.a, claim.b} - set(arms):
                problems.append(f"fine-tuning claim {claim.text!r} names arms outside {arms}")
            if claim.kind not in ("better", "on_par") or claim.metric != FINETUNE_METRIC:
                problems.append(f"fine-tuning claim {claim.text!r}: kind better or on_par, "
                                f"metric {FINETUNE_METRIC!r}")
            if claim.kind == "on_par" and not (claim.margin or 0) > 0:
                problems.append(f"claim {claim.text!r}: on_par needs a positive margin")
    elif study.finetune_claims:
        problems.append("fine-tuning claims without a fine-tuning protocol")
    if problems:
        raise SystemExit(f"error: study {study.name}: " + "; ".join(problems))


# ----------------------------------------------------------------------------------------------
# The studies

#: 3ML's shape: the smallest (in RoBERTa-15%'s training FLOPs per 64-token sample, 8,000-piece
#: vocabulary) of :func:`smallest_3ml_shape`'s grid where 3ML-self-40%'s analytic speedup over
#: RoBERTa-15% is at least 1.2 (1.21). tests/test_studies.py checks that the search still finds
#: this shape.
THREE_ML_ENCODER = ("--encoder-layers", "6", "--encoder-embed-dim", "192",
                    "--encoder-ffn-embed-dim", "768", "--encoder-attention-heads", "3")
THREE_ML_DECODER = ("--decoder-layers", "1", "--decoder-embed-dim", "32",
                    "--decoder-ffn-embed-dim", "128", "--decoder-attention-heads", "1")
#: The grid :func:`smallest_3ml_shape` searches: encoder layers, encoder dims (FFN 4x, head size
#: 64), decoder layers, decoder dims (FFN 4x).
SHAPE_GRID = {"layers": (2, 3, 4, 6, 8), "dims": (128, 192, 256, 384, 512),
              "decoder_layers": (1, 2), "decoder_dims": (32, 64, 128)}


def smallest_3ml_shape(vocab_size: int, length: int = 64, mask_prob: float = 0.4,
                       baseline_mask_prob: float = 0.15, min_speedup: float = 1.2,
                       arch: str = "3ml_self_mini") -> Optional[Dict[str, int]]:
    """The shape of :data:`SHAPE_GRID` with the fewest RoBERTa training FLOPs per sequence
    whose analytic speedup (:mod:`fairseq_ext.flops`, App. D) of ``arch`` at ``mask_prob``
    over RoBERTa at ``baseline_mask_prob`` is at least ``min_speedup`` (ties: the higher
    speedup); ``None`` when none is. Returns the shape's fields and its ``speedup``."""
    from fairseq_ext import flops

    best = None
    for layers in SHAPE_GRID["layers"]:
        for dim in SHAPE_GRID["dims"]:
            roberta = flops.spec_for_arch("roberta_mini_prenorm", encoder_layers=layers,
                                          encoder_embed_dim=dim, encoder_ffn_embed_dim=4 * dim)
            cost = flops.training_flops_per_sequence(roberta, length, baseline_mask_prob,
                                                     vocab_size)
            for decoder_layers in SHAPE_GRID["decoder_layers"]:
                for decoder_dim in (d for d in SHAPE_GRID["decoder_dims"] if d <= dim):
                    spec = flops.spec_for_arch(
                        arch, encoder_layers=layers, encoder_embed_dim=dim,
                        encoder_ffn_embed_dim=4 * dim, decoder_layers=decoder_layers,
                        decoder_embed_dim=decoder_dim, decoder_ffn_embed_dim=4 * decoder_dim)
                    speedup = cost / flops.training_flops_per_sequence(spec, length, mask_prob,
                                                                       vocab_size)
                    key = (cost, -speedup)
                    if speedup >= min_speedup and (best is None or key < best[0]):
                        best = (key, {"encoder_layers": layers, "encoder_embed_dim": dim,
                                      "decoder_layers": decoder_layers,
                                      "decoder_embed_dim": decoder_dim, "speedup": speedup})
    return None if best is None else best[1]


SEEDS = (1, 2, 3)
STUDIES: Dict[str, Study] = {}


def register_study(study: Study) -> Study:
    check_study(study)
    STUDIES[study.name] = study
    return study


#: The peak learning rates each model of a study chooses from, on held-out training data.
LR_GRID = ("5e-4", "1e-3", "2e-3")
#: What counts as "on par" in [MASK] loss: 0.1 bits, about 7% in perplexity (3ML's Table 1
#: calls 9.5 and 9.3, 0.03 bits apart, "comparable"), fixed before any run.
ON_PAR_BITS = 0.1
#: What every masked-LM claim of a study measures in place of the paper's GLUE average.
MLM_PROXY = ("CPU scale (millions of parameters, minutes of training); a pre-training loss, "
             "not fine-tuning")

#: What differs from the papers for every fine-tuning claim.
FINETUNE_DIFFERS = ("the downstream suite (3 tasks of real text from the machine: Debian package "
                    "sections, WordNet definition pairs, fortune topics; docs/downstream.md) in "
                    "place of GLUE; 2 epochs of at most 1,000 examples on the CPU; the lr of a "
                    "3-point grid chosen on held-out training data, not the best dev score")
THREE_ML_MODELS = ("roberta-15%", "roberta-40%", "3ml-self-40%", "3ml-cross-40%")


def finetune_claims(*claims: Claim, differs: str = FINETUNE_DIFFERS) -> Tuple[Claim, ...]:
    """Fine-tuning claims, each saying what differs from its paper: ``differs`` (the suite,
    the schedule), then the claim's own difference if it has one."""
    return tuple(dataclasses.replace(claim, differs="; ".join(
        part for part in (differs, claim.differs) if part)) for claim in claims)



#: What the "pre-training helps" claims measure: the control every other fine-tuning claim
#: needs (issue 55).
PRETRAINING_HELPS_DIFFERS = ("each pre-trained arm against the same architecture at random "
                             "initialisation (a fresh draw per pre-training and fine-tuning "
                             "seed), fine-tuned alike, its lr chosen alike; paired on the "
                             "pre-training seed")


def pretraining_helps_claims(pairs: Sequence[Tuple[str, str]]) -> Tuple[Claim, ...]:
    """One claim per (pre-trained arm, its random-init arm): the pre-trained one fine-tunes
    better, on the suite's average and on each task. They open a study's fine-tuning claims:
    until they hold, the other claims compare models that pre-training has not improved."""
    return tuple(Claim(f"Pre-training helps {arm}: it fine-tunes better than {control}",
                       "better", arm, control, FINETUNE_METRIC, per_task=True,
                       differs=PRETRAINING_HELPS_DIFFERS) for arm, control in pairs)


#: 3ML fine-tunes the exported encoder (the decoder dropped, §2.2) with App. B's schedule shape
#: (Table 5, borrowed from 24hBERT): AdamW, weight decay 0.1, 6% warmup, linear decay.
THREE_ML_RANDOM_INIT = "random init"
THREE_ML_FINETUNE = FinetuneProtocol(
    recipe="recipes/3ml/finetune_glue.sh", checkpoint_env="PRETRAINED",
    arch_from_checkpoint=True, export_recipes=("recipes/3ml/demo.sh",),
    arms=tuple(FinetuneArm(name, name) for name in THREE_ML_MODELS)
    # the four models share the encoder's architecture: one random-init control for all
    + (FinetuneArm(THREE_ML_RANDOM_INIT, "roberta-15%", random_init=True),),
    schedule="3ML App. B (Table 5): AdamW, weight decay 0.1, warmup 6%, linear decay; the "
             "exported encoder (decoder dropped)")
THREE_ML_FINETUNE_CLAIMS = pretraining_helps_claims(
    [(name, THREE_ML_RANDOM_INIT) for name in THREE_ML_MODELS]) + finetune_claims(
    Claim("3ML-self-40% fine-tunes better than RoBERTa-15% at equal pre-training FLOPs",
          "better", "3ml-self-40%", "roberta-15%", FINETUNE_METRIC,
          source="3ML, Table 3 (first block)", paper_metric="GLUE dev average",
          paper_figure="3MLself-40% 85.0 against 24hBERT-15% 84.3",
          differs="the paper trains both for the same updates, we at equal FLOPs"),
    Claim("RoBERTa-40% fine-tunes better than RoBERTa-15% (mask more)", "better", "roberta-40%",
          "roberta-15%", FINETUNE_METRIC, source="3ML, Table 3 (first block)",
          paper_metric="GLUE dev average",
          paper_figure="24hBERT-40% 85.0 against 24hBERT-15% 84.3"),
    Claim("3ML-self-40% fine-tunes on par with RoBERTa-40% (mask later costs nothing)",
          "on_par", "3ml-self-40%", "roberta-40%", FINETUNE_METRIC,
          source="3ML, Table 3 (first block)", paper_metric="GLUE dev average",
          paper_figure="85.0 against 85.0, at speedup 1.34", margin=ON_PAR_POINTS,
          differs="on par = within 1 point (ours, fixed in advance)"),
    Claim("3ML-cross-40% fine-tunes on par with RoBERTa-40%", "on_par", "3ml-cross-40%",
          "roberta-40%", FINETUNE_METRIC, source="3ML, Table 3 (first block)",
          paper_metric="GLUE dev average", paper_figure="84.8 against 85.0, at speedup 1.37",
          margin=ON_PAR_POINTS, differs="on par = within 1 point (ours, fixed in advance)"),
)

register_study(Study(
    name="3ml",
    title="3ML (Liao et al. 2022): mask more, mask later",
    kind=MASKED_LM,
    models=(
        StudyModel("roberta-15%", "recipes/roberta/demo.sh", {"MASK_PROB": "0.15"},
                   THREE_ML_ENCODER),
        StudyModel("roberta-40%", "recipes/roberta/demo.sh", {"MASK_PROB": "0.4"},
                   THREE_ML_ENCODER),
        StudyModel("3ml-self-40%", "recipes/3ml/demo.sh", {"MASK_PROB": "0.4"},
                   THREE_ML_ENCODER + THREE_ML_DECODER),
        StudyModel("3ml-cross-40%", "recipes/3ml/demo.sh",
                   {"MASK_PROB": "0.4", "ARCH": "3ml_cross_mini"},
                   THREE_ML_ENCODER + THREE_ML_DECODER),
    ),
    seeds=SEEDS,
    baseline_updates=800,
    lr_grid=LR_GRID,
    claims=(
        Claim("Masking 40% beats masking 15% for a plain MLM (mask more)", "better",
              "roberta-40%", "roberta-15%", source="3ML, Table 3 (first block) and Figure 3",
              paper_metric="GLUE dev average", proxy=True,
              paper_figure="24hBERT-40% 85.0 against 24hBERT-15% 84.3 (same updates)",
              differs=MLM_PROXY + "; equal FLOPs here, so RoBERTa-40% gets about 12% fewer "
                                  "updates (its output layer runs on more positions); the paper "
                                  "trains both for the same updates"),
        Claim("3ML-self-40% reaches RoBERTa-40%'s quality with fewer training FLOPs (mask "
              "later)", "fewer_flops", "3ml-self-40%", "roberta-40%",
              source="3ML, Table 3 (first block)", paper_metric="GLUE dev average",
              proxy=True,
              paper_figure="3MLself-40% 85.0 at speedup 1.34 against 24hBERT-40% 85.0",
              differs=MLM_PROXY + "; Table 1 warns that [MASK] loss favours the plain MLM "
                                  "(the proxy is against 3ML)"),
        Claim("3ML-cross-40% reaches RoBERTa-40%'s quality with fewer training FLOPs",
              "fewer_flops", "3ml-cross-40%", "roberta-40%",
              source="3ML, Table 3 (first block)", paper_metric="GLUE dev average", proxy=True,
              paper_figure="3MLcross-40% 84.8 at speedup 1.37 against 24hBERT-40% 85.0 "
                           "(slightly worse, cheaper)",
              differs=MLM_PROXY),
        Claim("The plain MLM has the lower [MASK] loss than 3ML-self (same masking rate)",
              "better", "roberta-40%", "3ml-self-40%", source="3ML, Table 1",
              paper_metric="valid [MASK] perplexity",
              paper_figure="24hBERT 7.8 against 3MLself 9.5 and 3MLcross 9.3",
              differs="the paper compares at equal updates; here at equal FLOPs (3ML-self "
                      "gets 967 updates against RoBERTa-40%'s 708); scored on 15%-corrupted "
                      "valid positions"),
        Claim("3ML-self and 3ML-cross have comparable [MASK] losses", "on_par",
              "3ml-self-40%", "3ml-cross-40%", source="3ML, Table 1",
              paper_metric="valid [MASK] perplexity", paper_figure="9.5 against 9.3",
              margin=ON_PAR_BITS, differs="on par = within 0.1 bits (ours, fixed in advance)"),
        Claim("3ML-self-40% has a lower [MASK] loss than RoBERTa-15% at equal FLOPs", "better",
              "3ml-self-40%", "roberta-15%",
              differs="the demo's comparison; it mixes mask more and mask later"),
    ),
    minutes=60,
    notes="6 layers x 192 (3 heads), a 1-layer decoder of dim 32 (THREE_ML_ENCODER/DECODER): "
          "the smallest shape where the analytic 3ML-self-40% speedup is >= 1.2 (1.21); the "
          "demo recipes' settings otherwise (one line per sample, pre-LN), each model at its "
          "best peak lr of LR_GRID on held-out training data.",
    finetune=THREE_ML_FINETUNE,
    finetune_claims=THREE_ML_FINETUNE_CLAIMS,
))

#: The GPU study's shape (issue 47): 6 encoder layers of 512 (8 heads, FFN 2048); 3ML-self's
#: decoder is its architecture's default, 2 layers of half the encoder's width (256, 4 heads,
#: FFN 1024). At 512-token blocks and an 8,000-piece vocabulary, 3ML-self-40%'s analytic
#: speedup over RoBERTa-15% is 1.25 (App. D; tests/test_studies.py).
THREE_ML_GPU_ENCODER = ("--encoder-layers", "6", "--encoder-embed-dim", "512",
                        "--encoder-ffn-embed-dim", "2048", "--encoder-attention-heads", "8")
THREE_ML_GPU_DECODER = ("--decoder-layers", "2", "--decoder-embed-dim", "256",
                        "--decoder-ffn-embed-dim", "1024", "--decoder-attention-heads", "4")
#: Its data and schedule: blocks of up to 512 tokens of whole lines (the pre-training recipes'
#: ``complete``), 32 a batch (16,384 tokens an update), dropout 0.1 (Table 4's), peak lr 5e-4
#: for both: the rate the CPU 3ML study chose for every one of its models on held-out training
#: data (docs/studies/3ml/study.json, ``lr_selection``), not chosen again at this size, to keep
#: the study inside one device call.
THREE_ML_GPU_ENV = {"TOKENS_PER_SAMPLE": "512", "SAMPLE_BREAK_MODE": "complete",
                    "BATCH_SIZE": "32", "MAX_SENTENCES": "32", "PEAK_LR": "5e-4",
                    "WARMUP_UPDATES": "100", "DROPOUT": "0.1", "ATTENTION_DROPOUT": "0.1"}
THREE_ML_GPU_DIFFERS = ("one GPU (the paper: 16 V100s), 6 x 512 for 600 RoBERTa updates of 16k "
                        "tokens (about 6.7 epochs of the embedded corpus's 1.46M training "
                        "tokens, masks drawn again each epoch), fairseq fp16; a pre-training "
                        "loss, not GLUE")

register_study(Study(
    name="3ml-gpu",
    title="3ML on the GPU (issue 47): RoBERTa-15% against 3ML-self-40%, wall clock",
    kind=MASKED_LM,
    models=(
        StudyModel("roberta-15%", "recipes/roberta/demo.sh",
                   {**THREE_ML_GPU_ENV, "MASK_PROB": "0.15"}, THREE_ML_GPU_ENCODER),
        StudyModel("3ml-self-40%", "recipes/3ml/demo.sh",
                   {**THREE_ML_GPU_ENV, "MASK_PROB": "0.4", "ARCH": "3ml_self_mini"},
                   THREE_ML_GPU_ENCODER + THREE_ML_GPU_DECODER),
    ),
    seeds=SEEDS,
    baseline_updates=600,
    claims=(
        Claim("3ML-self-40% reaches RoBERTa-15%'s final [MASK] loss in less wall-clock "
              "training time", "less_time", "3ml-self-40%", "roberta-15%",
              source="3ML, Section 3 (Training Recipes) and Table 3 (first block)",
              paper_metric="training time, which Section 3 says falls in proportion to the "
                           "training FLOPs (Table 3's speedup is App. D's FLOP ratio), at the "
                           "GLUE dev average",
              paper_figure="speedup 1.34 for 3MLself-40% (GLUE 85.0) against 24hBERT-15% "
                           "(84.3)", proxy=True,
              differs=THREE_ML_GPU_DIFFERS + "; fairseq's wall time (whole seconds since its "
                                             "trainer started, checkpoint saves included)"),
        Claim("3ML-self-40% reaches RoBERTa-15%'s final [MASK] loss with fewer training FLOPs",
              "fewer_flops", "3ml-self-40%", "roberta-15%",
              source="3ML, Table 3 (first block)", paper_metric="GLUE dev average",
              paper_figure="3MLself-40% 85.0 at speedup 1.34 against 24hBERT-15% 84.3",
              proxy=True, differs=THREE_ML_GPU_DIFFERS),
        Claim("3ML-self-40% has a lower [MASK] loss than RoBERTa-15% at equal FLOPs", "better",
              "3ml-self-40%", "roberta-15%",
              differs="the CPU study's last claim at the GPU's shape; it mixes mask more and "
                      "mask later"),
    ),
    minutes=10,
    notes="One GPU, one run at a time (GPU_RUN_ENV: fairseq fp16). 6 layers x 512 (8 heads), "
          "3ML-self's default decoder (2 x 256); blocks of up to 512 tokens, 32 a batch; peak lr "
          "5e-4 for both (the CPU 3ML study's choice for every model), 100 warm-up updates, "
          "dropout 0.1; RoBERTa-15% 600 updates, 3ML-self-40% the updates of the same "
          "analytic FLOPs (748 on the embedded corpus).",
    device="cuda",
))

#: SwishRNN's study depth: three layers, so that the interleaved step sizes 1, 2, 4 all run
#: (layer i takes ``step_sizes[i % 3]``; two layers would run 1 and 2 only).
SWISHRNN_LAYERS = ("--encoder-layers", "3")

#: SwishRNN fine-tunes the pre-training checkpoint with its arch flags again (App. B: Adam
#: without weight decay, a fixed lr after a linear warmup).
SWISHRNN_MODELS = ("bert-rab", "bert-orig", "swishrnn-bert", "swishrnn-bert-k1")
SWISHRNN_FINETUNE = FinetuneProtocol(
    recipe="recipes/swishrnn/finetune_glue.sh", checkpoint_env="PRETRAINED",
    arms=tuple(FinetuneArm(name, name) for name in SWISHRNN_MODELS)
    + tuple(finetuning.random_init_arm(name) for name in SWISHRNN_MODELS),
    env={"ARCH": "swishrnn_bert_mini", "MAX_POSITIONS": "64"}, model_env_keys=("ARCH",),
    model_args=True, extra_args=("--encoder-normalize-before",),
    schedule="SwishRNN App. B: Adam without weight decay, fixed lr after a 6% linear warmup")
SWISHRNN_FINETUNE_CLAIMS = pretraining_helps_claims(
    [(name, finetuning.random_init_arm(name).name) for name in SWISHRNN_MODELS]) + finetune_claims(
    Claim("SwishRNN-BERT (steps 1,2,4) fine-tunes better than BERT-rab", "better",
          "swishrnn-bert", "bert-rab", FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="84.0% against 81.0%"),
    Claim("SwishRNN-BERT (steps 1,2,4) fine-tunes better than BERT-orig", "better",
          "swishrnn-bert", "bert-orig", FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="84.0% against 81.9%"),
    Claim("Steps 1,2,4 fine-tune on par with a step of 1", "on_par", "swishrnn-bert",
          "swishrnn-bert-k1", FINETUNE_METRIC, source="SwishRNN, Table 2",
          paper_metric="GLUE dev results", paper_figure="on par (e.g. MNLI 85.9 both, base)",
          margin=ON_PAR_POINTS, differs="on par = within 1 point (ours, fixed in advance)"),
    Claim("BERT-orig fine-tunes better than BERT-rab", "better", "bert-orig", "bert-rab",
          FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="81.9% against 81.0%"),
)

register_study(Study(
    name="swishrnn",
    title="SwishRNN (Lei et al.): simple recurrence in place of the FFN",
    kind=MASKED_LM,
    models=(
        StudyModel("bert-rab", "recipes/swishrnn/demo.sh", {"ARCH": "bert_rab_mini"},
                   SWISHRNN_LAYERS),
        StudyModel("bert-orig", "recipes/swishrnn/demo.sh", {"ARCH": "bert_orig_mini"},
                   SWISHRNN_LAYERS),
        StudyModel("swishrnn-bert", "recipes/swishrnn/demo.sh", {},
                   SWISHRNN_LAYERS + ("--swishrnn-step-sizes", "1,2,4")),
        StudyModel("swishrnn-bert-k1", "recipes/swishrnn/demo.sh", {},
                   SWISHRNN_LAYERS + ("--swishrnn-step-sizes", "1")),
    ),
    seeds=SEEDS,
    baseline_updates=800,
    lr_grid=LR_GRID,
    claims=(
        Claim("SwishRNN-BERT (steps 1,2,4) has a lower MLM loss than BERT-rab", "better",
              "swishrnn-bert", "bert-rab", source="SwishRNN, Figure 4",
              paper_metric="MLM pre-training loss",
              paper_figure="ours below BERT-rab and BERT-orig throughout pre-training "
                           "(base size; GLUE avg, Table 1: 84.0 against 81.0)",
              differs="valid loss here, training loss there; 3 layers x 128 against 12 x 768"),
        Claim("SwishRNN-BERT (steps 1,2,4) has a lower MLM loss than BERT-orig", "better",
              "swishrnn-bert", "bert-orig", source="SwishRNN, Figure 4",
              paper_metric="MLM pre-training loss",
              paper_figure="ours below BERT-orig (GLUE avg, Table 1: 84.0 against 81.9)",
              differs="valid loss here, training loss there; 3 layers x 128 against 12 x 768"),
        Claim("Steps 1,2,4 are on par with a step of 1", "on_par", "swishrnn-bert",
              "swishrnn-bert-k1", source="SwishRNN, Table 2", paper_metric="GLUE dev results",
              proxy=True, margin=ON_PAR_BITS,
              paper_figure="{1,2,4} on par with k = 1 (e.g. MNLI 85.9 both, base), 1.2x "
                           "against 1.4x BERT-rab's time",
              differs=MLM_PROXY + "; on par = within 0.1 bits (ours)"),
        Claim("BERT-rab has a lower MLM loss than BERT-orig", "better", "bert-rab", "bert-orig",
              differs="not the paper's: its Table 1 has BERT-rab *worse* on GLUE (81.0 "
                      "against 81.9, base)"),
        Claim("SwishRNN-BERT with k = 1 alone has a lower MLM loss than BERT-rab", "better",
              "swishrnn-bert-k1", "bert-rab"),
    ),
    minutes=60,
    notes="3 layers x 128 (SWISHRNN_LAYERS: the step sizes 1, 2, 4 each run in one layer), the "
          "demo recipe's settings otherwise (one line per sample, pre-LN), each model at its "
          "best peak lr of LR_GRID on held-out training data; BERT-rab's 800 updates set the "
          "budget.",
    finetune=SWISHRNN_FINETUNE,
    finetune_claims=SWISHRNN_FINETUNE_CLAIMS,
))


def _bidirectional(variant: str, document_format: str = "lines") -> StudyModel:
    return StudyModel(variant, "recipes/bidirectional/demo.sh",
                      {"VARIANT": variant, "DOCUMENT_FORMAT": document_format})


BIDIRECTIONAL_VARIANTS = ("nxt_uni", "nxt_pre", "msk_uni", "msk_bi", "hyb_uni", "hyb_pre")
#: The paper's 125M figures, Tables 3-5 (lower ppl is better; higher accuracy is better).
BIDIRECTIONAL_CLAIMS = (
    Claim("NxtUni has a better full-document ppl than NxtPre", "better", "nxt_uni", "nxt_pre",
          "full", source="Bidirectionality, Table 3", paper_metric="full-document ppl",
          paper_figure="22.23 against 22.75 (125M)"),
    Claim("NxtUni has a better full-document ppl than HybUni", "better", "nxt_uni", "hyb_uni",
          "full", source="Bidirectionality, Table 3", paper_metric="full-document ppl",
          paper_figure="22.23 against 23.26 (125M)"),
    Claim("HybUni has a better full-document ppl than HybPre", "better", "hyb_uni", "hyb_pre",
          "full", source="Bidirectionality, Table 3", paper_metric="full-document ppl",
          paper_figure="23.26 against 23.91 (125M)"),
    Claim("NxtPre has a better full-document ppl than HybUni at small scale", "better",
          "nxt_pre", "hyb_uni", "full", source="Bidirectionality, Table 3",
          paper_metric="full-document ppl", paper_figure="22.75 against 23.26 (125M)"),
    Claim("NxtUni (r = 0) has a better suffix ppl than NxtPre at its best, r = 1", "better",
          "nxt_uni", "nxt_pre", "suffix:0", "suffix:1", source="Bidirectionality, Table 4",
          paper_metric="suffix ppl (last 20%)",
          paper_figure="19.99 (r = 0) against 20.16 (r = 1) (125M): 'intriguing', put down "
                       "to less supervision with a bidirectional prefix"),
    Claim("NxtPre's suffix ppl is better at r = 1 than at r = 0", "better", "nxt_pre",
          "nxt_pre", "suffix:1", "suffix:0", source="Bidirectionality, Table 4",
          paper_metric="suffix ppl (last 20%)", paper_figure="20.16 against 20.29 (125M)"),
    Claim("HybPre's suffix ppl is better at r = 1 than at r = 0", "better", "hyb_pre",
          "hyb_pre", "suffix:1", "suffix:0", source="Bidirectionality, Table 4",
          paper_metric="suffix ppl (last 20%)", paper_figure="21.18 against 21.34 (125M)"),
    Claim("MskBi (r = 1) infills better than MskUni (r = 0)", "better", "msk_bi", "msk_uni",
          "infill:1", "infill:0", source="Bidirectionality, Table 5",
          paper_metric="single-token infilling accuracy",
          paper_figure="71.00 against 69.61 (125M): 'substantially better'"),
    Claim("MskBi infills better than HybPre at r = 1", "better", "msk_bi", "hyb_pre",
          "infill:1", "infill:1", source="Bidirectionality, Table 5",
          paper_metric="single-token infilling accuracy",
          paper_figure="71.00 against 68.71 (125M)"),
    Claim("MskUni infills better than HybUni (small models)", "better", "msk_uni", "hyb_uni",
          "infill:0", "infill:0", source="Bidirectionality, Table 5",
          paper_metric="single-token infilling accuracy",
          paper_figure="69.61 against 66.86 (125M)"),
    Claim("HybPre at r = 0 infills better than HybUni (small models)", "better", "hyb_pre",
          "hyb_uni", "infill:0", "infill:0", source="Bidirectionality, Table 5",
          paper_metric="single-token infilling accuracy",
          paper_figure="67.70 against 66.86 (125M)"),
    Claim("HybPre infills better at r = 1 than at r = 0", "better", "hyb_pre", "hyb_pre",
          "infill:1", "infill:0", source="Bidirectionality, Table 5",
          paper_metric="single-token infilling accuracy",
          paper_figure="68.71 against 67.70 (125M)"),
)
#: What differs from the paper for every bidirectional claim (the budget and the document
#: format are each study's own, in its title).
BIDIRECTIONAL_DIFFERS = ("2 layers x 128 against 125M-6.7B parameters; 400 updates of 2,048 "
                         "tokens of Python documentation against the paper's pre-training")
BIDIRECTIONAL_CLAIMS = tuple(dataclasses.replace(claim, differs=BIDIRECTIONAL_DIFFERS)
                             for claim in BIDIRECTIONAL_CLAIMS)
BIDIRECTIONAL_NOTES = (
    "bidir_lm_mini, the demo recipe's settings (2,048 tokens an update), each variant at its "
    "best peak lr of LR_GRID on held-out training data. Table 6 (re-ranking with "
    "scripts/infill_rescore.py) is not in the study: it costs minutes per checkpoint and pair.")

#: The attention each variant was pre-trained with, which Table 10 fine-tunes it with (r_bidir
#: 0: causal; 1: bidirectional over the example).
OWN_R_BIDIR = {"nxt_uni": "0", "nxt_pre": "1", "msk_uni": "0", "msk_bi": "1", "hyb_uni": "0",
               "hyb_pre": "1"}
#: Every variant with its own attention (Table 10), and the two ends switched (Table 9).
BIDIRECTIONAL_FINETUNE = FinetuneProtocol(
    recipe="recipes/bidirectional/finetune_glue.sh", checkpoint_env="CKPT",
    arms=tuple(FinetuneArm(variant, variant, {"R_BIDIR": OWN_R_BIDIR[variant]})
               for variant in BIDIRECTIONAL_VARIANTS)
    + (FinetuneArm("nxt_uni r=1", "nxt_uni", {"R_BIDIR": "1"}),
       FinetuneArm("msk_bi r=0", "msk_bi", {"R_BIDIR": "0"}))
    # the six variants share one architecture: a random-init control per attention
    + tuple(FinetuneArm(f"random init r={r}", "nxt_uni", {"R_BIDIR": r}, random_init=True)
            for r in ("0", "1")),
    env={"SIZE": "mini", "MAX_TARGET_POSITIONS": "64", "NO_SAVE": "1"},
    schedule="Bidirectionality §3.2 / App. B: a new head on the final </s>, Adam, weight decay "
             "0.1, polynomial (linear) decay after a 6% warmup")
BIDIRECTIONAL_FINETUNE_CLAIMS = pretraining_helps_claims(
    [(variant, f"random init r={OWN_R_BIDIR[variant]}")
     for variant in BIDIRECTIONAL_VARIANTS]) + finetune_claims(
    Claim("MskBi (r = 1) fine-tunes better than NxtUni (r = 0)", "better", "msk_bi",
          "nxt_uni", FINETUNE_METRIC, source="Bidirectionality, Table 10",
          paper_metric="GLUE dev accuracy, average of 6 tasks",
          paper_figure="84.4 against 83.6 (125M)"),
    Claim("MskBi fine-tunes better than MskUni (bidirectional attention pays)", "better",
          "msk_bi", "msk_uni", FINETUNE_METRIC, source="Bidirectionality, Table 10",
          paper_metric="GLUE dev accuracy, average of 6 tasks",
          paper_figure="84.4 against 82.7 (125M)"),
    Claim("HybPre fine-tunes better than HybUni", "better", "hyb_pre", "hyb_uni",
          FINETUNE_METRIC, source="Bidirectionality, Table 10",
          paper_metric="GLUE dev accuracy, average of 6 tasks",
          paper_figure="84.8 against 83.5 (125M)"),
    Claim("NxtUni fine-tunes better with its own causal attention than with r = 1", "better",
          "nxt_uni", "nxt_uni r=1", FINETUNE_METRIC, source="Bidirectionality, Table 9",
          paper_metric="average fine-tuning accuracy",
          paper_figure="83.6 (r = 0) against 75.9 (r = 1) (125M)"),
    Claim("MskBi fine-tunes better with its own bidirectional attention than with r = 0",
          "better", "msk_bi", "msk_bi r=0", FINETUNE_METRIC,
          source="Bidirectionality, Table 9", paper_metric="average fine-tuning accuracy",
          paper_figure="84.4 (r = 1) against 79.6 (r = 0) (125M)"),
    differs=FINETUNE_DIFFERS + "; " + BIDIRECTIONAL_DIFFERS)

for _name, _budget, _format, _title in (
        ("bidirectional", EQUAL_TOKENS, "lines",
         "the six variants of Table 1 at equal training tokens (the paper's design), one line "
         "per document"),
        ("bidirectional-flops", EQUAL_FLOPS, "lines",
         "the six variants at equal analytic training FLOPs, one line per document"),
        ("bidirectional-documents", EQUAL_TOKENS, "blank_line_separated",
         "the six variants at equal training tokens on whole documents (the paper's)")):
    register_study(Study(
        name=_name,
        title=f"Generalized bidirectionality (Artetxe et al. 2022): {_title}",
        kind=BIDIRECTIONAL,
        models=tuple(_bidirectional(variant, _format) for variant in BIDIRECTIONAL_VARIANTS),
        seeds=SEEDS,
        baseline_updates=400,
        budget=_budget,
        lr_grid=LR_GRID,
        claims=BIDIRECTIONAL_CLAIMS,
        minutes=60,
        notes=BIDIRECTIONAL_NOTES + f" Budget: NxtUni's 400 updates ({_budget}); documents: "
                                    f"DOCUMENT_FORMAT={_format}.",
        # fine-tuned: the paper's design (equal tokens, one line per document) only
        finetune=BIDIRECTIONAL_FINETUNE if _name == "bidirectional" else None,
        finetune_claims=BIDIRECTIONAL_FINETUNE_CLAIMS if _name == "bidirectional" else (),
    ))


# ----------------------------------------------------------------------------------------------
# Planning and running

@dataclasses.dataclass(frozen=True)
class PlannedRun:
    model: StudyModel
    seed: int
    updates: int

    @property
    def key(self) -> str:
        return f"{self.model.name}/seed{self.seed}"

    @property
    def lr(self) -> Optional[str]:
        return self.model.env.get("PEAK_LR")

    @property
    def key_with_lr(self) -> str:
        """The key of a learning-rate selection run: one per (model, lr)."""
        return f"{self.model.name}/lr{self.lr}/seed{self.seed}"


def run_dir_of(runs_dir: Path, model_name: str, seed: int, lr: Optional[str] = None) -> Path:
    """``<runs-dir>/<model>/seed<S>``; a selection run's ``<runs-dir>/<model>/lr<lr>/seed<S>``."""
    model_dir = runs_dir / model_name.replace("%", "pct")
    return (model_dir if lr is None else model_dir / f"lr{lr}") / f"seed{seed}"


def plan_study(study: Study, data: Path, baseline_updates: Optional[int] = None,
               seeds: Optional[Sequence[int]] = None) -> List[PlannedRun]:
    """Every (model, seed) at the baseline's analytic training FLOPs
    (:func:`~fairseq_ext.experiments.demo.equal_flops_updates`: the seed does not change a
    model's FLOPs per update)."""
    budget = baseline_updates or study.baseline_updates
    if study.budget == EQUAL_TOKENS:  # the same batch: the same tokens for every model
        updates = [budget] * len(study.models)
    else:
        runs = [model.run() for model in study.models]
        updates = demo.equal_flops_updates(runs, data, budget)
    return [PlannedRun(model, seed, count) for model, count in zip(study.models, updates)
            for seed in (seeds or study.seeds)]


def with_lr(model: StudyModel, lr: str) -> StudyModel:
    """The model trained at peak learning rate ``lr`` (the recipes' ``PEAK_LR``)."""
    return dataclasses.replace(model, env={**model.env, "PEAK_LR": lr})


def select_learning_rates(study: Study, data: Path, runs_dir: Path, plan: Sequence[PlannedRun],
                          workers: int = demo.WORKERS,
                          printer: Callable[[str], None] = print) -> Tuple[Dict[str, dict], int]:
    """Each model's peak learning rate, the best of ``study.lr_grid`` on held-out training
    data: every (model, lr) trains once (seed :data:`SELECTION_SEED`, the model's planned
    updates) on the training split without its last :data:`HELDOUT_SHARE`
    (:func:`fairseq_ext.corpus.heldout.heldout_data_bin`) and is scored on those lines: the
    final [MASK] loss (masked LMs) or the training objective's loss (bidirectional LMs). The
    valid split, on which the study's figures are measured, is never looked at. Finished
    selection runs are read back like the study's. Returns ``({model: {"lr": chosen,
    "scores": {lr: loss}}}, runs trained now)``."""
    from fairseq_ext.corpus.heldout import heldout_data_bin

    if not study.lr_grid:
        return {}, 0
    selection_dir = runs_dir / SELECTION_DIR
    heldout = heldout_data_bin(data, selection_dir / "heldout-data-bin", HELDOUT_SHARE)
    updates = {planned.model.name: planned.updates for planned in plan}
    selection_plan = [PlannedRun(with_lr(model, lr), SELECTION_SEED, updates[model.name])
                      for model in study.models for lr in study.lr_grid]
    printer(f"== learning rates: {len(selection_plan)} runs, {', '.join(study.lr_grid)} for each "
            f"model, scored on the {HELDOUT_SHARE:.0%} of the training split held out "
            f"({heldout})")
    results, trained = run_study(study, heldout, selection_dir, selection_plan, workers,
                                 evaluate=False, lr_dirs=True)
    scores_of: Dict[str, Dict[str, float]] = {model.name: {} for model in study.models}
    for planned in selection_plan:
        scores_of[planned.model.name][planned.lr] = heldout_loss(results[planned.key_with_lr])
    chosen: Dict[str, dict] = {}
    for model in study.models:
        scores = scores_of[model.name]
        finite = {lr: loss for lr, loss in scores.items() if math.isfinite(loss)}
        if not finite:
            raise SystemExit(f"error: {model.name}: no learning rate of {study.lr_grid} trained "
                             "to a finite held-out loss")
        chosen[model.name] = {"lr": min(finite, key=finite.get), "scores": scores,
                              "metric": ("held-out [MASK] loss (bits)" if study.kind == MASKED_LM
                                         else "held-out loss of the training objective (bits)")}
    printer(ascii_table(["model"] + [f"lr {lr}" for lr in study.lr_grid] + ["chosen"],
                        [[name] + [f"{entry['scores'][lr]:.3f}" for lr in study.lr_grid]
                         + [entry["lr"]] for name, entry in chosen.items()]))
    return chosen, trained


def heldout_loss(result: dict) -> float:
    """A selection run's score: its last curve point's loss (the final checkpoint's [MASK] loss
    for a masked LM, fairseq's validation of the training objective for a bidirectional LM);
    NaN for a run that diverged."""
    curve = result.get("curve") or []
    if not curve:
        return math.nan
    value = curve[-1]["valid_loss"]
    return float(value) if value is not None and math.isfinite(value) else math.nan


def load_result(run_dir: Path, planned: PlannedRun) -> Optional[dict]:
    """The finished run's figures, or ``None`` when it is not finished. A finished run planned
    with other updates belongs to another plan: refused, never replaced."""
    path = run_dir / RESULT
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if result.get("planned_updates") != planned.updates:
        raise SystemExit(
            f"error: {path} holds a finished run of {result.get('planned_updates')} updates, this "
            f"plan has {planned.updates}; choose another --runs-dir (finished runs are never "
            "replaced)")
    if result.get("peak_lr") != planned.lr:
        def shown(lr: Optional[str]) -> str:
            return "the recipe's peak lr" if lr is None else f"peak lr {lr}"

        raise SystemExit(
            f"error: {path} holds a finished run at {shown(result.get('peak_lr'))}, this plan "
            f"has {shown(planned.lr)}; choose another --runs-dir (finished runs are never "
            "replaced)")
    return result


def prepare_run_dir(run_dir: Path) -> None:
    """Make way for a run: a directory without :data:`RESULT` is a run the study was killed
    in (half-trained, or trained and not evaluated); it is removed and redone."""
    if run_dir.exists():
        demo.say(f"== {run_dir}: an unfinished run (no {RESULT}); removing it and starting again")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)


def run_environment(device: str) -> Dict[str, str]:
    """What a run's recipe gets beside its model's environment: on the CPU one torch thread
    (two runs share the 2 cores), on the GPU :data:`GPU_RUN_ENV`."""
    return dict(demo.ONE_THREAD) if device == "cpu" else dict(GPU_RUN_ENV)


def check_device(device: str) -> None:
    """Refuse a GPU study where torch sees no GPU, before anything is planned or trained."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("error: this study trains on a GPU (device cuda) and torch sees no "
                             "CUDA device here: run it on a GPU machine (scripts/gpu_suite.sh "
                             "--stages \"setup study\"), or add --device cpu to try it on the "
                             "CPU (slow at the study's shape)")


def train_and_evaluate(study: Study, planned: PlannedRun, data: Path, run_dir: Path,
                       keep_checkpoints: bool = False, evaluate: bool = True) -> dict:
    """Train one (model, seed) through its recipe and evaluate it; write :data:`RESULT`.
    ``evaluate=False`` (a learning-rate selection run of a bidirectional LM): only fairseq's
    validation curve, no evaluation modes."""
    prepare_run_dir(run_dir)
    run = planned.model.run(planned.seed)
    save_every, log_every = demo.curve_intervals(planned.updates)
    label = planned.key if planned.lr is None else planned.key_with_lr
    demo.say(f"== {label}: training {planned.updates} updates ({run.recipe}, {study.device})")
    if study.kind == MASKED_LM:
        row = demo.train(run, data, run_dir, planned.updates,
                         ["--disable-validation", "--save-interval-updates", str(save_every),
                          "--keep-interval-updates", "-1"], log_every,
                         extra_env=run_environment(study.device), concurrent=True)
        scores = demo.score_run(data, run_dir, row["updates"], study.device)
        row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "wall": p.wall,
                         "valid_loss": p.valid_loss}
                        for p in demo.curve_points(run_dir, scores)]
        row["scores_file"] = "scores.json"
        row["checkpoint_files"] = {str(updates): str(path.relative_to(run_dir)) for updates, path
                                   in demo.checkpoints_to_score(run_dir, row["updates"]).items()}
    else:
        from fairseq_ext.evaluation.bidirectional_report import evaluate_checkpoint
        from fairseq_ext.reporting import curves

        row = demo.train(run, data, run_dir, planned.updates,
                         ["--validate-interval-updates", str(save_every), "--save-interval-updates",
                          str(save_every), "--keep-interval-updates", "1",
                          "--max-valid-steps", str(CURVE_VALID_BATCHES)], log_every,
                         extra_env=run_environment(study.device), concurrent=True)
        log = curves.read_log(run_dir / "train.log")
        row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "wall": p.wall,
                         "valid_loss": p.valid_loss}
                        for p in curves.map_valid_to_train(log.train, log.valid)]
        if evaluate:
            on_cpu = study.device == "cpu"
            evaluation = evaluate_checkpoint(
                data, run_dir / "checkpoints" / "checkpoint_last.pt", R_VALUES, cpu=on_cpu,
                log_dir=run_dir, infill_positions=demo.BIDIRECTIONAL_INFILL_POSITIONS,
                env=demo.ONE_THREAD if on_cpu else {})
            evaluation["scores"] = {
                mode: None if path is None else str(Path(path).relative_to(run_dir))
                for mode, path in evaluation["scores"].items()}
            evaluation["checkpoint"] = str(Path(evaluation["checkpoint"]).relative_to(run_dir))
            row.update(evaluation)
    if not keep_checkpoints:  # the interval checkpoints were scored: keep the last one only
        for path in (run_dir / "checkpoints").glob("checkpoint_*_*.pt"):
            path.unlink()
    row.update({"study": study.name, "model": planned.model.name, "seed": planned.seed,
                "planned_updates": planned.updates, "peak_lr": planned.lr})
    write_text(run_dir / RESULT, json.dumps(row, indent=2, default=str), force=False)
    return row


def run_study(study: Study, data: Path, runs_dir: Path, plan: Sequence[PlannedRun],
              workers: int = demo.WORKERS, keep_checkpoints: bool = False,
              evaluate: bool = True, lr_dirs: bool = False) -> Tuple[Dict[str, dict], int]:
    """Every planned run, ``workers`` at a time, finished ones read back: ``({key: result}``
    with each result's ``run_dir``, the number of runs trained now). ``lr_dirs``: learning-rate
    selection runs, one directory and key per (model, lr)."""
    def directory(planned: PlannedRun) -> Path:
        return run_dir_of(runs_dir, planned.model.name, planned.seed,
                          planned.lr if lr_dirs else None)

    def key(planned: PlannedRun) -> str:
        return planned.key_with_lr if lr_dirs else planned.key

    results: Dict[str, dict] = {}
    pending: List[PlannedRun] = []
    for planned in plan:
        result = load_result(directory(planned), planned)
        if result is None:
            pending.append(planned)
        else:
            demo.say(f"== {key(planned)}: finished earlier ({directory(planned) / RESULT}); "
                     "not retrained")
            results[key(planned)] = result
    # model by model, as planned: at equal FLOPs the runs take about the same time
    lock = threading.Lock()

    def one(planned: PlannedRun) -> None:
        start = time.time()
        result = train_and_evaluate(study, planned, data, directory(planned), keep_checkpoints,
                                    evaluate)
        demo.say(f"== {key(planned)}: done in {time.time() - start:.0f} s "
                 f"(training {result['train_wall_sec']:.0f} s)")
        with lock:
            results[key(planned)] = result

    if pending:
        with ThreadPoolExecutor(max_workers=min(workers, len(pending))) as pool:
            for future in [pool.submit(one, planned) for planned in pending]:
                future.result()
    for planned in plan:  # where the run is now: the runs directory may have moved
        results[key(planned)]["run_dir"] = str(directory(planned))
    return results, len(pending)


# ----------------------------------------------------------------------------------------------
# Figures

def verdict(difference: Estimate, kind: str = "better", margin: Optional[float] = None) -> str:
    """A claim's verdict from ``a - b`` expressed so that **negative means a is better**, read
    from its 95% interval (:meth:`~fairseq_ext.reporting.uncertainty.Estimate.interval`: a t
    interval over seeds):

    * ``better``: ``holds`` when the interval lies below 0, ``fails`` when above, else
      ``unresolved``;
    * ``on_par``: ``holds`` when the interval lies within ``± margin``, ``fails`` when it lies
      wholly beyond it, else ``unresolved`` (a difference resolved from 0 but small enough to
      be inside the margin is on par; one the seeds cannot place is not a fail)."""
    if not math.isfinite(difference.value) or not math.isfinite(difference.standard_error):
        return "unresolved"
    low, high = difference.interval()
    if not (math.isfinite(low) and math.isfinite(high)):
        return "unresolved"
    if kind == "on_par":
        if margin is None or margin <= 0:
            raise ValueError("an on_par verdict needs a positive margin")
        if -margin < low and high < margin:
            return "holds"
        return "fails" if (low >= margin or high <= -margin) else "unresolved"
    if high < 0:
        return "holds"
    return "fails" if low > 0 else "unresolved"


def interval_fields(estimate: Estimate) -> Dict[str, float]:
    """The interval's ends and its degrees of freedom, for ``study.json``."""
    low, high = estimate.interval()
    return {"ci_low": low, "ci_high": high, "dof": estimate.degrees_of_freedom,
            "ci_level": CONFIDENCE}


def masked_lm_scores_of(result: dict):
    """``{updates: SequenceScores}`` of a finished masked-LM run."""
    from fairseq_ext.evaluation.masked_lm_scores import SequenceScores

    run_dir = Path(result["run_dir"])
    scores = json.loads((run_dir / result["scores_file"]).read_text())["scores"]
    # keys and checkpoint files both as checkpoints/<file>: wherever the runs directory is now
    by_key = {demo.checkpoint_key(path): updates
              for updates, path in result["checkpoint_files"].items()}
    return {int(by_key[demo.checkpoint_key(path)]): SequenceScores.from_json(record)
            for path, record in scores.items() if demo.checkpoint_key(path) in by_key}


def final_scores(result: dict):
    scores = masked_lm_scores_of(result)
    if not scores:
        raise SystemExit(f"error: {Path(result['run_dir']) / result['scores_file']} scores none "
                         f"of the run's checkpoints {sorted(result['checkpoint_files'].values())}; "
                         "remove the run's result.json to score it again")
    return scores[max(scores)]


def masked_lm_report(study: Study, results: Dict[str, dict]) -> dict:
    """Model rows and claim rows of a masked-LM study (module docstring, point 3)."""
    from fairseq_ext.evaluation.masked_lm_scores import paired_difference_bits

    seeds = study.seeds
    finals = {(m.name, s): final_scores(results[f"{m.name}/seed{s}"])
              for m in study.models for s in seeds}
    first = finals[(study.models[0].name, seeds[0])]
    unigram = first.loss_bits(unigram=True)
    rows = [{"name": "unigram (train counts)", "mask_loss": unigram.value,
             "mask_loss_se": unigram.standard_error, "note": "± SE over sequences"}]
    baseline = study.models[0].name
    for model in study.models:
        per_seed = [results[f"{model.name}/seed{s}"] for s in seeds]
        losses = [finals[(model.name, s)].loss_bits().value for s in seeds]
        below = [finals[(model.name, s)].below_unigram_bits().value for s in seeds]
        row = {"name": model.name, "updates": per_seed[0]["updates"],
               "analytic_pflops": analytic_pflops(per_seed[0]),
               "counted_pflops": mean_over_seeds([r["train_pflops"] or math.nan
                                                  for r in per_seed]).value,
               "sec_per_update": mean_over_seeds([r["sec_per_update"] for r in per_seed]).value,
               "train_seconds": (mean_over_seeds([r["curve"][-1]["wall"] for r in per_seed]).value
                                 if all(r["curve"] and "wall" in r["curve"][-1] for r in per_seed)
                                 else None),
               "per_seed": {str(s): {"mask_loss": loss, "below_unigram": b}
                            for s, loss, b in zip(seeds, losses, below)}}
        row.update(estimate_fields("mask_loss", mean_over_seeds(losses)))
        row.update(estimate_fields("below_unigram", mean_over_seeds(below)))
        if model.name != baseline:
            differences = [paired_difference_bits(finals[(model.name, s)], finals[(baseline, s)])
                           for s in seeds]
            row.update(estimate_fields("vs_baseline", mean_over_seeds(
                [d.value for d in differences])))
            for s, d in zip(seeds, differences):
                row["per_seed"][str(s)]["vs_baseline"] = d.value
                row["per_seed"][str(s)]["vs_baseline_se_over_sequences"] = d.standard_error
        rows.append(row)
    claims = []
    for claim in study.claims:
        if claim.kind in REACH_AXES:
            claims.append(reach_claim(claim, seeds, finals, results))
        else:
            values = [paired_difference_bits(finals[(claim.a, s)], finals[(claim.b, s)]).value
                      for s in seeds]
            difference = mean_over_seeds(values)  # each value already paired within its seed
            claims.append({**claim_fields(claim),
                           "measured": f"{claim.a} - {claim.b}: {fmt(difference, 3, True)} bits",
                           "verdict": verdict(difference, claim.kind, claim.margin),
                           "difference": difference.value, "difference_se":
                           difference.standard_error, **interval_fields(difference),
                           "unit": "bits",
                           "per_seed": dict(zip(map(str, seeds), values))})
    return {"models": rows, "claims": claims}


def reach_claim(claim: Claim, seeds: Sequence[int], finals: dict, results: Dict[str, dict]) -> dict:
    """A ``fewer_flops`` or ``less_time`` claim: per seed, the PFLOPs (seconds) at which
    ``a``'s curve first reaches the same seed's final [MASK] loss of ``b``, over ``b``'s whole
    run; the mean ratio ± SE over seeds, which holds when its interval lies below 1. A seed
    where ``a`` never gets there makes the claim fail (no seed reaches it) or unresolved."""
    axis, unit = REACH_AXES[claim.kind]
    ratios, reached_values, budgets = [], [], []
    for s in seeds:
        target = finals[(claim.b, s)].loss_bits().value
        budget = getattr(stored_curve(results[f"{claim.b}/seed{s}"], axis)[-1], axis)
        reached = demo.cost_to_reach(stored_curve(results[f"{claim.a}/seed{s}"], axis), target,
                                     axis)
        budgets.append(budget)
        reached_values.append(math.inf if reached is None else reached)
        ratios.append(math.inf if reached is None or not budget > 0 else reached / budget)
    finite = [r for r in ratios if math.isfinite(r)]
    name = "time" if axis == "wall" else "FLOP"
    if not all(budget > 0 for budget in budgets):  # fairseq logs whole seconds: a tiny run's 0
        ratio, outcome = Estimate(math.nan, math.nan), "unresolved"
        text = f"{claim.b}'s run logged no {'seconds' if axis == 'wall' else 'PFLOPs'} to compare with"
    elif len(finite) == len(ratios):
        ratio = mean_over_seeds(ratios)
        outcome = verdict(dataclasses.replace(ratio, value=ratio.value - 1.0))
        text = f"{name} ratio to reach it {fmt(ratio, 3)}"
        if axis == "wall":
            text += (f" ({claim.a} {fmt(mean_over_seeds(reached_values), 1)} s, {claim.b}'s "
                     f"whole run {fmt(mean_over_seeds(budgets), 1)} s)")
    else:
        ratio, outcome = Estimate(math.nan, math.nan), ("fails" if not finite else "unresolved")
        text = (f"not reached within the budget in {len(ratios) - len(finite)} of "
                f"{len(ratios)} seeds")
    fields = {**claim_fields(claim), "measured": text, "verdict": outcome,
              "ratio": ratio.value, "ratio_se": ratio.standard_error, "ratio_unit": unit,
              **interval_fields(ratio), "per_seed": dict(zip(map(str, seeds), ratios))}
    if axis == "wall":
        fields["seconds_to_reach"] = dict(zip(map(str, seeds), reached_values))
        fields["baseline_seconds"] = dict(zip(map(str, seeds), budgets))
    return fields


def stored_curve(result: dict, axis: str = "pflops") -> List[CurvePoint]:
    """A finished run's stored curve as :class:`~fairseq_ext.reporting.curves.CurvePoint` s, to
    read along ``axis`` (``pflops``, ``wall``); a run recorded before the curves kept their
    wall times is refused, saying how to redo it."""
    curve = result["curve"]
    if any(axis not in point for point in curve):
        raise SystemExit(f"error: {Path(result['run_dir']) / RESULT} has no {axis!r} in its curve "
                         "(a run recorded before the studies kept it): remove that result.json "
                         "to train and score the run again")
    return [CurvePoint(p["updates"], p["pflops"], p.get("wall", math.nan), p["valid_loss"],
                       p["updates"]) for p in curve]


def column_rows(result: dict, column: str) -> Dict[tuple, dict]:
    """``{(split, document, position): row}`` of a bidirectional run in ``column``
    (``full``, ``suffix:R``, ``infill:R``), from its ``--eval-scores-out`` file."""
    from fairseq_ext.data.bidirectional_eval_dataset import r_label
    from fairseq_ext.evaluation.bidirectional_report import scores_of

    mode, _, r = column.partition(":")
    mode = {"full": "full_doc_ppl", "suffix": "suffix_ppl", "infill": "infill"}[mode]
    path = (result.get("scores") or {}).get(mode)
    if path is None:
        return {}
    label = "full" if mode == "full_doc_ppl" else r_label(float(r))
    _settings, rows = scores_of(Path(result["run_dir"]) / path)  # parsed once per file
    return {key[:3]: row for key, row in rows.items() if key[3] == label}


def column_figure(rows: Dict[tuple, dict], column: str) -> float:
    """The column's figure over ``rows``: ppl (``exp`` of the token-weighted mean loss) or
    infilling accuracy in %."""
    if column.startswith("infill"):
        return 100.0 * sum(row["correct"] for row in rows.values()) / len(rows)
    return math.exp(sum(row["loss"] for row in rows.values())
                    / sum(row["tokens"] for row in rows.values()))


def unigram_perplexity(data: Path, split: str = "valid") -> Estimate:
    """Perplexity of the training split's unigram (:class:`~fairseq_ext.evaluation.
    masked_lm_scores.Unigram`: add-one smoothed counts) over every token of
    ``split``, each line's ``</s>`` included: the context-free baseline beside full-document ppl
    (over all tokens, not exactly the tokens ``full_doc_ppl`` scores, which leaves out each
    document's first), ± its delta-method error over lines
    (:func:`~fairseq_ext.reporting.uncertainty.perplexity`)."""
    import numpy as np
    from fairseq.data import Dictionary, data_utils

    from fairseq_ext.data.data_bin import special_ids
    from fairseq_ext.evaluation.masked_lm_scores import Unigram, split_token_counts

    dictionary = Dictionary.load(str(Path(data) / "dict.txt"))
    train, scored = (data_utils.load_indexed_dataset(str(Path(data) / name), dictionary,
                                                     combine=False) for name in ("train", split))
    unigram = Unigram.from_counts(split_token_counts(train, len(dictionary)),
                                  never_targets=[dictionary.pad()],
                                  specials=special_ids(dictionary))
    lines = [np.asarray(scored[i], dtype=np.int64) for i in range(len(scored))]
    return perplexity([-unigram.log_probs[line].sum() for line in lines],
                      [len(line) for line in lines])


def infill_baseline(result: dict, column: str, piece: int) -> Tuple[Estimate, Estimate]:
    """``(accuracy % of always guessing piece, model - that in points)`` on the positions a
    bidirectional run filled in ``column`` (``infill:R``), paired over them
    (:func:`~fairseq_ext.evaluation.bidirectional_report.constant_guess_baseline`)."""
    from fairseq_ext.data.bidirectional_eval_dataset import r_label
    from fairseq_ext.evaluation.bidirectional_report import constant_guess_baseline

    path = Path(result["run_dir"]) / result["scores"]["infill"]
    label = r_label(float(column.partition(":")[2]))
    baseline, difference, note = constant_guess_baseline({"scores": {"infill": path}}, label, piece)
    if baseline is None:
        raise SystemExit(f"error: no infilling baseline for {path}: {note}")
    return baseline, difference


def claim_fields(claim: Claim) -> dict:
    """What ``study.json`` says of a claim besides its figures: its text and where it comes
    from (:class:`Claim`)."""
    return {"claim": claim.text, "kind": claim.kind, "a": claim.a, "b": claim.b,
            "metric": claim.metric, "metric_b": claim.metric_b or claim.metric,
            "source": claim.source, "paper_metric": claim.paper_metric,
            "paper_figure": claim.paper_figure, "proxy": claim.proxy, "differs": claim.differs,
            "margin": claim.margin, "per_task": claim.per_task}


def lower_is_better(column: str) -> bool:
    return not column.startswith("infill")


def analytic_pflops(result: dict) -> Optional[float]:
    """A run's analytic training PFLOPs (its updates times the Appendix D figure per update),
    or ``None`` where there is no analytic figure (a bidirectional run on whole documents:
    :func:`fairseq_ext.experiments.demo.bidirectional_pflops_per_update`)."""
    per_update = result.get("analytic_pflops_per_update")
    return None if per_update is None else result["updates"] * per_update


def bidirectional_report(study: Study, results: Dict[str, dict], data: Path) -> dict:
    """Model rows (each column's figure, mean ± SE over seeds, and the commonest-piece
    infilling baseline) and claim rows (paired over the same rows within a seed, then over
    seeds) of the bidirectional study."""
    from fairseq_ext.evaluation.masked_lm_scores import commonest_piece

    seeds = study.seeds
    columns = ["full"] + [f"{mode}:{float(r):g}" for mode in ("suffix", "infill")
                          for r in R_VALUES.split(",")]
    piece, symbol = commonest_piece(data)
    rows = []
    baseline_values: Dict[str, List[float]] = {}
    for model in study.models:
        row: Dict[str, object] = {"name": model.name, "per_seed": {}}
        first = results[f"{model.name}/seed{seeds[0]}"]
        row["updates"] = first["updates"]
        row["analytic_pflops"] = analytic_pflops(first)
        for column in columns:
            values = []
            for s in seeds:
                scored = column_rows(results[f"{model.name}/seed{s}"], column)
                if not scored:
                    break
                values.append(column_figure(scored, column))
                row["per_seed"].setdefault(str(s), {})[column] = values[-1]
                if column.startswith("infill"):
                    guessed, _ = infill_baseline(results[f"{model.name}/seed{s}"], column, piece)
                    baseline_values.setdefault(column, []).append(guessed.value)
            if len(values) == len(seeds):
                row.update(estimate_fields(column, mean_over_seeds(values)))
        rows.append(row)
    baseline_row = {"name": f"unigram ppl; always {symbol!r} (commonest piece)",
                    **estimate_fields("full", unigram_perplexity(data))}
    for column, values in baseline_values.items():
        baseline_row.update(estimate_fields(column, mean_over_seeds(values)))
    gaps = []
    for model in study.models:
        for column in (c for c in columns if c.startswith("infill")):
            differences = []
            for s in seeds:
                if not column_rows(results[f"{model.name}/seed{s}"], column):
                    break
                _, gap = infill_baseline(results[f"{model.name}/seed{s}"], column, piece)
                differences.append(gap.value)
            if len(differences) == len(seeds):
                gap = mean_over_seeds(differences)
                gaps.append({"model": model.name, "column": column, "gap": gap.value,
                             "gap_se": gap.standard_error,
                             "standard_errors": (gap.value / gap.standard_error
                                                 if gap.standard_error > 0 else math.nan),
                             "per_seed": dict(zip(map(str, seeds), differences))})
    claims = []
    for claim in study.claims:
        column_a, column_b = claim.metric, claim.metric_b or claim.metric
        figures_a, figures_b = [], []
        for s in seeds:
            rows_a = column_rows(results[f"{claim.a}/seed{s}"], column_a)
            rows_b = column_rows(results[f"{claim.b}/seed{s}"], column_b)
            shared = sorted(set(rows_a) & set(rows_b))
            if not shared:
                break
            figures_a.append(column_figure({k: rows_a[k] for k in shared}, column_a))
            figures_b.append(column_figure({k: rows_b[k] for k in shared}, column_b))
        differences = [a - b for a, b in zip(figures_a, figures_b)]
        if len(differences) < len(seeds):
            claims.append({**claim_fields(claim), "measured": "not measured: no shared rows",
                           "verdict": "unresolved"})
            continue
        difference = paired_over_seeds(figures_a, figures_b)
        # a's figure minus b's, signed so that negative means a is better
        signed = difference if lower_is_better(column_a) else dataclasses.replace(
            difference, value=-difference.value)
        unit = "points" if column_a.startswith("infill") else "ppl"
        claims.append({**claim_fields(claim),
                       "measured": f"{claim.a} {column_a} - {claim.b} {column_b}: "
                                   f"{fmt(difference, 2, True)} {unit}",
                       "verdict": verdict(signed, claim.kind, claim.margin),
                       "difference": difference.value,
                       "difference_se": difference.standard_error,
                       **interval_fields(difference), "unit": unit,
                       "per_seed": dict(zip(map(str, seeds), differences))})
    return {"models": rows, "baseline": baseline_row, "columns": columns, "claims": claims,
            "piece": symbol, "baseline_gaps": gaps}


def estimate_fields(prefix: str, estimate: Estimate) -> Dict[str, float]:
    fields = {prefix: estimate.value, f"{prefix}_se": estimate.standard_error}
    if estimate.degrees_of_freedom is not None:
        fields[f"{prefix}_dof"] = estimate.degrees_of_freedom
    return fields


def fmt(estimate: Estimate, digits: int = 3, signed: bool = False) -> str:
    if not math.isfinite(estimate.value):
        return "-"
    sign = "+" if signed else ""
    error = ("?" if not math.isfinite(estimate.standard_error)
             else f"{estimate.standard_error:.{digits}f}")
    mark = " *" if signed and estimate.resolved() else ""
    return f"{estimate.value:{sign}.{digits}f} ± {error}{mark}"


def field(row: dict, prefix: str, digits: int = 3, signed: bool = False) -> str:
    if prefix not in row:
        return "-"
    return fmt(Estimate(row[prefix], row.get(f"{prefix}_se", math.nan), row.get(f"{prefix}_dof")),
               digits, signed)


def number(row: dict, key: str, digits: int) -> str:
    """A figure without an error (PFLOPs, seconds) to ``digits`` places; "-" where the row has
    none (a baseline row, or no analytic FLOPs on whole documents)."""
    value = row.get(key)
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(study: Study, report: dict) -> str:
    """The study's two tables: models, then claims."""
    seeds = len(study.seeds)
    budget = "equal training tokens" if study.budget == EQUAL_TOKENS else (
        "equal analytic training FLOPs")
    lines = [f"{study.title}: {seeds} seeds, {budget}, trained on {study.device}; mean ± SE "
             f"over seeds (* the 95% t interval over seeds excludes 0)"]
    if study.kind == MASKED_LM:
        header = ["model", "updates", "analytic PFLOPs", "counted PFLOPs", "s/update",
                  "training s", "[MASK] loss (bits)", "below unigram",
                  f"vs {study.models[0].name}, paired"]
        table = [[row["name"], str(row.get("updates", "-")),
                  number(row, "analytic_pflops", 4),
                  number(row, "counted_pflops", 4),
                  number(row, "sec_per_update", 3),
                  number(row, "train_seconds", 0),
                  field(row, "mask_loss"), field(row, "below_unigram", 3, True),
                  field(row, "vs_baseline", 3, True)] for row in report["models"]]
    else:
        header = ["model", "updates", "analytic PFLOPs"] + [
            column.replace(":", " R=") for column in report["columns"]]
        table = [[row["name"], str(row.get("updates", "-")),
                  number(row, "analytic_pflops", 4)]
                 + [field(row, column, 2) for column in report["columns"]]
                 for row in [*report["models"], report["baseline"]]]
    lines.append(ascii_table(header, table))
    if report.get("lr_selection"):
        lines.append("peak learning rates, each model's best on held-out training data (seed "
                     f"{SELECTION_SEED}; the compared figures' valid split not used): " + "; ".join(
                         f"{name} {entry['lr']} ("
                         + ", ".join(f"{lr}: {loss:.3f}" for lr, loss in entry["scores"].items())
                         + ")" for name, entry in report["lr_selection"].items()))
    if report.get("baseline_gaps"):
        lines.append(ascii_table(
            ["infilling model", "column", f"minus always {report['piece']!r}, paired", "in SEs"],
            [[gap["model"], gap["column"].replace(":", " R="),
              fmt(Estimate(gap["gap"], gap["gap_se"]), 2, True),
              f"{gap['standard_errors']:.1f}"] for gap in report["baseline_gaps"]]))
    lines.append(ascii_table(["claim", "source (metric)", "paper", "ours: a - b, paired "
                              "(± SE over seeds) [95% t interval]", "verdict"],
                             [claim_row(c) for c in report["claims"]]))
    differs = [f"  {c['claim']}: {c['differs']}" for c in report["claims"] if c.get("differs")]
    if differs:
        lines += ["what differs from the paper:", *differs]
    lines.append(f"verdicts read the 95% t interval over {seeds} seeds ({seeds - 1} degrees of "
                 "freedom): holds / fails when it excludes 0 (on_par: lies within / beyond the "
                 "margin), unresolved otherwise")
    return "\n".join(lines)


def claim_source(claim: dict) -> str:
    """Where a claim comes from, as the tables print it."""
    if claim.get("source", OUR_QUESTION) == OUR_QUESTION:
        return OUR_QUESTION
    proxy = "; proxy: we measure " + metric_name(claim) if claim.get("proxy") else ""
    return f"{claim['source']} ({claim['paper_metric']}{proxy})"


def metric_name(claim: dict) -> str:
    metric = claim.get("metric", "mask_loss")
    if metric == "mask_loss":
        return "valid [MASK] loss"
    if metric == FINETUNE_METRIC:
        return "dev accuracy after fine-tuning, average of the downstream suite's tasks"
    return {"full": "full-document ppl", "suffix": "suffix ppl",
            "infill": "infilling accuracy"}[metric.partition(":")[0]]


def claim_row(claim: dict) -> List[str]:
    interval = ""
    if claim.get("ci_low") is not None and math.isfinite(claim.get("ci_low", math.nan)):
        interval = f" [{claim['ci_low']:+.3g}, {claim['ci_high']:+.3g}]"
    margin = (f" (margin ± {claim['margin']:g})" if claim.get("kind") == "on_par"
              and claim.get("margin") else "")
    return [claim["claim"], claim_source(claim), claim.get("paper_figure") or "-",
            claim["measured"] + interval + margin, claim["verdict"]]


def markdown_claims(report: dict) -> str:
    """The claims as docs/studies.md's "Paper vs ours" rows: claim, the paper (source, metric,
    its figures), ours (a - b ± SE over seeds, the 95% t interval), verdict, what differs."""
    lines = ["| claim | paper | ours: a − b (± SE) [95% t interval] | verdict | what differs |",
             "| --- | --- | --- | --- | --- |"]
    for claim in [*report["claims"], *(report.get("finetune") or {}).get("claims", [])]:
        if claim.get("source", OUR_QUESTION) == OUR_QUESTION:
            paper = f"*{OUR_QUESTION}*"
        else:
            paper = f"{claim['source']}, {claim['paper_metric']}: {claim['paper_figure']}"
            if claim.get("proxy"):
                paper += f" (**proxy**: we measure {metric_name(claim)})"
        interval = ""
        if claim.get("ci_low") is not None and math.isfinite(claim["ci_low"]):
            interval = f" [{claim['ci_low']:+.3g}, {claim['ci_high']:+.3g}]"
        margin = (f"; on par = within ±{claim['margin']:g}" if claim.get("kind") == "on_par"
                  else "")
        verdict_text = claim["verdict"] if claim["verdict"] == "unresolved" else (
            f"**{claim['verdict']}**")
        lines.append(f"| {claim['claim']} | {paper} | {claim['measured']}{interval}{margin} | "
                     f"{verdict_text} | {claim.get('differs') or '-'} |")
    return "\n".join(lines)


def finetune_report(study: Study, raw: dict) -> dict:
    """The fine-tuning section of ``study.json``: per arm and task the dev accuracy (%) over
    pre-training seeds (each the mean over its fine-tuning seeds) ± SE over pre-training seeds,
    the within-seed SE over fine-tuning seeds beside it, the chosen lr, the task average; the
    suite's baselines; the fine-tuning claims, paired on the pre-training seed
    (:mod:`fairseq_ext.experiments.finetuning`, point 3)."""
    protocol, tasks = study.finetune, raw["tasks"]
    rows = []
    for arm in protocol.arms:
        per_task = raw["accuracy"][arm.name]
        row = {"name": arm.name, "model": arm.model, "env": dict(arm.env),
               "lr": {task: raw["lr"][arm.name][task]["lr"] for task in tasks},
               "per_seed": {task: {str(seed): values for seed, values in per_task[task].items()}
                            for task in tasks}}
        for task in tasks:
            row.update(estimate_fields(task, finetuning.arm_task_estimate(per_task[task])))
            row[f"{task}_ft_se"] = finetuning.within_seed_standard_error(per_task[task])
        row.update(estimate_fields("average", finetuning.arm_average_estimate(per_task)))
        rows.append(row)
    baselines = []
    for key, label in (("majority", "majority class (train)"),
                       ("bow_logreg", "bag of words, logistic regression")):
        row = {"name": label}
        estimates = []
        for task in tasks:
            entry = raw["baselines"][task].get(key)
            if entry is not None:
                estimate = finetuning.baseline_estimate(entry)
                row.update(estimate_fields(task, estimate))
                estimates.append(estimate)
        if len(estimates) == len(tasks):  # independent dev sets: the errors add in quadrature
            row.update(estimate_fields("average", Estimate(
                sum(e.value for e in estimates) / len(estimates),
                math.sqrt(sum(e.standard_error ** 2 for e in estimates)) / len(estimates))))
        baselines.append(row)
    by_arm = {arm.name: raw["accuracy"][arm.name] for arm in protocol.arms}
    claims = []
    for claim in study.finetune_claims:
        for task in [None, *(tasks if claim.per_task else [])]:
            difference = finetuning.paired_average_difference(by_arm[claim.a], by_arm[claim.b],
                                                              task)
            a_better_negative = dataclasses.replace(difference, value=-difference.value)
            if task is None:
                per_seed_a = finetuning.average_per_seed(by_arm[claim.a])
                per_seed_b = finetuning.average_per_seed(by_arm[claim.b])
            else:
                per_seed_a = finetuning.seed_means(by_arm[claim.a][task])
                per_seed_b = finetuning.seed_means(by_arm[claim.b][task])
            fields = claim_fields(claim)
            if task is not None:
                fields["claim"] = f"{claim.text} (on {task})"
            claims.append({**fields, "task": task,
                           "measured": f"{claim.a} - {claim.b}"
                                       f"{'' if task is None else ' on ' + task}: "
                                       f"{fmt(difference, 2, True)} points",
                           "verdict": verdict(a_better_negative, claim.kind, claim.margin),
                           "difference": difference.value, "difference_se":
                           difference.standard_error, **interval_fields(difference),
                           "unit": "accuracy points",
                           "per_seed": {str(seed): per_seed_a[seed] - per_seed_b[seed]
                                        for seed in sorted(per_seed_a)}})
    return {"tasks": tasks, "arms": rows, "baselines": baselines, "claims": claims,
            "lr_selection": raw["lr"], "lrs": list(protocol.lrs),
            "finetune_seeds": list(protocol.seeds), "epochs": protocol.epochs,
            "batch": protocol.batch, "recipe": protocol.recipe, "schedule": protocol.schedule,
            "suite": raw["suite"], "wall_seconds": raw["wall_seconds"],
            "run_seconds": raw["run_seconds"]}


def format_finetune(report: dict, seeds: int) -> str:
    """The fine-tuning tables: arms and baselines by task and average, then the claims."""
    tasks = report["tasks"]
    lines = [f"fine-tuning on the downstream suite ({report['recipe']}; {report['schedule']}; "
             f"{report['epochs']} epochs of batch {report['batch']}): dev accuracy (%), mean over "
             f"{seeds} pre-training seeds of the mean over fine-tuning seeds "
             f"{report['finetune_seeds']}, ± SE over pre-training seeds (ft: the SE over "
             "fine-tuning seeds within a pre-training seed); lr chosen per task on held-out "
             "training data"]
    table = []
    for row in report["arms"]:
        table.append([row["name"]] + [
            f"{field(row, task, 2)} (ft {row[f'{task}_ft_se']:.2f}; lr {row['lr'][task]})"
            for task in tasks] + [field(row, "average", 2)])
    for row in report["baselines"]:
        table.append([row["name"]] + [field(row, task, 2) if task in row else "-"
                                      for task in tasks]
                     + [field(row, "average", 2) if "average" in row else "-"])
    lines.append(ascii_table(["arm"] + tasks + ["average"], table))
    helps = pretraining_verdict(report["claims"])
    if helps:
        lines.append(helps)
    if report["claims"]:
        lines.append(ascii_table(["fine-tuning claim", "source (metric)", "paper", "ours: a - b, "
                                  "paired (± SE over seeds) [95% t interval]", "verdict"],
                                 [claim_row(c) for c in report["claims"]]))
    lines.append(f"fine-tuning wall time: {report['wall_seconds'] / 60:.1f} min (the runs' own "
                 f"time summed: {report['run_seconds'] / 60:.1f} min)")
    return "\n".join(lines)


def pretraining_verdict(claims: Sequence[dict]) -> str:
    """The line that opens a fine-tuning report: for which arms "pre-training helps" holds on
    the suite's average, and, when it does not hold for every one, how to read the rest."""
    averages = [c for c in claims if c.get("per_task") and c.get("task") is None]
    if not averages:
        return ""
    by_verdict: Dict[str, List[str]] = {}
    for claim in averages:
        by_verdict.setdefault(claim["verdict"], []).append(claim["a"])
    text = "pre-training helps (suite average, each arm against its random init): " + "; ".join(
        f"{verdict_text} for {', '.join(arms)}" for verdict_text, arms in by_verdict.items())
    if set(by_verdict) != {"holds"}:
        text += (". Where it does not hold, pre-training has not been shown to improve on "
                 "random initialisation at this scale, and every other fine-tuning claim "
                 "below compares such models: read their differences in that light "
                 "(docs/transfer.md)")
    return text + "."


def markdown_finetune(report: dict) -> str:
    """The fine-tuning table as docs/studies.md shows it: dev accuracy (%) per arm and task and
    the average, mean over pre-training seeds ± SE over them, the chosen lr per task; the
    suite's baselines; the stage's wall time."""
    finetune = report["finetune"]
    tasks = finetune["tasks"]
    lines = ["| arm | " + " | ".join(tasks) + " | average |",
             "| --- | " + " | ".join("---" for _ in tasks) + " | --- |"]
    for row in finetune["arms"]:
        lines.append(f"| {row['name']} | " + " | ".join(
            f"{field(row, task, 2)} (lr {row['lr'][task]})" for task in tasks)
            + f" | {field(row, 'average', 2)} |")
    for row in finetune["baselines"]:
        lines.append(f"| *{row['name']}* | " + " | ".join(
            field(row, task, 2) if task in row else "-" for task in tasks)
            + f" | {field(row, 'average', 2) if 'average' in row else '-'} |")
    lines.append("")
    lines.append(f"Fine-tuning wall time {finetune['wall_seconds'] / 60:.1f} min "
                 f"({len(finetune['arms'])} arms, {len(report['seeds'])} pre-training seeds x "
                 f"{len(finetune['finetune_seeds'])} fine-tuning seeds x {len(tasks)} tasks, and "
                 f"{len(finetune['lrs'])} learning rates per arm and task).")
    return "\n".join(lines)


def study_figures(study: Study, report: dict) -> Dict[str, dict]:
    """The study's figures for a later run to be compared with
    (:mod:`fairseq_ext.reporting.figures`): per model its updates and each column's mean over
    seeds (± SE over seeds, their degrees of freedom), per claim its measured difference or
    FLOP ratio."""
    out: Dict[str, dict] = {}
    columns = (["mask_loss", "below_unigram", "vs_baseline"] if study.kind == MASKED_LM
               else report["columns"])
    for row in report["models"]:
        if "updates" in row:
            out[f"{row['name']}/updates"] = figures.exact(row["updates"], "updates")
        for column in columns:
            if column in row:
                unit = ("bits" if study.kind == MASKED_LM
                        else "%" if column.startswith("infill") else "ppl")
                out[f"{row['name']}/{column}"] = figures.figure(
                    Estimate(row[column], row[f"{column}_se"], row.get(f"{column}_dof")), unit)
    for index, claim in enumerate(report["claims"], 1):
        for key, unit in (("difference", claim.get("unit", "")),
                          ("ratio", claim.get("ratio_unit", "FLOP ratio"))):
            if claim.get(key) is not None and math.isfinite(claim[key]):
                out[f"claim {index}/{key}"] = figures.figure(
                    Estimate(claim[key], claim[f"{key}_se"], claim.get("dof")), unit)
    finetune = report.get("finetune")
    if finetune:
        for row in finetune["arms"]:
            for column in [*finetune["tasks"], "average"]:
                out[f"finetune {row['name']}/{column}"] = figures.figure(
                    Estimate(row[column], row[f"{column}_se"], row.get(f"{column}_dof")), "%")
        for index, claim in enumerate(finetune["claims"], 1):
            out[f"finetune claim {index}/difference"] = figures.figure(
                Estimate(claim["difference"], claim["difference_se"], claim.get("dof")),
                "accuracy points")
    return out


def plot_study(study: Study, results: Dict[str, dict], out: Path,
               report: Optional[dict] = None) -> Optional[Path]:
    """Valid loss against training PFLOPs per model: the mean over seeds at each curve point
    (PFLOPs averaged too) with a ±1 SE band (:func:`fairseq_ext.reporting.curves.plot_bands`)."""
    from fairseq_ext.reporting.curves import plot_bands

    bands = {}
    for model in study.models:
        curves = [results[f"{model.name}/seed{s}"]["curve"] for s in study.seeds]
        points = min(len(curve) for curve in curves)
        if points == 0:
            continue
        bands[model.name] = [
            (mean_over_seeds([c[i]["pflops"] for c in curves]).value,
             mean_over_seeds([c[i]["valid_loss"] for c in curves]))
            for i in range(points)]
    if not bands:
        return None
    ylabel = ("valid [MASK] loss (bits, 15% positions)" if study.kind == MASKED_LM
              else "valid loss of the training objective (bits)")
    reference = None
    if study.kind == MASKED_LM and report is not None:
        reference = ("unigram (train counts)", report["models"][0]["mask_loss"])
    title = textwrap.fill(study.title, TITLE_WIDTH)  # a long title runs off the figure
    plot_bands(bands, out, f"{title}\n(mean over {len(study.seeds)} seeds, ±1 SE)",
               ylabel, reference=reference)
    return out


def report_study(study: Study, results: Dict[str, dict], data: Path, runs_dir: Path,
                 wall_seconds: float, selection: Optional[Dict[str, dict]] = None,
                 provenance: Optional[dict] = None,
                 finetune_raw: Optional[dict] = None) -> Tuple[dict, str]:
    """The report's figures and text; writes ``study.json`` and ``curves.png`` (replacing the
    previous report of this runs directory: both are recomputed from the runs' results).
    ``wall_seconds``: the study's wall time over every invocation that trained."""
    report = (masked_lm_report(study, results) if study.kind == MASKED_LM
              else bidirectional_report(study, results, data))
    report.update({"study": study.name, "title": study.title, "seeds": list(study.seeds),
                   "notes": study.notes, "wall_seconds": wall_seconds, "budget": study.budget,
                   "lr_selection": selection or {},
                   "runs": {key: {k: v for k, v in result.items() if k != "curve"}
                            for key, result in results.items()},
                   "curves": {key: result["curve"] for key, result in results.items()}})
    if finetune_raw is not None:
        report["finetune"] = finetune_report(study, finetune_raw)
    report[figures.FIGURES] = study_figures(study, report)
    report[figures.PROVENANCE] = provenance or figures.provenance(demo.REPO_ROOT, threads=1)
    text = format_report(study, report)
    if finetune_raw is not None:
        text += "\n" + format_finetune(report["finetune"], len(study.seeds))
    # paths relative to the runs directory (then the checkout): it can be moved or copied
    report = figures.relative_paths(figures.relative_paths(report, runs_dir), demo.REPO_ROOT)
    write_text(runs_dir / STUDY_JSON, json.dumps(report, indent=2, default=str), force=True)
    plot = plot_study(study, results, runs_dir / STUDY_PLOT, report)
    if plot is not None:
        text += f"\nvalid loss against training PFLOPs, ±1 SE over seeds: {plot}"
    return report, text


# ----------------------------------------------------------------------------------------------
# Command line

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="scripts/study.py", description=__doc__.split("\n\n")[0],
        epilog="studies: " + "; ".join(f"{s.name}: {s.title}" for s in STUDIES.values()))
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--data", type=Path, default=demo.DEFAULT_DATA,
                        help="a data-bin (default: the embedded corpus, "
                             "scripts/prepare_corpus.sh)")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the runs go (default runs/studies/<study>); run the same "
                             "command again to resume: finished runs are read back")
    parser.add_argument("--updates", type=int, default=None,
                        help="the baseline's updates instead of the study's (the other models "
                             "get the same FLOPs), e.g. for a quick check in another --runs-dir")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="the seeds to run instead of the study's")
    parser.add_argument("--workers", type=int, default=demo.WORKERS,
                        help="runs at a time, one torch thread each (default: %(default)s; a "
                             "study on the GPU runs one at a time)")
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="where the runs train and are scored (default: the study's own: "
                             + ", ".join(f"{s.name} {s.device}" for s in STUDIES.values()
                                         if s.device != "cpu") + ", the others cpu)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the scored interval checkpoints (default: the last only)")
    parser.add_argument("--downstream", type=Path, default=None, metavar="SUITE_DIR",
                        help="fine-tune every pre-trained checkpoint on the downstream suite in "
                             "SUITE_DIR (scripts/prepare_downstream.sh DATA_BIN SUITE_DIR) and "
                             "report the papers' fine-tuning claims (studies with a fine-tuning "
                             "protocol: " + ", ".join(s.name for s in STUDIES.values()
                                                       if s.finetune) + ")")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the claims as docs/studies.md's Paper vs ours rows")
    figures.add_compare_arguments(parser)
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    if args.device is not None:
        study = dataclasses.replace(study, device=args.device)
    check_device(study.device)  # before the data: say what is missing first
    if args.compare is not None:  # read now: a wrong path is told before the training
        figures.figures_of(figures.load(args.compare), str(args.compare))
    data = args.data.resolve()
    if not (data / "dict.txt").is_file():
        raise SystemExit(f"error: --data {data} has no dict.txt: run scripts/prepare_corpus.sh "
                         "(or make demo) first, or point --data at a fairseq data-bin")
    if args.updates is not None and args.updates < 1:
        parser.error(f"--updates {args.updates}: give a positive number of updates")
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: give at least 1")
    downstream = None
    if args.downstream is not None:
        if study.finetune is None:
            parser.error(f"--downstream: study {study.name} has no fine-tuning protocol (those "
                         "that have: " + ", ".join(s.name for s in STUDIES.values() if s.finetune)
                         + ")")
        downstream = args.downstream.resolve()
        finetuning.load_suite(downstream)  # a wrong folder is told before the training
    runs_dir = (args.runs_dir or demo.REPO_ROOT / "runs" / "studies" / study.name).resolve()
    status = run(study, data, runs_dir, args.updates, args.seeds, args.workers,
                 args.keep_checkpoints, downstream=downstream)
    if status == 0 and args.markdown:
        report = json.loads((runs_dir / STUDY_JSON).read_text())
        print(markdown_claims(report))
        if report.get("finetune"):
            print()
            print(markdown_finetune(report))
    if status == 0 and args.compare is not None:
        status = figures.compare_files(args.compare, runs_dir / STUDY_JSON, args.tolerance)
    sys.exit(status)


def run(study: Study, data: Path, runs_dir: Path, updates: Optional[int] = None,
        seeds: Optional[Sequence[int]] = None, workers: int = demo.WORKERS,
        keep_checkpoints: bool = False, printer: Callable[[str], None] = print,
        downstream: Optional[Path] = None) -> int:
    """Plan, run (resuming), fine-tune on the ``downstream`` suite when given, report; the
    exit status. The study trains on ``study.device`` (``dataclasses.replace`` it to move it)."""
    check_study(study)
    check_device(study.device)
    start = time.time()
    # the checkout the runs start from; a GPU study's device too
    provenance = figures.provenance(demo.REPO_ROOT, threads=1 if study.device == "cpu" else None,
                                    device=study.device)
    seeds = tuple(seeds or study.seeds)
    study = dataclasses.replace(study, seeds=seeds)
    if study.device == "cuda" and workers != 1:  # the runs would share the GPU and its clock
        printer(f"== one run at a time on the GPU (not {workers})")
        workers = 1
    plan = plan_study(study, data, updates, seeds)
    budget = "equal training tokens" if study.budget == EQUAL_TOKENS else "equal training FLOPs"
    printer(f"== study {study.name}: {len(plan)} runs, {workers} at a time, into {runs_dir}; "
            f"{budget}: " + ", ".join(
                f"{p.model.name} {p.updates} updates" for p in plan if p.seed == seeds[0]))
    runs_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_wall_seconds(runs_dir)
    selection, selected_now = select_learning_rates(study, data, runs_dir, plan, workers, printer)
    if selection:
        plan = [dataclasses.replace(planned, model=with_lr(planned.model,
                                                           selection[planned.model.name]["lr"]))
                for planned in plan]
    results, trained = run_study(study, data, runs_dir, plan, workers, keep_checkpoints)
    this_time = time.time() - start
    # the study's wall time: every invocation that trained something, summed over resumes
    total = earlier + (this_time if trained or selected_now else 0.0)
    finetune_raw = None
    if downstream is not None:
        checkpoints = {(model.name, seed): Path(results[f"{model.name}/seed{seed}"]["run_dir"])
                       / "checkpoints" / "checkpoint_last.pt"
                       for model in study.models for seed in seeds}
        finetune_raw = finetuning.run_stage(study.finetune, {m.name: m for m in study.models},
                                            seeds, checkpoints, downstream, runs_dir, workers,
                                            printer)
    _report, text = report_study(study, results, data, runs_dir, total, selection, provenance,
                                 finetune_raw)
    printer(text)
    printer(f"figures: {runs_dir / STUDY_JSON}")
    printer(f"study wall time: {total / 60:.1f} min of pre-training over the invocations that "
            f"trained (this one {this_time / 60:.1f} min; finished runs read back cost nothing)"
            + ("" if finetune_raw is None else
               f"; fine-tuning {finetune_raw['wall_seconds'] / 60:.1f} min"))
    return 0


def earlier_wall_seconds(runs_dir: Path) -> float:
    """The wall time earlier invocations spent on this runs directory (``study.json``'s
    ``wall_seconds``; 0 without one)."""
    path = runs_dir / STUDY_JSON
    if not path.is_file():
        return 0.0
    return float(json.loads(path.read_text()).get("wall_seconds") or 0.0)


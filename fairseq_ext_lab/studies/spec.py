"""Declaring a study: :class:`Study`, :class:`StudyModel`, :class:`Claim`, their checks
(:func:`check_study`) and the registry :data:`STUDIES`, with what every study shares (the
budgets, the learning-rate grid, the fine-tuning claim helpers).

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
from typing import Dict, Optional, Sequence, Tuple

from fairseq_ext_lab import finetuning
from fairseq_ext_lab.finetuning import FinetuneProtocol
from fairseq_ext_lab.recipe_runs import BIDIRECTIONAL_R_VALUES, RecipeRun

#: A study's budget: equal analytic training FLOPs, or equal training tokens (equal updates).
EQUAL_FLOPS, EQUAL_TOKENS = "flops", "tokens"
#: The learning-rate selection (its seed: :data:`~fairseq_ext_lab.run_store.SELECTION_SEED`):
#: its runs' directory under the study's runs directory, and the share of the training split
#: held out to score them on.
SELECTION_DIR, HELDOUT_SHARE = "lr-selection", 0.05
STUDY_JSON, STUDY_PLOT = "study.json", "curves.png"
MASKED_LM, BIDIRECTIONAL = "masked_lm", "bidirectional"
#: A fine-tuning claim's metric: dev accuracy after fine-tuning, averaged over the suite's tasks
#: (:mod:`fairseq_ext_lab.finetuning`), as the papers average GLUE.
FINETUNE_METRIC = "finetune_avg"
#: What counts as "on par" after fine-tuning: 1 accuracy point of the task average, fixed before
#: any run (3ML's Table 3 calls 84.8 against 85.0 "slightly worse").
ON_PAR_POINTS = 1.0
#: Bidirectional evaluation: R values of the suffix-ppl and infilling columns (the demo's; its
#: 4 masked positions per document too).
R_VALUES = BIDIRECTIONAL_R_VALUES


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
#: The claim that compares two runs' whole pre-training on the wall clock (fairseq's logged
#: ``wall`` at its last record): under an equal-updates budget, the measured speedup.
SHORTER_TRAINING = "shorter_training"
#: Claims that read the [MASK]-loss runs' curves (a masked-LM study's).
CURVE_KINDS = (*REACH_AXES, SHORTER_TRAINING)
CLAIM_KINDS = ("better", "on_par", *CURVE_KINDS)


@dataclasses.dataclass(frozen=True)
class StudyModel:
    """One model of a study: its recipe, the environment it runs with and flags appended to the
    recipe's fairseq-train command (a shape)."""

    name: str
    recipe: str
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    args: Tuple[str, ...] = ()

    def run(self, seed: Optional[int] = None) -> RecipeRun:
        seed_args = () if seed is None else ("--seed", str(seed))
        return RecipeRun(self.name, self.recipe, dict(self.env), args=(*self.args, *seed_args))


#: ``Claim.source`` of a comparison the paper does not make: a question of ours, labelled so.
OUR_QUESTION = "our question"
#: The verdict of a claim its proxy cannot test (``Claim.untestable_by_proxy``): never holds or
#: fails, whatever the proxy reads.
NOT_TESTABLE = "not testable by this proxy"


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
      do not share the device);
    * ``"shorter_training"``: ``a``'s whole pre-training takes less wall-clock time than
      ``b``'s (the ratio of the two runs' last logged ``wall``, paired on the seed, below 1):
      under :data:`EQUAL_TOKENS` (the same updates, as 3ML's Table 3 first block trains), the
      measured speedup; beside a fine-tuning claim that ``a`` is on par with ``b``, the
      wall-clock time ``a`` takes to ``b``'s fine-tuned accuracy.

    ``metric``: ``"mask_loss"`` (bits) for masked LMs; for bidirectional LMs a column,
    ``"full"``, ``"suffix:R"`` or ``"infill:R"``, with ``metric_b`` where ``b`` is read at
    another R (its rows are paired by document and position).

    Where it comes from: ``source`` is the paper's table, figure or section
    (:data:`OUR_QUESTION` for a comparison the paper does not make), ``paper_metric`` the metric
    the paper reports it in and ``paper_figure`` the paper's own figures, in its direction;
    ``proxy`` says the study measures another metric than the paper's (a pre-training loss in
    place of GLUE), and ``differs`` what else is not as in the paper (scale, budget, data).
    ``untestable_by_proxy`` (a proxy claim): why the proxy cannot test the claim, e.g. where the
    paper's own figures predict the proxy against a claim it makes in its metric; such a
    claim's verdict is :data:`NOT_TESTABLE` whatever the proxy reads (its figures are shown
    all the same).

    ``per_task`` (fine-tuning claims): read on every task of the suite as well as on its
    average (the "pre-training helps" claims, :func:`pretraining_helps_claims`).

    ``paper_effect``: the paper's own difference in the unit we measure (accuracy points for
    fine-tuning and infilling, ppl for ppl), positive in the claim's direction (``a`` better),
    e.g. 84.4 - 79.6 = 4.8 for Table 9's MskBi; None where the units differ (a [MASK]-loss
    proxy of a GLUE claim) or the paper gives none. The report prints it beside the claim's
    minimum detectable effect, and a claim that cannot detect it is **underpowered**
    (:mod:`.power`).
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
    paper_effect: Optional[float] = None
    untestable_by_proxy: str = ""

    @property
    def ours(self) -> bool:
        return self.source == OUR_QUESTION


@dataclasses.dataclass(frozen=True)
class Study:
    """A comparison: models (the first is the baseline whose ``baseline_updates`` set the
    budget), seeds, the kind of evaluation, the claims and the wall-time budget.

    ``device``: where the runs train and are scored, ``"cpu"`` (:data:`~fairseq_ext_lab.
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
    budget: str = EQUAL_FLOPS
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
        if claim.kind in CURVE_KINDS and study.kind != MASKED_LM:
            problems.append(f"claim {claim.text!r}: {claim.kind} needs [MASK]-loss curves")
        if claim.kind == "on_par" and not (claim.margin or 0) > 0:
            problems.append(f"claim {claim.text!r}: on_par needs a positive margin (what counts "
                            "as on par, in the metric's unit)")
        if not claim.ours and not (claim.paper_metric and claim.paper_figure):
            problems.append(f"claim {claim.text!r} cites {claim.source!r}: give its "
                            "paper_metric and paper_figure, or make it OUR_QUESTION")
        if claim.untestable_by_proxy and not claim.proxy:
            problems.append(f"claim {claim.text!r}: untestable_by_proxy needs proxy=True (a "
                            "claim measured in the paper's own metric is tested by it)")
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
            if claim.untestable_by_proxy:
                problems.append(f"fine-tuning claim {claim.text!r}: untestable_by_proxy is for "
                                "a pre-training claim read through a proxy")
    elif study.finetune_claims:
        problems.append("fine-tuning claims without a fine-tuning protocol")
    if problems:
        raise SystemExit(f"error: study {study.name}: " + "; ".join(problems))


SEEDS = (1, 2, 3)
#: A study's fine-tuning seeds: one run per (arm, pre-training seed, task, learning rate), the
#: rate chosen per pre-training seed on the selection split; the fine-tuning noise
#: is in the spread over pre-training seeds, which the claims' intervals read. Pre-training
#: seeds buy more than fine-tuning seeds: they carry both noises.
STUDY_FINETUNE_SEEDS = (1,)
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


def finetune_differs(where: str = "on the CPU") -> str:
    """What differs from the papers for every fine-tuning claim of a study whose fine-tuning
    runs ``where``."""
    return ("the downstream suite (3 tasks of real text from the machine: Debian package "
            "sections, WordNet definition topics, fortune topics; 1,500 dev rows each; "
            f"docs/downstream.md) in place of GLUE; 2 epochs of 1,000 examples {where}; the lr "
            "of a 3-point grid chosen per pre-training seed on 500 held-out selection rows, not "
            "the best dev score")


#: What differs from the papers for every fine-tuning claim (the CPU studies').
FINETUNE_DIFFERS = finetune_differs()


def finetune_claims(*claims: Claim, differs: str = FINETUNE_DIFFERS) -> Tuple[Claim, ...]:
    """Fine-tuning claims, each saying what differs from its paper: ``differs`` (the suite,
    the schedule), then the claim's own difference if it has one."""
    return tuple(dataclasses.replace(claim, differs="; ".join(
        part for part in (differs, claim.differs) if part)) for claim in claims)


#: What the "pre-training helps" claims measure: the control every other fine-tuning claim
#: needs.
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

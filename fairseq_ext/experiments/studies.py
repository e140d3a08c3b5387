"""Studies: each paper's headline claim measured at CPU scale, at equal analytic training FLOPs,
over several seeds, with error bars (``scripts/study.py``, ``recipes/studies/<name>.sh``).

A study (:class:`Study`, registered in :data:`STUDIES`) is one entry: its models (a recipe and
its overrides each, the first the baseline), its seeds, the baseline's updates (the budget:
every other model gets the updates that buy the same analytic training FLOPs,
:func:`fairseq_ext.experiments.demo.equal_flops_updates`), its kind of evaluation and the
paper's claims, each a :class:`Claim` naming two models and a metric. The runner:

1. trains every (model, seed) through the model's bash recipe (``--seed S`` appended), two
   runs at a time at one torch thread each, longest first, into
   ``<runs-dir>/<model>/seed<S>/``; a run is *finished* when its ``result.json`` exists (written
   atomically after training and evaluation); a finished run is never retrained, and a run
   directory without one (the study was killed there) is removed and redone;
2. evaluates each run: masked LMs by :mod:`fairseq_ext.evaluation.masked_lm_scores` at
   :data:`~fairseq_ext.experiments.demo.CURVE_POINTS` checkpoints, on the same valid positions
   (15%) for every model and seed; bidirectional LMs by stock ``fairseq-validate --eval-mode``
   runs (:func:`fairseq_ext.evaluation.bidirectional_report.evaluate_checkpoint`), the
   training-objective valid loss logged by fairseq at four points giving the curve;
3. prints per study a table of models (each figure the mean over seeds ± its standard error
   over seeds, :func:`~fairseq_ext.reporting.uncertainty.mean_over_seeds`, beside the trivial
   baseline: the training unigram for [MASK] loss, always guessing the commonest piece for
   infilling), and a table of claims: the measured difference, paired over the same evaluation
   rows within a seed and then over seeds
   (:func:`~fairseq_ext.reporting.uncertainty.paired_over_seeds`), and the verdict
   (:func:`verdict`): ``holds`` or ``fails`` when the difference is resolved (beyond
   :data:`~fairseq_ext.reporting.uncertainty.RESOLVED_AT` standard errors), else
   ``unresolved``;
4. writes ``study.json`` (every figure, per seed too, and the study's wall time summed over
   the invocations that trained and reported; one killed before its report adds nothing) and
   ``curves.png`` (valid loss against training PFLOPs, the mean over seeds with a ±1 SE band).

With three seeds the standard error over seeds is itself uncertain (2 degrees of freedom; a
t-test would ask for 4.3 SE, not 2): ``resolved`` follows the project's 2-SE rule, and the
per-seed figures are in ``study.json`` for anyone who wants a stricter test.

May import: see :mod:`fairseq_ext.experiments`.
"""
import argparse
import dataclasses
import json
import math
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_ext.experiments import demo
from fairseq_ext.reporting.text_tables import ascii_table
from fairseq_ext.reporting.uncertainty import (
    Estimate,
    mean_over_seeds,
    paired_over_seeds,
    perplexity,
)
from fairseq_ext.training.output_files import write_text

#: The file that marks a run finished (training and evaluation done), written last, atomically.
RESULT = "result.json"
STUDY_JSON, STUDY_PLOT = "study.json", "curves.png"
MASKED_LM, BIDIRECTIONAL = "masked_lm", "bidirectional"
#: Bidirectional evaluation: R values of the suffix-ppl and infilling columns (the demo's; its
#: 4 masked positions per document too).
R_VALUES = demo.BIDIRECTIONAL_R_VALUES
#: fairseq validations of a bidirectional run (its curve), and checkpoints of a masked-LM run.
CURVE_POINTS = demo.CURVE_POINTS
#: Valid batches of each of a bidirectional run's curve validations (the same first batches
#: every time; the full split is scored once, at the end, by the evaluation modes).
CURVE_VALID_BATCHES = 25


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


@dataclasses.dataclass(frozen=True)
class Claim:
    """One of the paper's claims, as a comparison of model ``a`` with model ``b``.

    ``kind``:

    * ``"better"``: ``a`` has the better ``metric`` (lower loss or ppl, higher accuracy);
    * ``"on_par"``: neither is resolved better (``fails`` when one is);
    * ``"fewer_flops"``: ``a`` reaches ``b``'s final [MASK] loss with fewer training FLOPs
      (the ratio of its PFLOPs to reach it over ``b``'s whole budget is below 1).

    ``metric``: ``"mask_loss"`` (bits) for masked LMs; for bidirectional LMs a column,
    ``"full"``, ``"suffix:R"`` or ``"infill:R"``, with ``metric_b`` where ``b`` is read at
    another R (its rows are paired by document and position).
    """

    text: str
    kind: str
    a: str
    b: str
    metric: str = "mask_loss"
    metric_b: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Study:
    """A comparison: models (the first is the baseline whose ``baseline_updates`` set the
    FLOP budget), seeds, the kind of evaluation, the claims and the wall-time budget."""

    name: str
    title: str
    kind: str
    models: Tuple[StudyModel, ...]
    seeds: Tuple[int, ...]
    baseline_updates: int
    claims: Tuple[Claim, ...]
    minutes: int = 60
    notes: str = ""

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
    if study.baseline_updates < 1:
        problems.append(f"baseline_updates must be positive, got {study.baseline_updates}")
    for claim in study.claims:
        if {claim.a, claim.b} - set(names):
            problems.append(f"claim {claim.text!r} names models outside {names}")
        if claim.kind not in ("better", "on_par", "fewer_flops"):
            problems.append(f"claim {claim.text!r}: unknown kind {claim.kind!r}")
        if claim.kind == "fewer_flops" and study.kind != MASKED_LM:
            problems.append(f"claim {claim.text!r}: fewer_flops needs [MASK]-loss curves")
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


register_study(Study(
    name="3ml",
    title="3ML (Liao et al. 2022): mask more, mask later",
    kind=MASKED_LM,
    models=(
        StudyModel("roberta-15%", "recipes/roberta/demo.sh", {"MASK_PROB": "0.15"},
                   THREE_ML_ENCODER),
        StudyModel("3ml-self-40%", "recipes/3ml/demo.sh", {"MASK_PROB": "0.4"},
                   THREE_ML_ENCODER + THREE_ML_DECODER),
        StudyModel("3ml-cross-40%", "recipes/3ml/demo.sh",
                   {"MASK_PROB": "0.4", "ARCH": "3ml_cross_mini"},
                   THREE_ML_ENCODER + THREE_ML_DECODER),
    ),
    seeds=SEEDS,
    baseline_updates=800,
    claims=(
        Claim("3ML-self-40% reaches RoBERTa-15%'s [MASK] loss with fewer training FLOPs "
              "(Table 3)", "fewer_flops", "3ml-self-40%", "roberta-15%"),
        Claim("3ML-cross-40% reaches RoBERTa-15%'s [MASK] loss with fewer training FLOPs "
              "(Table 3)", "fewer_flops", "3ml-cross-40%", "roberta-15%"),
        Claim("3ML-self-40% has a lower [MASK] loss than RoBERTa-15% at the budget",
              "better", "3ml-self-40%", "roberta-15%"),
        Claim("3ML-cross-40% has a lower [MASK] loss than RoBERTa-15% at the budget",
              "better", "3ml-cross-40%", "roberta-15%"),
    ),
    minutes=60,
    notes="6 layers x 192 (3 heads), a 1-layer decoder of dim 32 (THREE_ML_ENCODER/DECODER): "
          "the smallest shape where the analytic 3ML-self-40% speedup is >= 1.2 (1.21); the "
          "demo recipes' settings otherwise (one line per sample, pre-LN, lr 2e-3).",
))

register_study(Study(
    name="swishrnn",
    title="SwishRNN (Lei et al.): simple recurrence in place of the FFN",
    kind=MASKED_LM,
    models=(
        StudyModel("bert-rab", "recipes/swishrnn/demo.sh", {"ARCH": "bert_rab_mini"}),
        StudyModel("bert-orig", "recipes/swishrnn/demo.sh", {"ARCH": "bert_orig_mini"}),
        StudyModel("swishrnn-bert", "recipes/swishrnn/demo.sh", {},
                   ("--swishrnn-step-sizes", "1,2,4")),
        StudyModel("swishrnn-bert-k1", "recipes/swishrnn/demo.sh", {},
                   ("--swishrnn-step-sizes", "1")),
    ),
    seeds=SEEDS,
    baseline_updates=800,
    claims=(
        Claim("SwishRNN-BERT (steps 1,2,4) has a lower MLM loss than BERT-rab (Figure 4)",
              "better", "swishrnn-bert", "bert-rab"),
        Claim("SwishRNN-BERT (steps 1,2,4) has a lower MLM loss than BERT-orig (Figure 4)",
              "better", "swishrnn-bert", "bert-orig"),
        Claim("BERT-rab has a lower MLM loss than BERT-orig (Figure 4)",
              "better", "bert-rab", "bert-orig"),
        Claim("SwishRNN-BERT with k = 1 alone has a lower MLM loss than BERT-rab",
              "better", "swishrnn-bert-k1", "bert-rab"),
        Claim("steps 1,2,4 are on par with k = 1 (Section 3, Table 2)",
              "on_par", "swishrnn-bert", "swishrnn-bert-k1"),
    ),
    minutes=60,
    notes="mini size (2 layers x 128), the demo recipe's settings (one line per sample, pre-LN, "
          "lr 2e-3); BERT-rab's 800 updates set the budget.",
))


def _bidirectional(variant: str) -> StudyModel:
    return StudyModel(variant, "recipes/bidirectional/demo.sh", {"VARIANT": variant})


register_study(Study(
    name="bidirectional",
    title="Generalized bidirectionality (Artetxe et al. 2022): the six variants of Table 1",
    kind=BIDIRECTIONAL,
    models=tuple(_bidirectional(variant) for variant in
                 ("nxt_uni", "nxt_pre", "msk_uni", "msk_bi", "hyb_uni", "hyb_pre")),
    seeds=SEEDS,
    baseline_updates=400,
    claims=(
        Claim("NxtUni has a better full-document ppl than NxtPre (Table 3)", "better",
              "nxt_uni", "nxt_pre", "full"),
        Claim("NxtUni has a better full-document ppl than HybUni (Table 3)", "better",
              "nxt_uni", "hyb_uni", "full"),
        Claim("HybUni has a better full-document ppl than HybPre (Table 3)", "better",
              "hyb_uni", "hyb_pre", "full"),
        Claim("NxtPre has a better full-document ppl than HybUni at small scale (Table 3)",
              "better", "nxt_pre", "hyb_uni", "full"),
        Claim("NxtUni has a better suffix ppl than NxtPre at R = 1 (Table 4)", "better",
              "nxt_uni", "nxt_pre", "suffix:1", "suffix:1"),
        Claim("NxtPre's suffix ppl is better at R = 1 than at R = 0 (Table 4)", "better",
              "nxt_pre", "nxt_pre", "suffix:1", "suffix:0"),
        Claim("HybPre's suffix ppl is better at R = 1 than at R = 0 (Table 4)", "better",
              "hyb_pre", "hyb_pre", "suffix:1", "suffix:0"),
        Claim("MskBi infills better than MskUni (Table 5)", "better",
              "msk_bi", "msk_uni", "infill:1", "infill:0"),
        Claim("MskBi infills better than HybPre at R = 1 (Table 5)", "better",
              "msk_bi", "hyb_pre", "infill:1", "infill:1"),
        Claim("MskUni infills better than HybUni (Table 5, small models)", "better",
              "msk_uni", "hyb_uni", "infill:0", "infill:0"),
        Claim("HybPre at R = 0 infills better than HybUni (Table 5, small models)", "better",
              "hyb_pre", "hyb_uni", "infill:0", "infill:0"),
        Claim("HybPre infills better at R = 1 than at R = 0 (Table 5)", "better",
              "hyb_pre", "hyb_pre", "infill:1", "infill:0"),
    ),
    minutes=60,
    notes="bidir_lm_mini, the demo recipe's settings (one line per document, 2,048 tokens an "
          "update, lr 2e-3); NxtUni predicts every token, so its 400 updates set the budget. "
          "Table 6 (re-ranking with scripts/infill_rescore.py) is not in the study: it costs "
          "minutes per checkpoint and pair.",
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


def run_dir_of(runs_dir: Path, model_name: str, seed: int) -> Path:
    return runs_dir / model_name.replace("%", "pct") / f"seed{seed}"


def plan_study(study: Study, data: Path, baseline_updates: Optional[int] = None,
               seeds: Optional[Sequence[int]] = None) -> List[PlannedRun]:
    """Every (model, seed) at the baseline's analytic training FLOPs
    (:func:`~fairseq_ext.experiments.demo.equal_flops_updates`: the seed does not change a
    model's FLOPs per update)."""
    runs = [model.run() for model in study.models]
    updates = demo.equal_flops_updates(runs, data, baseline_updates or study.baseline_updates)
    return [PlannedRun(model, seed, count) for model, count in zip(study.models, updates)
            for seed in (seeds or study.seeds)]


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
    return result


def prepare_run_dir(run_dir: Path) -> None:
    """Make way for a run: a directory without :data:`RESULT` is a run the study was killed
    in (half-trained, or trained and not evaluated); it is removed and redone."""
    if run_dir.exists():
        demo.say(f"== {run_dir}: an unfinished run (no {RESULT}); removing it and starting again")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)


def train_and_evaluate(study: Study, planned: PlannedRun, data: Path, run_dir: Path,
                       keep_checkpoints: bool = False) -> dict:
    """Train one (model, seed) through its recipe and evaluate it; write :data:`RESULT`."""
    prepare_run_dir(run_dir)
    run = planned.model.run(planned.seed)
    save_every, log_every = demo.curve_intervals(planned.updates)
    demo.say(f"== {planned.key}: training {planned.updates} updates ({run.recipe})")
    if study.kind == MASKED_LM:
        row = demo.train(run, data, run_dir, planned.updates,
                         ["--disable-validation", "--save-interval-updates", str(save_every),
                          "--keep-interval-updates", "-1"], log_every,
                         extra_env=demo.ONE_THREAD, concurrent=True)
        scores = demo.score_run(data, run_dir, row["updates"])
        row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "valid_loss": p.valid_loss}
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
                         extra_env=demo.ONE_THREAD, concurrent=True)
        log = curves.read_log(run_dir / "train.log")
        row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "valid_loss": p.valid_loss}
                        for p in curves.map_valid_to_train(log.train, log.valid)]
        evaluation = evaluate_checkpoint(
            data, run_dir / "checkpoints" / "checkpoint_last.pt", R_VALUES, cpu=True,
            log_dir=run_dir, infill_positions=demo.BIDIRECTIONAL_INFILL_POSITIONS,
            env=demo.ONE_THREAD)
        evaluation["scores"] = {mode: None if path is None else str(Path(path).relative_to(run_dir))
                                for mode, path in evaluation["scores"].items()}
        evaluation["checkpoint"] = str(Path(evaluation["checkpoint"]).relative_to(run_dir))
        row.update(evaluation)
    if not keep_checkpoints:  # the interval checkpoints were scored: keep the last one only
        for path in (run_dir / "checkpoints").glob("checkpoint_*_*.pt"):
            path.unlink()
    row.update({"study": study.name, "model": planned.model.name, "seed": planned.seed,
                "planned_updates": planned.updates})
    write_text(run_dir / RESULT, json.dumps(row, indent=2, default=str), force=False)
    return row


def run_study(study: Study, data: Path, runs_dir: Path, plan: Sequence[PlannedRun],
              workers: int = demo.WORKERS,
              keep_checkpoints: bool = False) -> Tuple[Dict[str, dict], int]:
    """Every planned run, ``workers`` at a time, finished ones read back: ``({key: result}``
    with each result's ``run_dir``, the number of runs trained now)."""
    results: Dict[str, dict] = {}
    pending: List[PlannedRun] = []
    for planned in plan:
        run_dir = run_dir_of(runs_dir, planned.model.name, planned.seed)
        result = load_result(run_dir, planned)
        if result is None:
            pending.append(planned)
        else:
            demo.say(f"== {planned.key}: finished earlier ({run_dir / RESULT}); not retrained")
            results[planned.key] = result
    # model by model, as planned: at equal FLOPs the runs take about the same time
    lock = threading.Lock()

    def one(planned: PlannedRun) -> None:
        run_dir = run_dir_of(runs_dir, planned.model.name, planned.seed)
        start = time.time()
        result = train_and_evaluate(study, planned, data, run_dir, keep_checkpoints)
        demo.say(f"== {planned.key}: done in {time.time() - start:.0f} s "
                 f"(training {result['train_wall_sec']:.0f} s)")
        with lock:
            results[planned.key] = result

    if pending:
        with ThreadPoolExecutor(max_workers=min(workers, len(pending))) as pool:
            for future in [pool.submit(one, planned) for planned in pending]:
                future.result()
    for planned in plan:
        results[planned.key]["run_dir"] = str(run_dir_of(runs_dir, planned.model.name,
                                                         planned.seed))
    return results, len(pending)


# ----------------------------------------------------------------------------------------------
# Figures

def verdict(difference: Estimate, kind: str = "better") -> str:
    """A claim's verdict from ``a - b`` expressed so that **negative means a is better**:
    ``better``: ``holds`` when resolved below 0, ``fails`` when resolved above, else
    ``unresolved``; ``on_par``: ``fails`` when resolved either way, else ``holds``."""
    if not math.isfinite(difference.value) or not math.isfinite(difference.standard_error):
        return "unresolved"
    if kind == "on_par":
        return "fails" if difference.resolved() else "holds"
    if not difference.resolved():
        return "unresolved"
    return "holds" if difference.value < 0 else "fails"


def masked_lm_scores_of(result: dict):
    """``{updates: SequenceScores}`` of a finished masked-LM run."""
    from fairseq_ext.evaluation.masked_lm_scores import SequenceScores

    run_dir = Path(result["run_dir"])
    scores = json.loads((run_dir / result["scores_file"]).read_text())["scores"]
    by_path = {str(run_dir / path): updates for updates, path in result["checkpoint_files"].items()}
    return {int(by_path[path]): SequenceScores.from_json(record)
            for path, record in scores.items() if path in by_path}


def final_scores(result: dict):
    scores = masked_lm_scores_of(result)
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
               "analytic_pflops": per_seed[0]["updates"] * per_seed[0]["analytic_pflops_per_update"],
               "counted_pflops": mean_over_seeds([r["train_pflops"] or math.nan
                                                  for r in per_seed]).value,
               "sec_per_update": mean_over_seeds([r["sec_per_update"] for r in per_seed]).value,
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
        if claim.kind == "fewer_flops":
            ratios = []
            for s in seeds:
                target = finals[(claim.b, s)].loss_bits().value
                budget = results[f"{claim.b}/seed{s}"]["curve"][-1]["pflops"]
                reached = flops_to_reach(results[f"{claim.a}/seed{s}"]["curve"], target)
                ratios.append(math.inf if reached is None else reached / budget)
            finite = [r for r in ratios if math.isfinite(r)]
            if len(finite) == len(ratios):
                ratio = mean_over_seeds(ratios)
                measured = Estimate(ratio.value - 1.0, ratio.standard_error)
                text = f"FLOP ratio to reach it {fmt(ratio, 3)}"
                outcome = verdict(measured)
            else:
                ratio, outcome = Estimate(math.nan, math.nan), (
                    "fails" if not finite else "unresolved")
                text = (f"not reached within the budget in {len(ratios) - len(finite)} of "
                        f"{len(ratios)} seeds")
            claims.append({"claim": claim.text, "measured": text, "verdict": outcome,
                           "ratio": ratio.value, "ratio_se": ratio.standard_error,
                           "per_seed": dict(zip(map(str, seeds), ratios))})
        else:
            values = [paired_difference_bits(finals[(claim.a, s)], finals[(claim.b, s)]).value
                      for s in seeds]
            difference = mean_over_seeds(values)  # each value already paired within its seed
            claims.append({"claim": claim.text,
                           "measured": f"{claim.a} - {claim.b}: {fmt(difference, 3, True)} bits",
                           "verdict": verdict(difference, claim.kind),
                           "difference": difference.value, "difference_se":
                           difference.standard_error, "per_seed": dict(zip(map(str, seeds),
                                                                             values))})
    return {"models": rows, "claims": claims}


def flops_to_reach(curve: Sequence[dict], target: float) -> Optional[float]:
    """:func:`fairseq_ext.experiments.demo.flops_to_reach` on a stored curve."""
    from fairseq_ext.reporting.curves import CurvePoint

    return demo.flops_to_reach([CurvePoint(p["updates"], p["pflops"], 0.0, p["valid_loss"],
                                           p["updates"]) for p in curve], target)


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


def lower_is_better(column: str) -> bool:
    return not column.startswith("infill")


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
        row["analytic_pflops"] = first["updates"] * first["analytic_pflops_per_update"]
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
            claims.append({"claim": claim.text, "measured": "not measured: no shared rows",
                           "verdict": "unresolved"})
            continue
        difference = paired_over_seeds(figures_a, figures_b)
        # a's figure minus b's, signed so that negative means a is better
        signed = difference if lower_is_better(column_a) else Estimate(
            -difference.value, difference.standard_error)
        unit = "points" if column_a.startswith("infill") else "ppl"
        claims.append({"claim": claim.text,
                       "measured": f"{claim.a} {column_a} - {claim.b} {column_b}: "
                                   f"{fmt(difference, 2, True)} {unit}",
                       "verdict": verdict(signed, claim.kind), "difference": difference.value,
                       "difference_se": difference.standard_error,
                       "per_seed": dict(zip(map(str, seeds), differences))})
    return {"models": rows, "baseline": baseline_row, "columns": columns, "claims": claims,
            "piece": symbol, "baseline_gaps": gaps}


def estimate_fields(prefix: str, estimate: Estimate) -> Dict[str, float]:
    return {prefix: estimate.value, f"{prefix}_se": estimate.standard_error}


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
    return fmt(Estimate(row[prefix], row.get(f"{prefix}_se", math.nan)), digits, signed)


def format_report(study: Study, report: dict) -> str:
    """The study's two tables: models, then claims."""
    seeds = len(study.seeds)
    lines = [f"{study.title}: {seeds} seeds, equal analytic training FLOPs; mean ± SE over seeds"
             " (* beyond 2 SE)"]
    if study.kind == MASKED_LM:
        header = ["model", "updates", "analytic PFLOPs", "counted PFLOPs", "s/update",
                  "[MASK] loss (bits)", "below unigram", f"vs {study.models[0].name}, paired"]
        table = [[row["name"], str(row.get("updates", "-")),
                  f"{row['analytic_pflops']:.4f}" if "analytic_pflops" in row else "-",
                  f"{row['counted_pflops']:.4f}" if "counted_pflops" in row else "-",
                  f"{row['sec_per_update']:.3f}" if "sec_per_update" in row else "-",
                  field(row, "mask_loss"), field(row, "below_unigram", 3, True),
                  field(row, "vs_baseline", 3, True)] for row in report["models"]]
    else:
        header = ["model", "updates", "analytic PFLOPs"] + [
            column.replace(":", " R=") for column in report["columns"]]
        table = [[row["name"], str(row.get("updates", "-")),
                  f"{row['analytic_pflops']:.4f}" if "analytic_pflops" in row else "-"]
                 + [field(row, column, 2) for column in report["columns"]]
                 for row in [*report["models"], report["baseline"]]]
    lines.append(ascii_table(header, table))
    if report.get("baseline_gaps"):
        lines.append(ascii_table(
            ["infilling model", "column", f"minus always {report['piece']!r}, paired", "in SEs"],
            [[gap["model"], gap["column"].replace(":", " R="),
              fmt(Estimate(gap["gap"], gap["gap_se"]), 2, True),
              f"{gap['standard_errors']:.1f}"] for gap in report["baseline_gaps"]]))
    lines.append(ascii_table(["claim", "measured (a - b, paired within seed, ± SE over seeds)",
                              "verdict"],
                             [[c["claim"], c["measured"], c["verdict"]] for c in report["claims"]]))
    return "\n".join(lines)


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
    plot_bands(bands, out, f"{study.title}\n(mean over {len(study.seeds)} seeds, ±1 SE)",
               ylabel, reference=reference)
    return out


def report_study(study: Study, results: Dict[str, dict], data: Path, runs_dir: Path,
                 wall_seconds: float) -> Tuple[dict, str]:
    """The report's figures and text; writes ``study.json`` and ``curves.png`` (replacing the
    previous report of this runs directory: both are recomputed from the runs' results).
    ``wall_seconds``: the study's wall time over every invocation that trained."""
    report = (masked_lm_report(study, results) if study.kind == MASKED_LM
              else bidirectional_report(study, results, data))
    report.update({"study": study.name, "title": study.title, "seeds": list(study.seeds),
                   "notes": study.notes, "wall_seconds": wall_seconds,
                   "runs": {key: {k: v for k, v in result.items() if k != "curve"}
                            for key, result in results.items()},
                   "curves": {key: result["curve"] for key, result in results.items()}})
    text = format_report(study, report)
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
                        help="runs at a time, one torch thread each (default: %(default)s)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the scored interval checkpoints (default: the last only)")
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    data = args.data.resolve()
    if not (data / "dict.txt").is_file():
        raise SystemExit(f"error: --data {data} has no dict.txt: run scripts/prepare_corpus.sh "
                         "(or make demo) first, or point --data at a fairseq data-bin")
    if args.updates is not None and args.updates < 1:
        parser.error(f"--updates {args.updates}: give a positive number of updates")
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: give at least 1")
    runs_dir = (args.runs_dir or demo.REPO_ROOT / "runs" / "studies" / study.name).resolve()
    sys.exit(run(study, data, runs_dir, args.updates, args.seeds, args.workers,
                 args.keep_checkpoints))


def run(study: Study, data: Path, runs_dir: Path, updates: Optional[int] = None,
        seeds: Optional[Sequence[int]] = None, workers: int = demo.WORKERS,
        keep_checkpoints: bool = False, printer: Callable[[str], None] = print) -> int:
    """Plan, run (resuming), report; the exit status."""
    check_study(study)
    start = time.time()
    seeds = tuple(seeds or study.seeds)
    study = dataclasses.replace(study, seeds=seeds)
    plan = plan_study(study, data, updates, seeds)
    printer(f"== study {study.name}: {len(plan)} runs, {workers} at a time, into {runs_dir}; "
            "equal training FLOPs: " + ", ".join(
                f"{p.model.name} {p.updates} updates" for p in plan if p.seed == seeds[0]))
    runs_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_wall_seconds(runs_dir)
    results, trained = run_study(study, data, runs_dir, plan, workers, keep_checkpoints)
    this_time = time.time() - start
    # the study's wall time: every invocation that trained something, summed over resumes
    total = earlier + (this_time if trained else 0.0)
    _report, text = report_study(study, results, data, runs_dir, total)
    printer(text)
    printer(f"figures: {runs_dir / STUDY_JSON}")
    printer(f"study wall time: {total / 60:.1f} min over the invocations that trained (this "
            f"one {this_time / 60:.1f} min; finished runs read back cost nothing)")
    return 0


def earlier_wall_seconds(runs_dir: Path) -> float:
    """The wall time earlier invocations spent on this runs directory (``study.json``'s
    ``wall_seconds``; 0 without one)."""
    path = runs_dir / STUDY_JSON
    if not path.is_file():
        return 0.0
    return float(json.loads(path.read_text()).get("wall_seconds") or 0.0)


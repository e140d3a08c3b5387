"""Studies: each paper's claims as the paper states them, measured at CPU scale over several
seeds, with error bars (``scripts/study.py``, ``recipes/studies/<name>.sh``, docs/studies.md).

A study (:class:`Study`, registered in :data:`STUDIES`) is one entry: its models (a recipe and
its overrides each, the first the baseline), its seeds, the baseline's updates and the budget
(:data:`EQUAL_FLOPS`: every other model gets the updates that buy the same analytic training
FLOPs, :func:`fairseq_ext_lab.budget.equal_flops_updates`; :data:`EQUAL_TOKENS`: the
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
2. evaluates each run: masked LMs by :mod:`fairseq_ext_lab.evaluation.masked_lm_scores` at
   :data:`~fairseq_ext_lab.recipe_runs.CURVE_POINTS` checkpoints, on the same valid positions
   (15%) for every model and seed; bidirectional LMs by stock ``fairseq-validate --eval-mode``
   runs (:func:`fairseq_ext_lab.evaluation.bidirectional_report.evaluate_checkpoint`), the
   training-objective valid loss logged by fairseq at four points giving the curve;
3. prints per study a table of models (each figure the mean over seeds ± its standard error
   over seeds, :func:`~fairseq_ext.reporting.uncertainty.mean_over_seeds`, beside the trivial
   baseline: the training unigram for [MASK] loss, always guessing the commonest piece for
   infilling), the learning rates chosen, and a table of claims: the measured difference, paired
   over the same evaluation rows within a seed and then over seeds
   (:func:`~fairseq_ext.reporting.uncertainty.paired_over_seeds`), its 95% t interval over seeds
   (``S - 1`` degrees of freedom: 4.30 SE for 3 seeds) and the verdict (:func:`verdict`:
   ``holds`` / ``fails`` when the interval excludes 0 on the paper's side / the other, else
   ``unresolved``; an ``on_par`` claim against its margin; a claim its proxy cannot test,
   ``Claim.untestable_by_proxy``: :data:`NOT_TESTABLE`, :func:`claim_verdict`);
4. writes ``study.json`` (every figure, per seed too, the flat ``figures`` and ``provenance``
   sections of :mod:`fairseq_ext_lab.reporting.figures` that ``--compare`` reads, and the study's
   wall time summed over the invocations that trained) and ``curves.png`` (valid loss against
   training PFLOPs, the mean over seeds with a ±1 SE band).

The package, one concern per module: :mod:`.spec` (the declarations' types, checks and
registry), :mod:`.catalog` (each paper's studies, declarations only), :mod:`.plan` and
:mod:`.runs` (planned runs; the resumable run store), :mod:`.kinds` (each kind of evaluation),
:mod:`.verdicts`, :mod:`.render` (text and markdown) and :mod:`.cli`.

May import: see :mod:`fairseq_ext_lab`.
"""
from fairseq_ext_lab.run_store import RESULT, SELECTION_SEED
from fairseq_ext_lab.studies import catalog  # noqa: F401  (registers the studies)
from fairseq_ext_lab.studies.catalog.bidirectional import (
    BIDIRECTIONAL_FINETUNE,
)
from fairseq_ext_lab.studies.catalog.swishrnn import (
    SWISHRNN_FINETUNE,
)
from fairseq_ext_lab.studies.catalog.three_ml import (
    THREE_ML_DECODER,
    THREE_ML_ENCODER,
    THREE_ML_FINETUNE,
    THREE_ML_FINETUNE_CLAIMS,
    THREE_ML_RANDOM_INIT,
    smallest_3ml_shape,
)
from fairseq_ext_lab.studies.cli import (
    main,
    run,
)
from fairseq_ext_lab.studies.kinds.bidirectional import (
    bidirectional_report,
)
from fairseq_ext_lab.studies.kinds.masked_lm import (
    masked_lm_report,
)
from fairseq_ext_lab.studies.plan import (
    PlannedRun,
    plan_study,
)
from fairseq_ext_lab.studies.render import (
    format_finetune,
    format_report,
    markdown_claims,
    markdown_finetune,
    pretraining_verdict,
    study_figures,
)
from fairseq_ext_lab.studies.runs import (
    run_environment,
    train_and_evaluate,
)
from fairseq_ext_lab.studies.spec import (
    BIDIRECTIONAL,
    EQUAL_TOKENS,
    FINETUNE_METRIC,
    GPU_RUN_ENV,
    HELDOUT_SHARE,
    LR_GRID,
    MASKED_LM,
    NOT_TESTABLE,
    OUR_QUESTION,
    SELECTION_DIR,
    SHORTER_TRAINING,
    STUDIES,
    STUDY_JSON,
    STUDY_PLOT,
    Claim,
    Study,
    StudyModel,
    check_study,
    pretraining_helps_claims,
)
from fairseq_ext_lab.studies.verdicts import (
    claim_fields,
    claim_verdict,
    finetune_report,
    interval_fields,
    verdict,
)

__all__ = [
    'BIDIRECTIONAL',
    'BIDIRECTIONAL_FINETUNE',
    'Claim',
    'EQUAL_TOKENS',
    'FINETUNE_METRIC',
    'GPU_RUN_ENV',
    'HELDOUT_SHARE',
    'LR_GRID',
    'MASKED_LM',
    'NOT_TESTABLE',
    'OUR_QUESTION',
    'PlannedRun',
    'RESULT',
    'SELECTION_DIR',
    'SELECTION_SEED',
    'SHORTER_TRAINING',
    'STUDIES',
    'STUDY_JSON',
    'STUDY_PLOT',
    'SWISHRNN_FINETUNE',
    'Study',
    'StudyModel',
    'THREE_ML_DECODER',
    'THREE_ML_ENCODER',
    'THREE_ML_FINETUNE',
    'THREE_ML_FINETUNE_CLAIMS',
    'THREE_ML_RANDOM_INIT',
    'bidirectional_report',
    'check_study',
    'claim_fields',
    'claim_verdict',
    'finetune_report',
    'format_finetune',
    'format_report',
    'interval_fields',
    'main',
    'markdown_claims',
    'markdown_finetune',
    'masked_lm_report',
    'plan_study',
    'pretraining_helps_claims',
    'pretraining_verdict',
    'run',
    'run_environment',
    'smallest_3ml_shape',
    'study_figures',
    'train_and_evaluate',
    'verdict',
]

"""The SwishRNN study (``swishrnn``): declarations only.

May import: see :mod:`fairseq_ext_lab`.
"""

from fairseq_ext_lab import finetuning
from fairseq_ext_lab.finetuning import FinetuneArm, FinetuneProtocol
from fairseq_ext_lab.studies.spec import (
    FINETUNE_METRIC,
    LR_GRID,
    MASKED_LM,
    MLM_PROXY,
    ON_PAR_BITS,
    ON_PAR_POINTS,
    STUDY_FINETUNE_SEEDS,
    Claim,
    Study,
    StudyModel,
    finetune_claims,
    pretraining_helps_claims,
    register_study,
)

#: SwishRNN's study depth: three layers, so that the interleaved step sizes 1, 2, 4 all run
#: (layer i takes ``step_sizes[i % 3]``; two layers would run 1 and 2 only).
SWISHRNN_LAYERS = ("--encoder-layers", "3")

#: SwishRNN fine-tunes the pre-training checkpoint with its arch flags again (App. B: Adam
#: without weight decay, a fixed lr after a linear warmup).
SWISHRNN_MODELS = ("bert-rab", "bert-orig", "swishrnn-bert", "swishrnn-bert-k1")
SWISHRNN_SEEDS = (1, 2, 3, 4, 5)
SWISHRNN_FINETUNE = FinetuneProtocol(
    recipe="recipes/swishrnn/finetune_glue.sh", checkpoint_env="PRETRAINED",
    arms=tuple(FinetuneArm(name, name) for name in SWISHRNN_MODELS)
    + tuple(finetuning.random_init_arm(name) for name in SWISHRNN_MODELS),
    env={"ARCH": "swishrnn_bert_mini", "MAX_POSITIONS": "64"}, model_env_keys=("ARCH",),
    model_args=True, extra_args=("--encoder-normalize-before",),
    seeds=STUDY_FINETUNE_SEEDS,
    schedule="SwishRNN App. B: Adam without weight decay, fixed lr after a 6% linear warmup")
SWISHRNN_FINETUNE_CLAIMS = pretraining_helps_claims(
    [(name, finetuning.random_init_arm(name).name) for name in SWISHRNN_MODELS]) + finetune_claims(
    Claim("SwishRNN-BERT (steps 1,2,4) fine-tunes better than BERT-rab", "better",
          "swishrnn-bert", "bert-rab", FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="84.0% against 81.0%", paper_effect=3.0),
    Claim("SwishRNN-BERT (steps 1,2,4) fine-tunes better than BERT-orig", "better",
          "swishrnn-bert", "bert-orig", FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="84.0% against 81.9%", paper_effect=2.1),
    Claim("Steps 1,2,4 fine-tune on par with a step of 1", "on_par", "swishrnn-bert",
          "swishrnn-bert-k1", FINETUNE_METRIC, source="SwishRNN, Table 2",
          paper_metric="GLUE dev results", paper_figure="on par (e.g. MNLI 85.9 both, base)",
          margin=ON_PAR_POINTS, differs="on par = within 1 point (ours, fixed in advance)"),
    Claim("BERT-orig fine-tunes better than BERT-rab", "better", "bert-orig", "bert-rab",
          FINETUNE_METRIC, source="SwishRNN, Table 1",
          paper_metric="GLUE and SuperGLUE dev average (base)",
          paper_figure="81.9% against 81.0%", paper_effect=0.9),
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
    # 5 seeds: the fine-tuning claims' effects are 0.9-3.0 points
    seeds=SWISHRNN_SEEDS,
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
    minutes=150,
    notes="3 layers x 128 (SWISHRNN_LAYERS: the step sizes 1, 2, 4 each run in one layer), the "
          "demo recipe's settings otherwise (one line per sample, pre-LN), each model at its "
          "best peak lr of LR_GRID on held-out training data; BERT-rab's 800 updates set the "
          "budget.",
    finetune=SWISHRNN_FINETUNE,
    finetune_claims=SWISHRNN_FINETUNE_CLAIMS,
))

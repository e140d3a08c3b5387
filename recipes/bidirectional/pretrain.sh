#!/usr/bin/env bash
# Generalized bidirectionality (Artetxe et al. 2022, "On the Role of Bidirectionality in
# Language Model Pre-Training", arXiv:2205.11726): pre-training of one variant of Table 1 at one
# size of Table 2 with the `bidirectional_lm` task, model and criterion.
#   DATA=data-bin/... VARIANT=hyb_pre SIZE=125m recipes/bidirectional/pretrain.sh
# Paper values (§3.1, Table 2): 100B tokens, sequences of 1024 tokens, documents packed with
# --sample-break-mode complete (footnote 3; a document is a run of lines ended by an empty line,
# DOCUMENT_FORMAT=blank_line_separated, or one line, DOCUMENT_FORMAT=lines), the batch in tokens and the peak lr of Table 2
# (125m: 0.5M tokens, 6e-4; 355m: 0.5M, 3e-4; 1_3b: 1M, 2e-4; 2_7b: 1M, 1.6e-4; 6_7b: 2M, 1.2e-4).
# Where the paper defers to Artetxe et al. (2021) we take their settings: Adam (0.9, 0.98),
# polynomial (linear) decay to 0, warmup over 375M tokens; eps 1e-8, weight decay 0.01, dropout
# 0.1, attention dropout 0.1 and clipping 1.0 are our choices (not stated by either paper).
# The masking rate p is 0.15 and 10% of the documents are plain LM (--plain-lm-prob 0.1).
# Table 2's "0.5M" tokens is 512 sequences of 1024 (524,288 tokens; 1M and 2M likewise), which
# makes 100B tokens 190,734 updates at 125m. MAX_TOKENS is per GPU; --update-freq makes
# BATCH_TOKENS = MAX_TOKENS x GPUs x NNODES x update_freq. Its hydra twin: recipes/config/bidirectional/pretrain_125m.yaml.
# Memory (the plan printed before training; docs/scaling.md): at 2_7b and 6_7b the recipe shards
# Adam's state (ZERO_SHARDING=os) and recomputes each layer's activations in the backward pass
# (CHECKPOINT_ACTIVATIONS=1: --checkpoint-activations, one more forward, about 1/3 more compute).
# 6.7B on 8 GPUs, 8 x 1024 tokens per GPU, fp32: 249 GB per GPU without recomputation and 99 GB
# with it (26.6 GB of it pytorch_ddp's bucket copy of the gradients), which does not fit an 80 GB
# GPU; so 6_7b defaults to PRECISION=--memory-efficient-fp16 OPTIMIZER=adam (fp16 weights and
# gradients, fp32 Adam state, no fp32 copy): 54.5 GB planned. 2.7B in fp32: 44.5 GB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

DATA="${DATA:?set DATA to a fairseq data-bin (scripts/prepare_corpus.sh makes one)}"
VARIANT="${VARIANT:-hyb_pre}"             # nxt_uni nxt_pre msk_uni msk_bi hyb_uni hyb_pre (Table 1)
SIZE="${SIZE:-125m}"                      # 125m 355m 1_3b 2_7b 6_7b (Table 2); small mini tiny for CPUs
ARCH="${ARCH:-bidir_lm_${SIZE}}"
sharding=none; recompute=0                # 2.7B, 6.7B: shard Adam's state, recompute activations (docs/scaling.md)
precision=""; optimizer=fused_adamw       # 6.7B: memory-efficient fp16 with fairseq's adam, to fit 80 GB
case "${SIZE}" in                         # Table 2: batch (tokens) and peak lr
  125m) table_batch=524288;  table_lr=0.0006 ;;
  355m) table_batch=524288;  table_lr=0.0003 ;;
  1_3b) table_batch=1048576; table_lr=0.0002 ;;
  2_7b) table_batch=1048576; table_lr=0.00016; sharding=os; recompute=1 ;;
  6_7b) table_batch=2097152; table_lr=0.00012; sharding=os; recompute=1
        precision=--memory-efficient-fp16; optimizer=adam ;;
  small|mini|tiny) table_batch=524288; table_lr=0.0006 ;;  # CPU sizes: 125m's settings
  *) die "SIZE=${SIZE}: use one of 125m 355m 1_3b 2_7b 6_7b (Table 2) or small mini tiny" ;;
esac
SAVE_DIR="${SAVE_DIR:-checkpoints/bidirectional/${VARIANT}_${SIZE}}"
TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-1024}"
SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-complete}"
DOCUMENT_FORMAT="${DOCUMENT_FORMAT:-blank_line_separated}"  # empty lines end documents (prepare_corpus.sh's layout); lines: one per line
MASK_PROB="${MASK_PROB:-0.15}"
PLAIN_LM_PROB="${PLAIN_LM_PROB:-0.1}"
BATCH_TOKENS="${BATCH_TOKENS:-${table_batch}}"  # effective batch, in tokens (Table 2 "bs")
MAX_TOKENS="${MAX_TOKENS:-8192}"          # per GPU; not a paper value
PEAK_LR="${PEAK_LR:-${table_lr}}"
TRAIN_TOKENS="${TRAIN_TOKENS:-100000000000}"   # 100B tokens (§3.1)
TOTAL_UPDATES="${TOTAL_UPDATES:-$(( TRAIN_TOKENS / BATCH_TOKENS ))}"
WARMUP_TOKENS="${WARMUP_TOKENS:-375000000}"    # Artetxe et al. (2021)
WARMUP_UPDATES="${WARMUP_UPDATES:-$(( (WARMUP_TOKENS + BATCH_TOKENS / 2) / BATCH_TOKENS ))}"
LR_POWER="${LR_POWER:-1}"
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-08}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"
CLIP_NORM="${CLIP_NORM:-1.0}"
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
CRITERION="${CRITERION:-bidirectional_lm}"
OPTIMIZER="${OPTIMIZER:-${optimizer}}"
SEED="${SEED:-1}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-2000}"
NUM_WORKERS="${NUM_WORKERS:-2}"
CPU="${CPU:-0}"
PRECISION="${PRECISION-${precision}}"     # empty (fp32), --fp16 or --memory-efficient-fp16 on GPUs (bf16: docs/scaling.md)
ZERO_SHARDING="${ZERO_SHARDING:-${sharding}}"  # os: optimizer state sharded over the GPUs (more than one)
CHECKPOINT_ACTIVATIONS="${CHECKPOINT_ACTIVATIONS:-${recompute}}"  # 1: --checkpoint-activations (each layer recomputed in the backward pass)

run_bidirectional_pretraining "$@"

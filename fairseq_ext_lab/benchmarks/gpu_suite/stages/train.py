"""The train stage (scripts/gpu_suite.sh --help):

300 updates (TRAIN_UPDATES) in bf16 (TRAIN_PRECISION) for each of
3ml_self_base, 3ml_cross_base, swishrnn_bert_base and bidir_lm_125m
(TRAIN_ARCHS), seq 512, batch 32 (bidir_lm: 32 x 512 tokens), through their
recipes' hydra YAML twins (recipes/config/3ml/pretrain_efficient.yaml,
swishrnn/pretrain_base.yaml, bidirectional/pretrain_125m.yaml) with
fairseq-hydra-train ... common.bf16=true: fairseq-train 0.12 makes --bf16
TPU training, and the shell recipes refuse it. Then checks each json log:
every update done, the loss fell, no NaN/inf, no gradient overflow (fp16:
only while its loss scaler settles), words/s logged, the precision in
fairseq's config, CUDA in use (OUTDIR/train-summary.tsv, train-ARCH.log).
"""
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from ..checks import TRAIN_SUMMARY_COLUMNS, TrainCheck, check_train_log
from ..runner import Stage, StageRun, format_columns, tail_lines, use_env
from ..settings import REPO, Settings, SettingsError

#: TRAIN_ARCHS prefix -> (recipes/config folder, YAML name, keys to drop: overrides `~KEY`).
#: The baselines use the SwishRNN YAML without the keys their archs do not take (its comment).
TRAIN_FAMILIES = (
    ("3ml_", "3ml", "pretrain_efficient", ()),
    ("swishrnn_bert_", "swishrnn", "pretrain_base", ()),
    ("bert_rab_", "swishrnn", "pretrain_base", ("model.swishrnn_step_sizes",)),
    ("bert_orig_", "swishrnn", "pretrain_base",
     ("model.rab_num_buckets", "model.rab_max_distance", "model.swishrnn_step_sizes")),
    ("roberta_", "roberta", "pretrain", ()),
    ("bidir_lm_", "bidirectional", "pretrain_125m", ()),
)


def precision_overrides(precision: str) -> List[str]:
    """The hydra overrides that make TRAIN_PRECISION's run; anything else is a SettingsError.

    fairseq-train 0.12 turns --bf16 into TPU training (it asks for torch_xla on any machine, and
    the shell recipes refuse PRECISION=--bf16: docs/scaling.md, "Low precision"), so the stage
    trains through the recipes' YAML twins with fairseq-hydra-train, where common.bf16=true is
    bf16 on the GPU. fp16 is fairseq's memory-efficient form, with its own adam (our fused_adamw
    wraps torch.optim.AdamW, which that wrapper does not take; tests/test_low_precision.py)."""
    if precision == "bf16":
        return ["common.bf16=true"]
    if precision == "fp16":
        return ["common.fp16=true", "common.memory_efficient_fp16=true", "optimizer._name=adam"]
    if precision == "fp32":
        return []
    raise SettingsError(f"TRAIN_PRECISION={precision}: use bf16, fp16 (memory-efficient) or fp32 "
                        "(the train stage runs fairseq-hydra-train; fairseq-train's --bf16 is TPU "
                        "training in fairseq 0.12)")


def train_command(arch: str, data, settings: Settings, fairseq_bin) -> List[str]:
    """The fairseq-hydra-train command that trains `arch` for TRAIN_UPDATES updates of
    TRAIN_BATCH x TRAIN_SEQ_LEN tokens through the YAML twin of its recipe (recipes/config/*),
    in TRAIN_PRECISION, json records on stdout, no checkpoints; an arch with no YAML twin is a
    SettingsError. The bidirectional_lm recipe batches by tokens: TRAIN_BATCH sequences' worth."""
    family = next((f for f in TRAIN_FAMILIES if arch.startswith(f[0])), None)
    if family is None:
        raise SettingsError(f"TRAIN_ARCHS: {arch} has no recipe YAML here; use a 3ml_*, "
                            "swishrnn_bert_*, bert_rab_*, bert_orig_*, roberta_* or bidir_lm_* arch")
    prefix, folder, name, dropped = family
    length, batch, updates = settings.train_seq_len, settings.train_batch, settings.train_updates
    if prefix == "bidir_lm_":
        sizes = [f"task.tokens_per_sample={length}", f"model.max_target_positions={length}",
                 f"dataset.max_tokens={int(batch) * int(length)}"]
    else:
        sizes = [f"task.tokens_per_sample={length}", f"model.max_positions={length}",
                 f"dataset.batch_size={batch}"] + [f"~{key}" for key in dropped]
    return [
        f"{fairseq_bin}/fairseq-hydra-train", "--config-dir", f"{REPO}/recipes/config/{folder}",
        "--config-name", name,
        f"task.data={data}", f"checkpoint.save_dir={settings.work}/train/{arch}",
        "checkpoint.no_save=true", "common.log_format=json", "common.log_file=null",
        "common.no_progress_bar=true", f"common.log_interval={settings.train_log_interval}",
        f"model._name={arch}", *sizes,
        f"optimization.max_update={updates}", f"lr_scheduler.total_num_update={updates}",
        f"lr_scheduler.warmup_updates={int(updates) // 10}", f"optimization.lr=[{settings.train_lr}]",
        "optimization.update_freq=[1]", "distributed_training.distributed_world_size=1",
        "dataset.num_workers=2", *precision_overrides(settings.train_precision),
    ]


def check_train_settings(settings: Settings) -> None:
    """Raise SettingsError unless TRAIN_PRECISION, TRAIN_ARCHS, the sizes and the MFU's peak are
    usable (the driver checks before the first stage, so that a typo does not surface after the
    benchmarks' minutes)."""
    for name, value in (("TRAIN_UPDATES", settings.train_updates),
                        ("TRAIN_SEQ_LEN", settings.train_seq_len),
                        ("TRAIN_BATCH", settings.train_batch),
                        ("TRAIN_LOG_INTERVAL", settings.train_log_interval)):
        if not re.fullmatch(r"[1-9][0-9]*", value):
            raise SettingsError(f"{name}={value}: use a positive integer")
    precision_overrides(settings.train_precision)
    for arch in settings.train_archs:
        train_command(arch, "DATA", settings, ".")
    try:
        peak = float(settings.peak_tflops)
    except ValueError:
        peak = -1.0
    if not (peak > 0 and math.isfinite(peak)):
        raise SettingsError(f"GPU_SUITE_PEAK_TFLOPS={settings.peak_tflops}: use a positive number")


# -------------------------------------------------------------------------- the training

REPO_TEXT_ROOTS = ("README.md", "docs", "fairseq_ext", "fairseq_ext_lab", "recipes", "scripts", "tests")
REPO_TEXT_SUFFIXES = (".md", ".py", ".sh", ".yaml")


def repo_text_files() -> List[str]:
    """The repo's Markdown, Python, shell and YAML files (under REPO_TEXT_ROOTS), relative and
    sorted: the text of the data-bin the train stage builds when none is carried."""
    found = []
    for root in REPO_TEXT_ROOTS:
        top = REPO / root
        paths = [top] if top.is_file() else [Path(d, f) for d, _, names in os.walk(top) for f in names]
        found += [p.relative_to(REPO).as_posix() for p in paths
                  if p.name.endswith(REPO_TEXT_SUFFIXES) and p.is_file() and not p.is_symlink()]
    return sorted(found)


def training_data(run: StageRun) -> Path:
    """The data-bin the train stage uses: the carried GPU_SUITE_DATA, else one built (once, in
    GPU_SUITE_WORK) from the repo's own text with fairseq_ext.corpus.prepare_corpus."""
    s = run.settings
    if (s.data / "dict.txt").is_file():
        print(f"training data: {s.data} (carried)", file=sys.stderr, flush=True)
        return s.data
    text, dest = s.work / "repo-text.txt", s.work / "data-bin-repo-text"
    print(f"training data: no {s.data}; building {dest} from the repo's own text", file=sys.stderr,
          flush=True)
    if not (dest / "dict.txt").is_file():
        s.work.mkdir(parents=True, exist_ok=True)
        # Documents separated by blank lines, one output line per line (prepare_corpus, file input).
        with open(text, "wb") as f:
            for name in repo_text_files():
                f.write((REPO / name).read_bytes() + b"\n\n")
        run.run([run.py, "-m", "fairseq_ext.corpus.prepare_corpus", "--input", text, "--destdir", dest,
                 "--workers", "8"])
    return dest


def run_training(run: StageRun, cmd: List[str], log: Path) -> int:
    """Run fairseq-hydra-train command `cmd` with its output in `log` (the command line first);
    on a crash print the log's tail. Returns its exit status (0 in a dry run)."""
    with open(log, "w") as f:  # the command line is the first line of its log
        run.show(cmd, stream=f)
        rc = 0
        if not run.dry_run:
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL).returncode
            except OSError as error:
                f.write(f"{cmd[0]}: {error.strerror or error}\n")
                rc = 127
    if rc:
        print(f"fairseq-hydra-train failed (exit {rc}); the end of {log}:")
        print("\n".join(tail_lines(log, 40)), flush=True)
    return rc


def train_and_check(run: StageRun, settings: Settings, arch: str, cmd: List[str], log: Path,
                    summary: Path, lead: Sequence[str] = ()) -> Optional[TrainCheck]:
    """run_training, then check_train_log with `settings`' updates and precision; appends the
    summary row (failed(RC) for a crash), after the columns `lead`, to `summary`. Returns the
    check (None: crashed or a dry run)."""
    rc = run_training(run, cmd, log)
    if rc:
        with open(summary, "a") as f:
            f.write("\t".join([*lead, arch, settings.train_precision, *["-"] * 9, f"failed({rc})"])
                    + "\n")
        return None
    run.note(f"check_train_log(open({str(log)!r}).read(), {arch!r}, {settings.train_precision!r}, "
             f"{settings.train_updates}, require_cuda={settings.require_cuda}, "
             f"peak_tflops={settings.peak_tflops})")
    if run.dry_run:
        return None
    check = check_train_log(log.read_text(errors="replace"), arch, settings.train_precision,
                            int(settings.train_updates), settings.require_cuda,
                            float(settings.peak_tflops))
    with open(summary, "a") as f:
        f.write("\t".join([*lead, *check.row]) + "\n")
    for problem in check.problems:
        print(f"{arch}: {problem}", file=sys.stderr, flush=True)
    return check


def stage_train(run: StageRun) -> int:
    """Train each of TRAIN_ARCHS with train_command (its output, after the command line, in
    OUTDIR/train-ARCH.log), check each log with check_train_log into OUTDIR/train-summary.tsv,
    and print the summary. A crashed run is summarised as failed(RC) and the next arch still
    trains. Returns 1 if any run crashed or failed its check."""
    s = run.settings
    check_train_settings(s)
    use_env(run)
    os.chdir(REPO)
    data = s.data if s.dry_run else training_data(run)
    summary = run.outdir / "train-summary.tsv"
    summary.write_text("\t".join(TRAIN_SUMMARY_COLUMNS) + "\n")
    failed = 0
    for arch in s.train_archs:
        cmd = train_command(arch, data, s, run.fairseq_bin)
        print(f"== {arch}: {os.path.relpath(cmd[2], REPO)}/{cmd[4]}.yaml, {s.train_updates} updates "
              f"of {s.train_batch} x {s.train_seq_len} tokens, {s.train_precision}", flush=True)
        check = train_and_check(run, s, arch, cmd, run.outdir / f"train-{arch}.log", summary)
        if not run.dry_run:
            failed = failed or int(check is None or bool(check.problems))
    print(format_columns([line.split("\t") for line in summary.read_text().splitlines()]), flush=True)
    return failed


STAGE = Stage("train", stage_train, "fairseq-hydra-train per arch, each json log checked", __doc__)

"""The fsdp stage (scripts/gpu_suite.sh --help):

fairseq's --ddp-backend fully_sharded (fairscale FSDP, from the carried
wheel) on one GPU against legacy_ddp: FSDP_ARCH trained FSDP_UPDATES updates
in FSDP_PRECISION with each backend, the same seed and batches, a record
every update; each log checked as the train stage's, then the per-update
losses compared (OUTDIR/fsdp-summary.tsv, fsdp-BACKEND.log,
fsdp-compare.txt): they match when none differs by more than FSDP_LOSS_TOL.
"""
import dataclasses
import math
import os
import re
import socket
import sys
from typing import List

from ..checks import TRAIN_SUMMARY_COLUMNS, compare_losses, train_losses
from ..runner import Stage, StageRun, format_columns, use_env
from ..settings import REPO, Settings, SettingsError
from .train import train_and_check, train_command, training_data

#: The fsdp stage's DDP backends: the reference first, then the one checked against it.
FSDP_BACKENDS = ("legacy_ddp", "fully_sharded")


def fsdp_settings(settings: Settings) -> Settings:
    """The train settings of the fsdp stage's runs: FSDP_ARCH for FSDP_UPDATES updates in
    FSDP_PRECISION, a record every update. SettingsError for values fairseq would refuse."""
    if not re.fullmatch(r"[1-9][0-9]*", settings.fsdp_updates):
        raise SettingsError(f"FSDP_UPDATES={settings.fsdp_updates}: use a positive integer")
    if settings.fsdp_precision not in ("fp32", "fp16"):
        raise SettingsError(f"FSDP_PRECISION={settings.fsdp_precision}: use fp32 or fp16 "
                            "(fairseq refuses --ddp-backend fully_sharded with bf16)")
    try:
        tolerance = float(settings.fsdp_loss_tol)
    except ValueError:
        tolerance = -1.0
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise SettingsError(f"FSDP_LOSS_TOL={settings.fsdp_loss_tol}: use a number >= 0")
    fsdp = dataclasses.replace(settings, train_updates=settings.fsdp_updates,
                               train_precision=settings.fsdp_precision, train_log_interval="1")
    try:
        train_command(fsdp.fsdp_arch, "DATA", fsdp, ".")
    except SettingsError as error:  # an arch without a recipe YAML
        raise SettingsError(str(error).replace("TRAIN_ARCHS:", "FSDP_ARCH:", 1)) from None
    return fsdp


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def one_process_group(cuda: bool) -> List[str]:
    """Overrides that give fairseq-hydra-train a torch.distributed process group of one process
    (rank 0 of 1, in this process: no spawn), NCCL on CUDA, else gloo. fairscale 0.4.13's FSDP
    asks torch.distributed for its reduce-scatter group even on one GPU, so fairseq's own
    one-process path (distributed_world_size=1 and no init method: no process group, a
    DummyProcessGroup for FSDP) stops with "torch.distributed is not yet initialized" (the
    second GPU run, 2026-11-26). Both backends of the fsdp stage run so, to compare alike."""
    return [f"distributed_training.distributed_init_method=tcp://127.0.0.1:{free_port()}",
            "distributed_training.distributed_no_spawn=true",
            "distributed_training.distributed_rank=0", "distributed_training.device_id=0",
            f"distributed_training.distributed_backend={'nccl' if cuda else 'gloo'}"]


def stage_fsdp(run: StageRun) -> int:
    """fairseq's --ddp-backend fully_sharded (fairscale FSDP) on one GPU against legacy_ddp:
    FSDP_ARCH [3ml_self_base] trained FSDP_UPDATES [50] updates in FSDP_PRECISION [fp32] with
    each backend (train_command, seed 1, the same batches), each log checked as the train
    stage's (OUTDIR/fsdp-BACKEND.log, fsdp-summary.tsv), then the per-update losses compared
    (compare_losses, OUTDIR/fsdp-compare.txt): they match when no update differs by more than
    FSDP_LOSS_TOL [0.02]. Returns 1 if a run fails or the losses do not match."""
    s = run.settings
    fsdp = fsdp_settings(s)
    use_env(run)
    os.chdir(REPO)
    data = s.data if s.dry_run else training_data(run)
    summary = run.outdir / "fsdp-summary.tsv"
    summary.write_text("\t".join(("backend",) + TRAIN_SUMMARY_COLUMNS) + "\n")
    losses, failed = {}, 0
    for backend in FSDP_BACKENDS:
        cmd = [*train_command(fsdp.fsdp_arch, data, fsdp, run.fairseq_bin),
               *one_process_group(s.require_cuda), f"distributed_training.ddp_backend={backend}"]
        print(f"== {fsdp.fsdp_arch}, {backend}: {fsdp.train_updates} updates, {fsdp.train_precision}",
              flush=True)
        log = run.outdir / f"fsdp-{backend}.log"
        check = train_and_check(run, fsdp, fsdp.fsdp_arch, cmd, log, summary, lead=[backend])
        if run.dry_run:
            continue
        failed = failed or int(check is None or bool(check.problems))
        if check is not None:
            losses[backend] = train_losses(log.read_text(errors="replace"))
    print(format_columns([line.split("\t") for line in summary.read_text().splitlines()]), flush=True)
    run.note(f"compare_losses(<{FSDP_BACKENDS[0]} losses>, <{FSDP_BACKENDS[1]} losses>, "
             f"{fsdp.fsdp_loss_tol})")
    if run.dry_run:
        return 0
    if len(losses) < len(FSDP_BACKENDS):
        print("error: a run failed, so there are no two runs' losses to compare", file=sys.stderr)
        return 1
    line, problems = compare_losses(losses[FSDP_BACKENDS[0]], losses[FSDP_BACKENDS[1]],
                                    float(fsdp.fsdp_loss_tol))
    verdict = "match" if not problems else "DIFFER: " + "; ".join(problems)
    text = f"{FSDP_BACKENDS[1]} against {FSDP_BACKENDS[0]}: {line}\n{verdict}\n"
    (run.outdir / "fsdp-compare.txt").write_text(text)
    print(text, end="", flush=True)
    return failed or int(bool(problems))


STAGE = Stage("fsdp", stage_fsdp, "--ddp-backend fully_sharded against legacy_ddp, losses compared", __doc__)

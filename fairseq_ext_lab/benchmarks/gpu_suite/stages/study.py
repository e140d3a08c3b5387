"""The study stage (scripts/gpu_suite.sh --help):

the GPU study (scripts/study.py GPU_SUITE_STUDY [3ml-gpu],
docs/studies.md): RoBERTa-15% against 3ML-self-40% at 6 x 512, 3 seeds of the
same updates, pre-trained one run at a time in fairseq fp16, then fine-tuned
on the carried downstream suite (GPU_SUITE_DOWNSTREAM) beside a random-init
control; the report gives the fine-tuned accuracies and the wall-clock time of
each pre-training, ± SE over seeds. It needs the carried data-bin and suite
(scripts/gpu_wheels.sh). The runs directory is GPU_SUITE_STUDY_DIR/NAME
[.gpu-study/NAME]: carried in the tree, its finished runs are read back, not
retrained, so a study cut off in one call goes on in the next; checkpoints
stay on the machine, so give a call whole seeds (STUDY_SEEDS): a seed
pre-trained in one call cannot be fine-tuned in the next. Every file of it but
checkpoints and data-bins is copied to OUTDIR/study/NAME/ when the stage ends,
also when it is cut off (extract it into .gpu-study/NAME here to carry it).
STUDY_UPDATES, STUDY_SEEDS, STUDY_FINETUNE_TASKS: a shorter study (another
runs directory: a finished run of another plan is refused).
"""
import os
import shutil
import signal
from pathlib import Path

from ..runner import Stage, StageRun, terminate, use_env
from ..settings import REPO

#: What the study stage leaves on the machine: checkpoints and data-bins (the study's held-out
#: split); everything else of the runs directory comes back in OUTDIR/study/.
STUDY_LEFT_BEHIND = (".pt", ".bin", ".idx")


def copy_study_files(runs_dir: Path, target: Path) -> int:
    """Copy every file under `runs_dir` but STUDY_LEFT_BEHIND's into `target`, keeping the
    tree; returns how many. What a later call, or this machine's report, needs: each finished
    run's result.json and scores.json, the logs, study.json and curves.png."""
    copied = 0
    for path in sorted(runs_dir.rglob("*")) if runs_dir.is_dir() else []:
        if path.is_file() and not path.is_symlink() and not path.name.endswith(STUDY_LEFT_BEHIND):
            dest = target / path.relative_to(runs_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            copied += 1
    return copied


def stage_study(run: StageRun) -> None:
    """scripts/study.py GPU_SUITE_STUDY [3ml-gpu] on the GPU on the carried
    data-bin, its runs in GPU_SUITE_STUDY_DIR/NAME (carried: finished runs are read back), its
    output in OUTDIR/study-NAME.txt; then (also when the stage is ended at its limit: SIGTERM
    leaves through here) copy_study_files into OUTDIR/study/NAME/."""
    s, out = run.settings, run.outdir
    py = use_env(run)
    os.chdir(REPO)
    if not s.dry_run:  # the suite is encoded with the carried data-bin's dictionary: both or none
        missing = [str(path) for path in (s.data / "dict.txt", s.downstream / "downstream.json")
                   if not path.is_file()]
        if missing:
            raise SystemExit(f"error: the study stage needs the carried data-bin and downstream "
                             f"suite, and {', '.join(missing)} is missing: run "
                             "scripts/gpu_wheels.sh here and carry .gpu-data")
    runs_dir = s.study_dir / s.study
    # the stage's own time limit governs on the device: no Study.minutes budget on top of it
    argv = [py, "scripts/study.py", s.study, "--data", s.data, "--runs-dir", runs_dir,
            "--minutes", "0", "--downstream", s.downstream]
    if s.study_updates:
        argv += ["--updates", s.study_updates]
    if s.study_seeds:
        argv += ["--seeds", *s.study_seeds]
    if s.study_finetune_tasks:
        argv += ["--finetune-tasks", *s.study_finetune_tasks]
    if not s.require_cuda:  # a trial on a machine without a GPU
        argv += ["--device", "cpu"]
    target = out / "study" / s.study
    signal.signal(signal.SIGTERM, terminate)  # the copy below still runs
    try:
        run.run(argv, tee=out / f"study-{s.study}.txt")
    finally:
        run.step(["copy_study_files", runs_dir, target],
                 lambda: print(f"copied {copy_study_files(runs_dir, target)} files of {runs_dir} "
                               f"to {target}", flush=True))


STAGE = Stage("study", stage_study, ("scripts/study.py 3ml-gpu: RoBERTa-15% against 3ML-self-40%, "
              "fine-tuned accuracy and the pre-training wall clock"), __doc__)

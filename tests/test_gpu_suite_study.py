"""The GPU suite's study stage (scripts/gpu_suite.sh --stages study): what it
passes to scripts/study.py, what it needs carried (the data-bin and the downstream suite), and
what it brings back, also when cut off. The real stage runs with the study replaced by a script
(run_study_stage)."""
from test_gpu_suite import run_suite, stage_rows


def run_study_stage(tmp_path, study_script: str, **env):
    """The real study stage with the environment's python replaced by a script: `study_script`
    (bash) runs in place of scripts/study.py, with its arguments; $RUNS is the --runs-dir."""
    bin_dir, data = tmp_path / "env" / "bin", tmp_path / "data"
    bin_dir.mkdir(parents=True)
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "downstream.json").write_text("{}")
    (bin_dir / "python").write_text(
        "#!/usr/bin/env bash\n"
        'printf "%s\\n" "$@" > "$(dirname "$0")/argv.txt"\n'
        'RUNS=""; prev=""; for a in "$@"; do [[ "$prev" == --runs-dir ]] && RUNS="$a"; prev="$a"; '
        "done\n" + study_script)
    (bin_dir / "python").chmod(0o755)
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "study", out,
                     env={"GPU_SUITE_DATA": str(data), "GPU_SUITE_DOWNSTREAM": str(suite),
                          "GPU_SUITE_STUDY_DIR": str(tmp_path / "studies"), **env})
    return proc, out, (bin_dir / "argv.txt")


#: What a study leaves in its runs directory: a finished run (result, scores, log, its last
#: checkpoint), a held-out data-bin, the report.
STUDY_FILES = ("mkdir -p $RUNS/roberta-15pct/seed1/checkpoints $RUNS/lr-selection/heldout-data-bin\n"
               "echo '{}' > $RUNS/roberta-15pct/seed1/result.json\n"
               "echo '{}' > $RUNS/roberta-15pct/seed1/scores.json\n"
               "echo log > $RUNS/roberta-15pct/seed1/train.log\n"
               "echo weights > $RUNS/roberta-15pct/seed1/checkpoints/checkpoint_last.pt\n"
               "echo data > $RUNS/lr-selection/heldout-data-bin/train.bin\n"
               "echo index > $RUNS/lr-selection/heldout-data-bin/train.idx\n")


def test_the_study_stage_brings_back_every_file_but_checkpoints_and_data(tmp_path):
    proc, out, argv = run_study_stage(
        tmp_path, STUDY_FILES + "echo '{}' > $RUNS/study.json\necho report\n",
        STUDY_UPDATES="200", STUDY_SEEDS="1 2", STUDY_FINETUNE_TASKS="GlossTopic",
        GPU_SUITE_REQUIRE_CUDA="0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = tmp_path / "studies" / "3ml-gpu"
    assert argv.read_text().split("\n")[:-1] == [
        "scripts/study.py", "3ml-gpu", "--data", str(tmp_path / "data"), "--runs-dir", str(runs),
        "--minutes", "0", "--downstream", str(tmp_path / "suite"), "--updates", "200",
        "--seeds", "1", "2", "--finetune-tasks", "GlossTopic", "--device", "cpu"]
    back = out / "study" / "3ml-gpu"
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()) == [
        "roberta-15pct/seed1/result.json", "roberta-15pct/seed1/scores.json",
        "roberta-15pct/seed1/train.log", "study.json"]
    assert (runs / "roberta-15pct/seed1/checkpoints/checkpoint_last.pt").is_file()  # left there
    assert (out / "study-3ml-gpu.txt").read_text() == "report\n"


def test_the_study_stage_brings_back_the_finished_runs_when_cut_off(tmp_path):
    """Ended at its limit (the group gets SIGTERM): what the study finished still comes back,
    for the next call to carry and read back."""
    proc, out, _ = run_study_stage(tmp_path, STUDY_FILES + "exec sleep 60\n",
                                   GPU_SUITE_TIMEOUT_study="3")
    assert proc.returncode == 124
    assert stage_rows(out) == [("study", "timeout")]
    back = out / "study" / "3ml-gpu" / "roberta-15pct" / "seed1"
    assert (back / "result.json").is_file() and not (back / "checkpoints").exists()


def test_the_study_stage_fails_with_the_study(tmp_path):
    proc, out, _ = run_study_stage(tmp_path, STUDY_FILES + "exit 3\n")
    assert proc.returncode == 3 and stage_rows(out) == [("study", "failed(3)")]
    assert (out / "study" / "3ml-gpu" / "roberta-15pct" / "seed1" / "result.json").is_file()


def test_the_study_stage_needs_the_carried_suite_and_says_how_to_carry_it(tmp_path):
    """The suite is encoded with the carried data-bin's dictionary: without it the stage stops
    before the study starts, naming scripts/gpu_wheels.sh."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/usr/bin/env bash\ntouch \"$(dirname \"$0\")/ran\"\n")
    (bin_dir / "python").chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "study", out,
                     env={"GPU_SUITE_DATA": str(data), "GPU_SUITE_DOWNSTREAM": str(tmp_path / "no"),
                          "GPU_SUITE_STUDY_DIR": str(tmp_path / "studies")})
    assert proc.returncode != 0 and stage_rows(out)[0][1].startswith("failed")
    log = (out / "study.log").read_text()
    assert f"{tmp_path / 'no' / 'downstream.json'} is missing" in log
    assert "scripts/gpu_wheels.sh" in log and not (bin_dir / "ran").exists()


"""fairseq_ext_lab.reporting.curves (scripts/plot_curves.py): reading fairseq json logs, placing validation
points at the FLOPs and wall time of training, the PNG, and its errors. Logs are synthetic, in
fairseq's exact line formats (stdout with a logging prefix, and ``--log-file``'s bare
records)."""
import json
import sys

import pytest

from conftest import REPO_ROOT, TINY_SHELL_ENV, json_log_records, run_cli
from fairseq_ext_lab.reporting import curves as plot_curves
from fairseq_ext_lab.reporting.curves import CurvePoint, TrainPoint, ValidPoint

SCRIPT = REPO_ROOT / "scripts" / "plot_curves.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def stdout_line(tag, record, time="2026-11-22 15:19:58"):
    """A line as fairseq prints it with --log-format json."""
    return f"{time} | INFO | {tag} | {json.dumps(record)}"


def train_inner(updates, total, per_update, wall, loss=7.0, tokens=None):
    # fairseq logs every figure as a string; total_tokens is absent from logs written before it
    # was logged
    extra = {"total_tokens": str(tokens)} if tokens is not None else {}
    return {**extra, "epoch": 1, "update": round(updates / 45, 3), "loss": str(loss),
            "pflops": str(per_update), "ppl": "128", "total_pflops": str(total), "wps": "180",
            "ups": "0.5", "wpb": "512", "bsz": "8", "num_updates": str(updates), "lr": "0.0001",
            "gnorm": "1.1", "train_wall": str(wall - 1), "wall": str(wall)}


def valid(updates, loss, best=None):
    record = {"epoch": 1, "valid_loss": str(loss), "valid_ppl": str(round(2 ** loss, 2)),
              "valid_wps": "800", "valid_wpb": "504.8", "valid_bsz": "8",
              "valid_num_updates": str(updates)}
    if best is not None:
        record["valid_best_loss"] = str(best)
    return record


def epoch_summary(updates, total, mean_per_update, wall, tokens=None):
    """End of epoch: ``train_pflops`` here is the epoch's MEAN per update; the running total
    is ``train_total_pflops``."""
    extra = {"train_total_tokens": str(tokens)} if tokens is not None else {}
    return {**extra, "epoch": 1, "train_loss": "7.1", "train_pflops": str(mean_per_update),
            "train_total_pflops": str(total), "train_num_updates": str(updates),
            "train_train_wall": str(wall - 2), "train_wall": str(wall)}


def write_stdout_log(path, lines):
    """A stdout log as scripts/demo.py keeps it: the recipe's command, fairseq's text lines
    (some with braces that are not JSON) and the json records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ["+ /x/fairseq-train data --arch roberta_tiny --log-format json",
            "2026-11-22 15:19:53 | INFO | fairseq_cli.train | {'_name': None, 'common': {}}",
            "2026-11-22 15:19:55 | INFO | fairseq_cli.train | begin dry-run validation on "
            '"valid" subset', *lines, "2026-11-22 15:21:00 | INFO | fairseq_cli.train | done "
            "training in 60.0 seconds"]
    path.write_text("\n".join(text) + "\n")
    return path


@pytest.fixture
def two_runs(tmp_path):
    """A RoBERTa-like stdout log (log interval 2, validation every 3 updates; written before
    total_tokens was logged) and a 3ML-like --log-file (bare records, log interval 1,
    validation at 2 and 4)."""
    roberta = write_stdout_log(tmp_path / "roberta-15pct" / "train.log", [
        stdout_line("train_inner", train_inner(2, 0.002, 0.001, 10)),
        stdout_line("valid", valid(3, 9.5)),
        stdout_line("train_inner", train_inner(4, 0.004, 0.001, 20)),
        stdout_line("train_inner", train_inner(6, 0.006, 0.001, 30)),
        stdout_line("valid", valid(6, 8.25, best=8.25)),
        stdout_line("train", epoch_summary(7, 0.007, 0.001, 36)),  # after the epoch's valid
        stdout_line("valid", valid(7, 8.0, best=8.0)),
    ])
    three_ml = tmp_path / "3ml-self-40pct" / "train.log"
    three_ml.parent.mkdir()
    three_ml.write_text("\n".join([
        "{'_name': None}",  # fairseq's config dump, as --log-file holds it
        json.dumps(train_inner(1, 0.0008, 0.0008, 4, tokens=256)),
        json.dumps(train_inner(2, 0.0016, 0.0008, 8, tokens=512)),
        json.dumps(valid(2, 9.0)),
        json.dumps(train_inner(3, 0.0024, 0.0008, 12, tokens=768)),
        json.dumps(train_inner(4, 0.0032, 0.0008, 16, tokens=1024)),
        json.dumps(valid(4, 7.5)),
        json.dumps(epoch_summary(4, 0.0032, 0.0008, 17, tokens=1024)),
        "done training in 17.2 seconds",
    ]) + "\n")
    return roberta, three_ml


def test_read_log_tells_records_apart_in_both_formats(two_runs):
    roberta, three_ml = (plot_curves.read_log(p) for p in two_runs)
    assert roberta.train == [TrainPoint(2, 0.002, 10), TrainPoint(4, 0.004, 20),
                             TrainPoint(6, 0.006, 30), TrainPoint(7, 0.007, 36)]
    assert roberta.valid == [ValidPoint(3, 9.5), ValidPoint(6, 8.25), ValidPoint(7, 8.0)]
    # the epoch summary gives its running total (train_total_pflops), not its mean per update
    assert three_ml.train[-1] == TrainPoint(4, 0.0032, 17, 1024)
    assert [p.updates for p in three_ml.train] == [1, 2, 3, 4, 4]
    assert three_ml.valid == [ValidPoint(2, 9.0), ValidPoint(4, 7.5)]


def test_valid_points_take_flops_and_wall_of_the_same_or_nearest_earlier_update():
    train = [TrainPoint(2, 0.25, 10.0), TrainPoint(4, 0.5, 21.0), TrainPoint(6, 0.75, 33.0)]
    valid = [ValidPoint(1, 10.0),   # before any training record: dropped
             ValidPoint(2, 9.0),    # same update
             ValidPoint(5, 8.0),    # nearest earlier: update 4
             ValidPoint(6, 7.5),
             ValidPoint(9, 7.0)]    # after the last record: the last one
    assert plot_curves.map_valid_to_train(train, valid) == [
        CurvePoint(2, 0.25, 10.0, 9.0, 2),
        CurvePoint(5, 0.5, 21.0, 8.0, 4),
        CurvePoint(6, 0.75, 33.0, 7.5, 6),
        CurvePoint(9, 0.75, 33.0, 7.0, 6),
    ]


def test_mapping_ignores_record_order_and_last_duplicate_wins():
    """A log with a run restarted from an earlier checkpoint repeats updates: the later
    record (the restarted run's) is the one valid points use."""
    train = [TrainPoint(4, 0.5, 20.0), TrainPoint(2, 0.25, 10.0), TrainPoint(4, 0.5, 25.0)]
    assert plot_curves.map_valid_to_train(train, [ValidPoint(4, 8.0), ValidPoint(3, 9.0)]) == [
        CurvePoint(4, 0.5, 25.0, 8.0, 4), CurvePoint(3, 0.25, 10.0, 9.0, 2)]


def test_curve_of_the_synthetic_runs(two_runs):
    roberta = plot_curves.curve_of(plot_curves.read_log(two_runs[0]))
    assert [(p.updates, p.pflops, p.wall, p.valid_loss) for p in roberta] == [
        (3, 0.002, 10, 9.5), (6, 0.006, 30, 8.25), (7, 0.007, 36, 8.0)]
    three_ml = plot_curves.curve_of(plot_curves.read_log(two_runs[1]))
    # update 4: the epoch summary (wall 17) comes after the train_inner record (wall 16)
    assert [(p.pflops, p.wall, p.valid_loss, p.tokens) for p in three_ml] == [
        (0.0016, 8, 9.0, 512), (0.0032, 17, 7.5, 1024)]
    assert all(p.tokens is None for p in roberta)


def test_one_figure_with_loss_against_flops_wall_time_and_tokens(two_runs):
    import matplotlib.pyplot as plt

    curves = [plot_curves.curve_of(plot_curves.read_log(p)) for p in two_runs]
    fig = plot_curves.figure(curves, ["roberta", "3ml-self"])
    by_flops, by_wall, by_tokens = fig.axes
    assert [ax.get_title() for ax in fig.axes] == [
        "valid loss vs training FLOPs", "valid loss vs wall time", "valid loss vs training tokens"]
    assert [list(line.get_xdata()) for line in by_flops.get_lines()] == [
        [0.002, 0.006, 0.007], [0.0016, 0.0032]]
    assert [list(line.get_xdata()) for line in by_wall.get_lines()] == [[10, 30, 36], [8, 17]]
    # only the run that logged total_tokens has a tokens line (in millions); the other is named
    (line,) = by_tokens.get_lines()
    assert list(line.get_xdata()) == [512 / 1e6, 1024 / 1e6] and line.get_label() == "3ml-self"
    assert list(line.get_ydata()) == [9.0, 7.5]
    assert "no total_tokens logged:\nroberta" in [t.get_text() for t in by_tokens.texts]
    plt.close(fig)


def test_wall_unit():
    assert plot_curves.wall_unit(90) == (1.0, "seconds")
    assert plot_curves.wall_unit(600) == (60.0, "minutes")
    assert plot_curves.wall_unit(3 * 3600) == (3600.0, "hours")


def check_png(path):
    from PIL import Image

    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 600 and image.size[1] > 300


@pytest.mark.slow
def test_script_writes_a_png(two_runs, tmp_path):
    out = tmp_path / "plots" / "curves.png"
    proc = run_cli([sys.executable, SCRIPT, *two_runs, "--labels", "roberta,3ml-self",
                    "--out", out], timeout=120)
    check_png(out)
    assert "roberta: 3 valid points" in proc.stdout
    assert "3ml-self: 2 valid points" in proc.stdout and f"wrote {out}" in proc.stdout


def test_labels_default_to_run_dir_names_and_dirs_stand_for_train_log(two_runs, tmp_path):
    out = tmp_path / "curves.png"
    assert plot_curves.main([str(two_runs[0].parent), str(two_runs[1]), "--out", str(out)]) == 0
    check_png(out)
    assert [plot_curves.default_label(p) for p in (two_runs[0].parent, two_runs[1])] == [
        "roberta-15pct", "3ml-self-40pct"]


def run_main(capsys, *argv):
    code = plot_curves.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_error_missing_log(tmp_path, capsys):
    code, err = run_main(capsys, tmp_path / "nope.log", "--out", tmp_path / "c.png")
    assert code == 2 and "no such log" in err and "nope.log" in err
    assert not (tmp_path / "c.png").exists()


def test_error_no_log_argument(capsys):
    with pytest.raises(SystemExit) as exit_info:
        plot_curves.main([])
    assert exit_info.value.code == 2 and "RUN_LOG" in capsys.readouterr().err


def test_error_log_without_train_pflops(tmp_path, capsys):
    record = train_inner(2, 0.002, 0.001, 10)
    del record["total_pflops"], record["pflops"]
    log = write_stdout_log(tmp_path / "run" / "train.log", [
        stdout_line("train_inner", record), stdout_line("valid", valid(2, 9.0))])
    code, err = run_main(capsys, log, "--out", tmp_path / "c.png")
    assert code == 2 and "total_pflops" in err and "--criterion masked_lm_flops" in err


def test_error_log_without_any_records(tmp_path, capsys):
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    log.write_text("2026-11-22 15:19:53 | INFO | fairseq_cli.train | begin training\n")
    code, err = run_main(capsys, log, "--out", tmp_path / "c.png")
    assert code == 2 and f"no JSON training records in {log}" in err
    assert f"`--log-format json --log-file {log}`" in err and "$SAVE_DIR/train.log" in err


def test_error_no_valid_points(tmp_path, capsys):
    log = write_stdout_log(tmp_path / "run" / "train.log", [
        stdout_line("train_inner", train_inner(2, 0.002, 0.001, 10))])
    code, err = run_main(capsys, log, "--out", tmp_path / "c.png")
    assert code == 2 and "no validation records" in err


def test_error_valid_points_only_before_training_records(tmp_path, capsys):
    log = write_stdout_log(tmp_path / "run" / "train.log", [
        stdout_line("valid", valid(1, 9.0)),
        stdout_line("train_inner", train_inner(2, 0.002, 0.001, 10))])
    code, err = run_main(capsys, log, "--out", tmp_path / "c.png")
    assert code == 2 and "no validation point" in err


def test_error_label_count(two_runs, tmp_path, capsys):
    code, err = run_main(capsys, *two_runs, "--labels", "only-one", "--out", tmp_path / "c.png")
    assert code == 2 and "1 labels for 2 logs" in err


def test_plots_a_recipe_run_from_its_save_dir(tiny_data_bin, tmp_path, capsys):
    """A shell recipe run (the RoBERTa demo at tiny size, about two epochs) leaves its JSON
    records in SAVE_DIR/train.log, each once, after what the file already held; the plot reads
    them from SAVE_DIR."""
    save_dir = tmp_path / "roberta-tiny"
    save_dir.mkdir()
    (save_dir / "train.log").write_text("an earlier run's log line\n")
    env = dict(TINY_SHELL_ENV, DATA=str(tiny_data_bin), SAVE_DIR=str(save_dir),
               BATCH_SIZE="32", MAX_SENTENCES="32", TOTAL_UPDATES="32", LOG_INTERVAL="5",
               SAMPLE_BREAK_MODE="complete", OMP_NUM_THREADS="1")  # packed: two epochs
    run_cli([REPO_ROOT / "recipes/roberta/demo.sh", "--no-progress-bar"], env=env)

    text = (save_dir / "train.log").read_text()
    assert text.startswith("an earlier run's log line\n")  # appended to, not overwritten
    valid_updates = [int(r["valid_num_updates"])
                     for r in json_log_records(text, key="valid_num_updates")]
    assert len(valid_updates) >= 3 and valid_updates[-1] == 32  # epochs 1, 2 and the last update
    assert valid_updates == sorted(set(valid_updates))  # every validation logged once
    out = tmp_path / "curves.png"
    assert plot_curves.main([str(save_dir), "--out", str(out)]) == 0
    check_png(out)
    out_text = capsys.readouterr().out
    assert f"roberta-tiny: {len(valid_updates)} valid points" in out_text
    (summary,) = [r for r in json_log_records(text, key="train_total_tokens")][-1:]
    assert f"{float(summary['train_total_tokens']):.4g} tokens" in out_text


def test_metric_reads_one_category_of_corrupted_tokens(tmp_path, capsys):
    """--metric loss_mask plots valid_loss_mask (masked_lm_categories' [MASK] loss), not the
    overall loss; a log without it says which criterion logs it."""
    records = [train_inner(10, 0.001, 0.0001, 5.0), {**valid(10, 9.0), "valid_loss_mask": "9.5"},
               train_inner(20, 0.002, 0.0001, 10.0), {**valid(20, 8.0), "valid_loss_mask": "9.25"}]
    log = write_stdout_log(tmp_path / "cats" / "train.log",
                           [stdout_line("valid" if "valid_loss" in r else "train_inner", r)
                            for r in records])
    assert [p.valid_loss for p in plot_curves.curve_of(plot_curves.read_log(log, "loss_mask"))] == [9.5, 9.25]
    assert [p.valid_loss for p in plot_curves.curve_of(plot_curves.read_log(log))] == [9.0, 8.0]
    assert plot_curves.main([str(log), "--metric", "loss_mask", "--out", str(tmp_path / "m.png")]) == 0
    assert "last: valid loss_mask 9.25 at update 20" in capsys.readouterr().out
    assert plot_curves.main([str(log), "--metric", "loss_unchanged", "--out", str(tmp_path / "u.png")]) == 2
    assert "no valid_loss_unchanged" in capsys.readouterr().err

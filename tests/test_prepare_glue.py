"""scripts/prepare_glue.sh (fairseq_ext.corpus.glue): GLUE tsv files -> sentence_prediction
data-bins with the pre-training sentencepiece model and dictionary.

A tiny fake GLUE folder (RTE: sentence pairs, STS-B: regression, SST-2: single sentences) and a
tiny pre-training data-bin (scripts/prepare_corpus.sh's pipeline, its sentencepiece model and
dictionary) are made here; the binarized output is read back and fine-tuned by the recipe.
"""
import math
import random
import shlex

import pytest

from conftest import REPO_ROOT, WORDS, fairseq_cli, json_log_records, run_cli, write_documents
from fairseq_ext.corpus import glue
from fairseq_ext.corpus.errors import CorpusError
from fairseq_ext.corpus.prepare_corpus import main as prepare_corpus

SCRIPT = REPO_ROOT / "scripts/prepare_glue.sh"
TOKENS = 64


def sentence(rng, low=3, high=12):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def write_tsv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([header] if header else []) + ["\t".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_fake_glue(root, rng):
    """GLUE's file layout and columns for RTE, STS-B and SST-2; returns {task: {split: (inputs
    per example, label as the data-bin holds it)}}."""
    expected = {"RTE": {}, "STS-B": {}, "SST-2": {}}
    for stem, split, n in (("train", "train", 24), ("dev", "valid", 8)):
        rte = [(sentence(rng), sentence(rng), rng.choice(["entailment", "not_entailment"]))
               for _ in range(n)]
        if split == "train":
            rte[3] = (rte[3][0], "", rte[3][2])  # an empty sentence keeps its line
        write_tsv(root / "RTE" / f"{stem}.tsv", "index\tsentence1\tsentence2\tlabel",
                  [(i, a, b, label) for i, (a, b, label) in enumerate(rte)])
        expected["RTE"][split] = [((a, b), label) for a, b, label in rte]

        sts = [(sentence(rng), sentence(rng), round(rng.uniform(0, 5), 3)) for _ in range(n)]
        write_tsv(root / "STS-B" / f"{stem}.tsv",
                  "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1"
                  "\tsentence2\tscore",
                  [(i, "main-news", "f", "2012", i, "none", "none", a, b, score)
                   for i, (a, b, score) in enumerate(sts)])
        expected["STS-B"][split] = [((a, b), f"{score / 5:.6g}") for a, b, score in sts]

        sst = [(sentence(rng), rng.choice("01")) for _ in range(n)]
        write_tsv(root / "SST-2" / f"{stem}.tsv", "sentence\tlabel", sst)
        expected["SST-2"][split] = [((text,), label) for text, label in sst]
    return expected


@pytest.fixture(scope="module")
def pretraining_bin(tmp_path_factory):
    """A sentencepiece data-bin of the pre-training pipeline (spm.model, dict.txt, splits)."""
    root = tmp_path_factory.mktemp("glue_pretraining")
    write_documents(root / "corpus.txt", 200, seed=3)
    destdir = root / "data-bin"
    assert prepare_corpus(["--input", str(root / "corpus.txt"), "--destdir", str(destdir),
                           "--vocab-size", "300", "--workers", "1"]) == 0
    return destdir


@pytest.fixture(scope="module")
def glue_bins(pretraining_bin, tmp_path_factory):
    """(OUT_DIR, expected examples, the script's run) of scripts/prepare_glue.sh on a fake GLUE
    folder, every task it has (the default)."""
    root = tmp_path_factory.mktemp("glue")
    expected = make_fake_glue(root / "glue_data", random.Random(5))
    proc = run_cli([SCRIPT, root / "glue_data", pretraining_bin / "spm.model",
                    pretraining_bin / "dict.txt", root / "out", "--workers", "1"])
    return root / "out", expected, proc


def read_items(data_bin, name, split):
    """The symbols of each item of DATA/name/split, without its eos."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(data_bin / name / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(data_bin / name / split), dictionary)
    items = []
    for index in range(len(dataset)):
        ids = dataset[index].tolist()
        assert ids[-1] == dictionary.eos()
        items.append([dictionary[i] for i in ids[:-1]])
    return items


@pytest.mark.slow
@pytest.mark.parametrize("task", ["RTE", "STS-B", "SST-2"])
def test_binarized_glue_reads_back_as_the_pieces_and_labels(task, glue_bins, pretraining_bin):
    import sentencepiece

    out, expected, proc = glue_bins
    processor = sentencepiece.SentencePieceProcessor(model_file=str(pretraining_bin / "spm.model"))
    data_bin = out / f"{task}-bin"
    inputs = ["input0", "input1"] if task != "SST-2" else ["input0"]
    assert sorted(p.name for p in data_bin.iterdir()) == sorted([*inputs, "label"])
    for split, examples in expected[task].items():
        for k, name in enumerate(inputs):
            assert read_items(data_bin, name, split) == [
                processor.encode(texts[k], out_type=str) for texts, _ in examples]
            # the pre-training dictionary, as the fine-tuned model's embeddings expect
            assert (data_bin / name / "dict.txt").read_bytes() == (
                pretraining_bin / "dict.txt").read_bytes()
        labels = [label for _, label in examples]
        if task == "STS-B":  # regression: the scores / 5, as text (sentence_prediction reads it)
            assert (data_bin / "label" / f"{split}.label").read_text().split("\n")[:-1] == labels
        else:
            assert read_items(data_bin, "label", split) == [[label] for label in labels]
    assert f"{task}: train 24, valid 8 examples" in proc.stdout
    assert "warning" not in proc.stdout


def test_reads_the_columns_and_rows_fairseq_reads(tmp_path):
    """MNLI's dev label is column 16 (train: 12) and its mismatched dev set is valid1; QQP
    drops rows without 6 fields; CoLA's files have no header."""
    mnli = glue.TASKS["MNLI"]
    assert [(stem, split) for stem, split, _ in mnli.splits()] == [
        ("train", "train"), ("dev_matched", "valid"), ("dev_mismatched", "valid1")]
    row = [f"c{i}" for i in range(1, 17)]
    write_tsv(tmp_path / "dev_matched.tsv", "\t".join(f"h{i}" for i in range(1, 17)), [row])
    assert glue.read_examples(mnli, tmp_path / "dev_matched.tsv", 16) == (
        [["c9"], ["c10"]], ["c16"])

    write_tsv(tmp_path / "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
              [(1, 2, 3, "a b", "c", 1), (4, 5, 6, "broken row"), (7, 8, 9, "d", "e f", 0)])
    assert glue.read_examples(glue.TASKS["QQP"], tmp_path / "qqp.tsv", 6) == (
        [["a b", "d"], ["c", "e f"]], ["1", "0"])

    write_tsv(tmp_path / "cola.tsv", None, [("gj04", 1, "", "they left ."),
                                             ("gj04", 0, "*", "left they .")])
    assert glue.read_examples(glue.TASKS["CoLA"], tmp_path / "cola.tsv", 2) == (
        [["they left .", "left they ."]], ["1", "0"])


def test_task_names_in_any_spelling():
    assert [glue.task_named(n).name for n in ("sst2", "STS", "cola", "mnli", "sts-b")] == [
        "SST-2", "STS-B", "CoLA", "MNLI", "STS-B"]
    with pytest.raises(CorpusError, match="unknown GLUE task 'WNLI'; one of MNLI QQP"):
        glue.task_named("WNLI")


@pytest.mark.parametrize("problem", ["task folder", "dev file", "short row", "bad score"])
def test_missing_or_malformed_input_is_a_one_line_error_naming_the_file(problem, tmp_path,
                                                                         capsys):
    glue_dir = tmp_path / "glue_data"
    make_fake_glue(glue_dir, random.Random(1))
    spm_model, dictionary = tmp_path / "spm.model", tmp_path / "dict.txt"
    spm_model.write_bytes(b"not read before the tsv files")
    dictionary.write_text("the 1\n")
    task, culprit = "RTE", glue_dir / "RTE" / "dev.tsv"
    if problem == "task folder":
        task, culprit = "QNLI", glue_dir / "QNLI"
        expected = f"no such task folder: {culprit}"
    elif problem == "dev file":
        culprit.unlink()
        expected = f"no such file: {culprit}"
    elif problem == "short row":
        culprit.write_text("index\tsentence1\tsentence2\tlabel\n0\tonly one sentence\n")
        expected = f"{culprit}:2: 2 tab-separated fields; RTE reads columns 2, 3, 4"
    else:
        task, culprit = "STS-B", glue_dir / "STS-B" / "train.tsv"
        lines = culprit.read_text().split("\n")
        lines[2] = "\t".join(lines[2].split("\t")[:9] + ["high"])
        culprit.write_text("\n".join(lines))
        expected = f"{culprit}:3: STS-B score 'high' is not a number"
    status = glue.main([str(glue_dir), str(spm_model), str(dictionary), str(tmp_path / "out"),
                        task])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"prepare_glue.sh: error: {expected}")
    assert not (tmp_path / "out" / f"{task}-bin").exists()


@pytest.mark.slow
def test_an_existing_data_bin_needs_force(glue_bins, pretraining_bin, capsys):
    out, _, _ = glue_bins
    glue_dir = out.parent / "glue_data"
    args = [str(glue_dir), str(pretraining_bin / "spm.model"), str(pretraining_bin / "dict.txt"),
            str(out), "SST-2", "--workers", "1"]
    before = (out / "SST-2-bin/input0/train.bin").read_bytes()
    assert glue.main(args) == 2
    assert f"{out / 'SST-2-bin'} exists; pass --force" in capsys.readouterr().err
    assert glue.main([*args, "--force"]) == 0
    assert (out / "SST-2-bin/input0/train.bin").read_bytes() == before
    assert not list(out.glob(".*building"))


@pytest.mark.slow
def test_a_dictionary_without_the_pieces_is_warned_about(glue_bins, pretraining_bin, tmp_path,
                                                         capsys):
    """DICT must be the pre-training dictionary of SPM_MODEL: pieces it lacks become <unk>."""
    out, _, _ = glue_bins
    small = tmp_path / "dict.txt"
    small.write_text("".join((pretraining_bin / "dict.txt").read_text().splitlines(True)[:20]))
    assert glue.main([str(out.parent / "glue_data"), str(pretraining_bin / "spm.model"),
                      str(small), str(tmp_path / "out"), "SST-2", "--workers", "1"]) == 0
    [warning] = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert f"of SST-2's pieces are not in {small} (now <unk>)" in warning


@pytest.mark.slow
def test_three_ml_recipe_reads_the_layout(glue_bins, tmp_path):
    """recipes/3ml/finetune_glue.sh counts the training examples from input0/train.idx."""
    out, _, _ = glue_bins
    pretrained = tmp_path / "export.pt"
    pretrained.touch()
    proc = run_cli([REPO_ROOT / "recipes/3ml/finetune_glue.sh"], env={
        "DRY_RUN": "1", "NUM_GPUS": "1", "TASK": "sst2", "DATA": str(out / "SST-2-bin"),
        "PRETRAINED": str(pretrained), "ARCH": "roberta_tiny", "MAX_POSITIONS": str(TOKENS),
        "BATCH_SIZE": "16", "EPOCHS": "3"})
    command = shlex.split(proc.stdout.splitlines()[0][2:])
    total = command[command.index("--total-num-update") + 1]
    assert total == str(3 * math.ceil(24 / 16))


@pytest.fixture(scope="module")
def pretrained_tiny(pretraining_bin, tmp_path_factory):
    """A 2-update bert_orig_tiny (fairseq's roberta) on the pre-training data-bin."""
    save_dir = tmp_path_factory.mktemp("glue_pretrained")
    run_cli([fairseq_cli("fairseq-train"), pretraining_bin, "--task", "masked_lm",
             "--criterion", "masked_lm", "--arch", "bert_orig_tiny",
             "--user-dir", REPO_ROOT / "fairseq_ext", "--tokens-per-sample", TOKENS,
             "--max-positions", TOKENS, "--batch-size", "8", "--optimizer", "adam", "--lr", "1e-3",
             "--max-update", "2", "--disable-validation", "--no-epoch-checkpoints", "--cpu",
             "--num-workers", "0", "--save-dir", save_dir, "--no-progress-bar"],
            env={"OMP_NUM_THREADS": "1"})
    return save_dir / "checkpoint_last.pt"


@pytest.mark.slow
@pytest.mark.parametrize("task, metric", [("RTE", "valid_accuracy"),
                                          ("STS-B", "valid_pearson_and_spearman")])
def test_finetune_recipe_trains_on_the_output(task, metric, glue_bins, pretrained_tiny,
                                              tmp_path):
    """recipes/swishrnn/finetune_glue.sh fine-tunes 2 updates on the data-bin and validates:
    sentence_prediction reads the pairs, the label dictionary and STS-B's scores."""
    out, _, _ = glue_bins
    proc = run_cli([REPO_ROOT / "recipes/swishrnn/finetune_glue.sh", "--no-progress-bar"], env={
        "TASK": task, "DATA": str(out / f"{task}-bin"), "PRETRAINED": str(pretrained_tiny),
        "ARCH": "bert_orig_tiny", "MAX_POSITIONS": str(TOKENS), "BATCH_SIZE": "8",
        "MAX_SENTENCES": "8", "TOTAL_UPDATES": "2", "WARMUP_UPDATES": "1",
        "EVAL_INTERVAL_UPDATES": "2", "CPU": "1", "NUM_WORKERS": "0", "NUM_GPUS": "1",
        "SAVE_DIR": str(tmp_path / "finetune"), "OMP_NUM_THREADS": "1"})
    [record] = json_log_records(proc.stdout + proc.stderr, key=metric)
    assert int(record["valid_num_updates"]) == 2 and float(record["valid_bsz"]) == 8

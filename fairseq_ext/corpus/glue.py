"""GLUE tasks -> data-bins for fine-tuning: ``python -m fairseq_ext.corpus.glue``
(``scripts/prepare_glue.sh``).

Reads the GLUE files the user already has, in the layout of GLUE's download script, encodes the
sentences with the pre-training sentencepiece model and binarizes them with the pre-training
dictionary into the layout of fairseq's ``sentence_prediction`` task that
``recipes/*/finetune_glue.sh`` read (as fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh``
makes it, with sentencepiece in place of GPT-2 BPE): ``OUT_DIR/<TASK>-bin/{input0,input1,label}``
(STS-B: ``{train,valid}.label``, the scores / 5). MNLI's mismatched dev set is ``valid1``. The
columns read and rows kept are fairseq's (QQP rows without exactly 6 fields dropped); the test
splits are not binarized; the encoded text stays in ``OUT_DIR/prep/<TASK>/``. Usage:
docs/bidirectional_finetuning.md, "How to fine-tune".
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import shutil
import sys
from pathlib import Path

from fairseq_ext.training.output_files import OutputError, error_line, refuse_existing

from .encoders import TokenizerSpec, count_dictionary_entries, encode_file
from .errors import CorpusError


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task's examples are in its tsv files."""

    name: str
    input_columns: tuple[int, ...]  # 1-based: the sentence (single-sentence tasks) or the pair
    label_column: int
    dev_label_column: int | None = None  # when the dev files keep it elsewhere (MNLI)
    header: bool = True
    required_fields: int | None = None  # rows with another number of fields are dropped (QQP)
    regression: bool = False  # STS-B: a score in [0, 5], written / 5 as fairseq does
    dev_files: tuple[str, ...] = ("dev",)  # -> fairseq's valid, valid1, ...

    @property
    def inputs(self) -> list[str]:
        return [f"input{i}" for i in range(len(self.input_columns))]

    def splits(self) -> list[tuple[str, str, int]]:
        """(tsv file stem, fairseq split, label column) of each split binarized."""
        dev_label = self.dev_label_column or self.label_column
        return [("train", "train", self.label_column)] + [
            (stem, "valid" if i == 0 else f"valid{i}", dev_label)
            for i, stem in enumerate(self.dev_files)
        ]


#: The eight GLUE tasks of the fine-tuning recipes, with fairseq's columns.
TASKS = {task.name: task for task in (
    GlueTask("MNLI", (9, 10), label_column=12, dev_label_column=16,
             dev_files=("dev_matched", "dev_mismatched")),
    GlueTask("QQP", (4, 5), label_column=6, required_fields=6),
    GlueTask("QNLI", (2, 3), label_column=4),
    GlueTask("MRPC", (4, 5), label_column=1),
    GlueTask("RTE", (2, 3), label_column=4),
    GlueTask("STS-B", (8, 9), label_column=10, regression=True),
    GlueTask("SST-2", (1,), label_column=2),
    GlueTask("CoLA", (4,), label_column=2, header=False),
)}
#: Other spellings of the task names (as recipes/lib/common.sh's glue_task_name accepts).
ALIASES = {"SST": "SST-2", "SST2": "SST-2", "STS": "STS-B", "STSB": "STS-B"}

_PREPROCESS_REPORT = re.compile(
    r"\] (?P<file>.+): (?P<sentences>\d+) sents, (?P<tokens>\d+) tokens, "
    r"(?P<replaced>[\d.e+-]+)% replaced"
)


def task_named(name: str) -> GlueTask:
    """The task of any spelling of its name (sst2, STS, cola, ...)."""
    upper = name.upper()
    canonical = ALIASES.get(upper) or next((t for t in TASKS if t.upper() == upper), None)
    if canonical is None:
        raise CorpusError(f"unknown GLUE task {name!r}; one of {' '.join(TASKS)}")
    return TASKS[canonical]


def read_examples(task: GlueTask, tsv: Path, label_column: int) -> tuple[list[list[str]], list[str]]:
    """The input columns (one list per input) and the labels of a split, fairseq's rows."""
    if not tsv.is_file():
        raise CorpusError(f"no such file: {tsv} (GLUE's layout: {tsv.parent}/"
                          f"{{{','.join(stem for stem, _, _ in task.splits())}}}.tsv)")
    columns = [*task.input_columns, label_column]
    inputs: list[list[str]] = [[] for _ in task.input_columns]
    labels: list[str] = []
    try:
        with open(tsv, encoding="utf-8", newline="\n") as handle:
            for number, line in enumerate(handle, 1):
                if task.header and number == 1:
                    continue
                fields = line.rstrip("\r\n").split("\t")
                if task.required_fields is not None and len(fields) != task.required_fields:
                    continue
                if len(fields) < max(columns):
                    raise CorpusError(
                        f"{tsv}:{number}: {len(fields)} tab-separated fields; {task.name} reads "
                        f"columns {', '.join(map(str, columns))}")
                for values, column in zip(inputs, task.input_columns):
                    values.append(fields[column - 1].strip())
                labels.append(parse_label(task, fields[label_column - 1], tsv, number))
    except UnicodeDecodeError as error:
        raise CorpusError(f"{tsv}: not UTF-8 ({error})") from error
    if not labels:
        raise CorpusError(f"{tsv}: no examples")
    return inputs, labels


def parse_label(task: GlueTask, text: str, tsv: Path, number: int) -> str:
    """The label as the data-bin holds it: the class name, or STS-B's score / 5."""
    text = text.strip()
    if task.regression:
        try:
            return f"{float(text) / 5.0:.6g}"
        except ValueError:
            raise CorpusError(f"{tsv}:{number}: {task.name} score {text!r} is not a number") from None
    if not text or len(text.split()) != 1:
        raise CorpusError(f"{tsv}:{number}: {task.name} label {text!r} is not one word")
    return text


def write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{line}\n" for line in lines)


class _ReportCapture(logging.Handler):
    """Collects the messages of fairseq-preprocess's logger."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_preprocess(prefixes: dict[str, list[Path]], destdir: Path, workers: int,
                   srcdict: Path | None) -> dict[str, float]:
    """``fairseq-preprocess --only-source`` of the text files of each fairseq split (train, and
    the valid ones joined by commas) into ``destdir``, in this process (fairseq is imported
    already); returns the percent of tokens replaced by ``<unk>`` per file. Its log goes to
    ``destdir/preprocess.log`` only, as the command's does."""
    from fairseq import options
    from fairseq_cli import preprocess

    argv = ["--only-source", "--trainpref", str(prefixes["train"][0]),
            "--validpref", ",".join(map(str, prefixes["valid"])),
            "--destdir", str(destdir), "--workers", str(workers)]
    if srcdict is not None:
        argv += ["--srcdict", str(srcdict)]
    args = options.get_preprocessing_parser().parse_args(argv)
    fairseq_logger = logging.getLogger("fairseq_cli.preprocess")
    handlers = list(fairseq_logger.handlers)
    level, propagate = fairseq_logger.level, fairseq_logger.propagate
    capture = _ReportCapture()
    fairseq_logger.addHandler(capture)
    fairseq_logger.setLevel(logging.INFO)
    fairseq_logger.propagate = False
    try:
        preprocess.main(args)
    except (OSError, ValueError, AssertionError) as error:
        raise CorpusError(f"fairseq-preprocess failed on {destdir}: {error}") from error
    finally:
        # main() adds a preprocess.log handler per call: close it, as the command's exit would
        for handler in fairseq_logger.handlers[:]:
            if handler not in handlers:
                handler.close()
                fairseq_logger.removeHandler(handler)
        fairseq_logger.setLevel(level)
        fairseq_logger.propagate = propagate
    return {match["file"]: float(match["replaced"])
            for match in map(_PREPROCESS_REPORT.search, capture.messages) if match}


def prepare_task(task: GlueTask, glue_dir: Path, spm_model: Path, dictionary: Path,
                 out_dir: Path, workers: int, force: bool) -> dict:
    """Binarize one task into ``out_dir/<TASK>-bin``; returns its summary."""
    task_dir = glue_dir / task.name
    if not task_dir.is_dir():
        raise CorpusError(f"no such task folder: {task_dir} (GLUE's layout: "
                          f"GLUE_DIR/{task.name}/train.tsv, ...)")
    destdir = out_dir / f"{task.name}-bin"
    refuse_existing([destdir], force)
    prep = out_dir / "prep" / task.name
    spec = TokenizerSpec("spm", spm_model=str(spm_model))

    # every split is read (and checked) before anything is encoded
    splits = {split: read_examples(task, task_dir / f"{stem}.tsv", label_column)
              for stem, split, label_column in task.splits()}
    examples, label_names = {}, set()
    encoded: dict[str, list[Path]] = {name: [] for name in [*task.inputs, "label"]}
    prep.mkdir(parents=True, exist_ok=True)
    for split, (inputs, labels) in splits.items():
        examples[split] = len(labels)
        label_names.update(labels)
        for name, sentences in zip(task.inputs, inputs):
            raw, pieces = prep / f"{split}.raw.{name}", prep / f"{split}.{name}"
            write_lines(raw, sentences)
            encode_file(raw, pieces, spec, workers)
            encoded[name].append(pieces)
        write_lines(prep / f"{split}.label", labels)
        encoded["label"].append(prep / f"{split}.label")

    building = out_dir / f".{task.name}-bin.building"
    shutil.rmtree(building, ignore_errors=True)
    replaced = {}
    try:
        for name in task.inputs:
            replaced.update(run_preprocess(split_prefixes(encoded[name]), building / name,
                                           workers, srcdict=dictionary))
        if task.regression:  # read as text by sentence_prediction --regression-target
            (building / "label").mkdir(parents=True)
            for path in encoded["label"]:
                shutil.copyfile(path, building / "label" / path.name)
        else:
            run_preprocess(split_prefixes(encoded["label"]), building / "label", workers,
                           srcdict=None)
        if destdir.exists():
            shutil.rmtree(destdir)
        os.replace(building, destdir)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    unknown = {file: percent for file, percent in replaced.items() if percent > 0}
    return {"task": task.name, "destdir": destdir, "examples": examples,
            "labels": None if task.regression else sorted(label_names),
            "replaced_percent": unknown}


def split_prefixes(files: list[Path]) -> dict[str, list[Path]]:
    """The fairseq-preprocess prefixes of ``[train, valid, valid1, ...]`` text files (with
    ``--only-source`` and no language, a prefix is the file itself)."""
    return {"train": files[:1], "valid": files[1:]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prepare_glue.sh",
        description="Binarize GLUE tasks for fine-tuning (fairseq's sentence_prediction layout, "
                    "OUT_DIR/<TASK>-bin) with the pre-training sentencepiece model and dictionary.")
    parser.add_argument("glue_dir", type=Path, metavar="GLUE_DIR",
                        help="GLUE as its download script lays it out: GLUE_DIR/RTE/train.tsv, ...")
    parser.add_argument("spm_model", type=Path, metavar="SPM_MODEL",
                        help="the pre-training sentencepiece model (DATA-BIN/spm.model of "
                             "scripts/prepare_corpus.sh)")
    parser.add_argument("dictionary", type=Path, metavar="DICT",
                        help="the pre-training fairseq dictionary (DATA-BIN/dict.txt)")
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    parser.add_argument("tasks", nargs="*", metavar="TASK",
                        help=f"any of {' '.join(TASKS)} (default: those GLUE_DIR has)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="encoding and fairseq-preprocess processes (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="rebuild an existing OUT_DIR/<TASK>-bin")
    return parser


def run(args: argparse.Namespace) -> list[dict]:
    for path, what in ((args.spm_model, "SPM_MODEL"), (args.dictionary, "DICT")):
        if not path.is_file():
            raise CorpusError(f"{what} {path}: no such file")
    count_dictionary_entries(args.dictionary)  # a clear error if it is not a fairseq dictionary
    if not args.glue_dir.is_dir():
        raise CorpusError(f"GLUE_DIR {args.glue_dir}: no such folder")
    if args.tasks:
        tasks = [task_named(name) for name in args.tasks]
    else:
        tasks = [task for name, task in TASKS.items() if (args.glue_dir / name).is_dir()]
        if not tasks:
            raise CorpusError(f"no GLUE task folder in {args.glue_dir} (one of {' '.join(TASKS)})")
    # every task's data-bin, before the first is built
    refuse_existing([args.out_dir / f"{task.name}-bin" for task in tasks], args.force)
    summaries = []
    for task in tasks:
        summary = prepare_task(task, args.glue_dir, args.spm_model, args.dictionary,
                               args.out_dir, max(1, args.workers), args.force)
        counts = ", ".join(f"{split} {n}" for split, n in summary["examples"].items())
        labels = ("scores / 5 (regression)" if summary["labels"] is None
                  else f"labels {' '.join(summary['labels'])}")
        print(f"{task.name}: {counts} examples; {labels} -> {summary['destdir']}", flush=True)
        if summary["replaced_percent"]:
            worst = max(summary["replaced_percent"].values())
            print(f"warning: up to {worst}% of {task.name}'s pieces are not in {args.dictionary} "
                  f"(now <unk>): is it the dictionary of {args.spm_model}?", flush=True)
        summaries.append(summary)
    return summaries


def main(argv: list[str] | None = None) -> int:
    """Returns 0 on success, 2 on a user error (one line on stderr)."""
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (CorpusError, OutputError) as error:
        print(error_line("prepare_glue.sh", error), file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

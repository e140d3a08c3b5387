"""``--eval-scores-out FILE``: every row ``fairseq-validate --task bidirectional_lm --eval-mode
M`` scored, so that two models can be compared row by row (:mod:`.uncertainty`'s paired errors).

The file is JSON lines: a header ``{"format", "version", "settings"}`` (the task's evaluation
settings, :meth:`BidirectionalLMTask.eval_settings`: equal settings on the same data score the
same rows), then one line per row::

    {"split": "valid", "document": 12, "position": 37, "r": "r1", "tokens": 1,
     "loss": 5.213, "correct": 0, "target": 417}

``position`` and ``target`` are ``null`` outside ``infill`` (``target`` may be absent), ``r`` is
``full`` for ``full_doc_ppl``, ``loss`` is summed over ``tokens`` in nats; ``(split, document,
position, r)`` identifies a row across files. An existing file is refused when the config is
read (:func:`check_eval_scores_path`); the rows are written whole at the end, atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from fairseq_ext.training.output_files import write_text

FORMAT = "fairseq_ext.bidirectional_eval_scores"
VERSION = 1

RowKey = Tuple[str, int, int, str]


class EvalScoresError(ValueError):
    """A scores file that cannot be written or read as asked; the message says what to do."""


def check_eval_scores_path(path) -> None:
    """Refuse an existing file or a missing directory, naming ``--eval-scores-out``."""
    path = Path(path)
    if os.path.lexists(path):
        raise EvalScoresError(f"--eval-scores-out {path} exists; remove it or name a new file "
                              "(scores are never overwritten)")
    if not path.parent.is_dir():
        raise EvalScoresError(f"--eval-scores-out {path}: the directory {path.parent} does not "
                              "exist")


class EvalScoresWriter:
    """Collects the rows of ``fairseq-validate`` batches and writes them to ``path``."""

    def __init__(self, path, settings: Dict[str, object]):
        self.path = Path(path)
        self.settings = dict(settings)
        self.rows: List[Dict[str, object]] = []
        self._written = False

    def add_batch(self, sample, rows, labels: Sequence[str]) -> None:
        """The rows of one batch: ``rows`` is the criterion's ``(loss, tokens, correct,
        target)``, each ``(B,)`` (``target``: the id of an ``infill`` row's one predicted
        token); ``sample`` carries ``eval_split``, ``eval_document``, ``eval_position`` and
        ``eval_group`` (:class:`BidirectionalEvalDataset`); ``labels`` name the groups."""
        loss, tokens, correct, target = (values.tolist() for values in rows)
        documents = sample["eval_document"].tolist()
        positions = sample["eval_position"].tolist()
        groups = sample["eval_group"].tolist()
        infill = self.settings.get("eval_mode") == "infill"
        for row in range(len(documents)):
            self.rows.append({
                "split": sample["eval_split"], "document": documents[row],
                "position": positions[row] if positions[row] >= 0 else None,
                "r": labels[groups[row]], "tokens": int(tokens[row]), "loss": float(loss[row]),
                "correct": int(correct[row]) if infill else None,
                "target": int(target[row]) if infill else None,
            })

    def write(self) -> None:
        """Write the header and every row collected so far. The first write refuses a file that
        appeared meanwhile; a later one (another ``--valid-subset``) replaces this run's own."""
        header = {"format": FORMAT, "version": VERSION, "settings": self.settings}
        lines = [json.dumps(header)] + [json.dumps(row) for row in self.rows]
        write_text(self.path, "\n".join(lines) + "\n", force=self._written)
        self._written = True


def row_key(row: Dict[str, object]) -> RowKey:
    position = row["position"]
    return (str(row["split"]), int(row["document"]), -1 if position is None else int(position),
            str(row["r"]))


def read_eval_scores(path) -> Tuple[Dict[str, object], Dict[RowKey, Dict[str, object]]]:
    """``(settings, {row key: row})`` of a file :class:`EvalScoresWriter` wrote."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
        header = json.loads(lines[0]) if lines else {}
    except (OSError, ValueError) as error:
        raise EvalScoresError(f"{path}: not a scores file ({error})") from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise EvalScoresError(f"{path}: not a {FORMAT} file of version {VERSION}")
    rows = {}
    for line in lines[1:]:
        row = json.loads(line)
        rows[row_key(row)] = row
    return header["settings"], rows

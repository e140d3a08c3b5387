"""What both exports share: reading a fairseq checkpoint with one-line errors, its config as plain
dicts, the tokenizer files it was trained with, the hub-directory file names, and the command
lines' logging and error handling.

:mod:`fairseq_ext.export.encoder` (``scripts/export_encoder.py``: 3ML encoder to a plain fairseq
RoBERTa checkpoint or a hub directory) and :mod:`fairseq_ext.export.huggingface`
(``scripts/export_hf.py``: to a transformers directory) read their input through
:func:`load_checkpoint` and :func:`tokenizer_files`, check the dictionary against the embedding
with :func:`check_vocabulary`, write their output through
:func:`fairseq_ext.training.output_files.atomic_directory` / ``atomic_file`` (nothing the user
saved is overwritten without ``--force``; an interrupted export leaves nothing behind), and run
their ``main`` through :func:`run_export_command`: bad input is one line on stderr and exit
status 2.
"""
import argparse
import copy
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Tuple

from fairseq_ext.training.output_files import OutputError, error_line


class ExportError(Exception):
    """A problem with the user's input, reported as one line (exit status 2)."""


def load_checkpoint(path: Path) -> dict:
    """fairseq's ``load_checkpoint_to_cpu``, with one-line errors."""
    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    from fairseq_ext.training.checkpoint_loading import (
        CheckpointLoadError,
        checkpoint_error_advice,
        load_checkpoint_to_cpu,
    )

    try:
        state = load_checkpoint_to_cpu(path)
    except CheckpointLoadError as e:  # not a torch file, truncated, refused global, ...
        raise ExportError(f"{path}: cannot read it as a fairseq checkpoint: it "
                          f"{checkpoint_error_advice(path, e.__cause__)}")
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict) \
            or state.get("cfg") is None:
        raise ExportError(f"{path}: not a fairseq checkpoint (no 'model' and 'cfg')")
    return state


def plain(model_cfg):
    """A model config as a dict or Namespace (an OmegaConf node becomes a dict)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(model_cfg):
        return OmegaConf.to_container(model_cfg, resolve=True, enum_to_str=True)
    return model_cfg


def plain_config(cfg):
    """The checkpoint's cfg as plain dicts and lists, as ``fairseq-hydra-train`` writes it: an
    ``argparse.Namespace`` (``fairseq-train``'s model config) becomes a dict holding its
    ``_name``, so the export needs no non-builtin class to unpickle."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return _without_namespaces(copy.deepcopy(cfg))


def _without_namespaces(value):
    if isinstance(value, argparse.Namespace):
        fields = _without_namespaces(vars(value))
        fields.setdefault("_name", fields.get("arch"))
        return fields
    if isinstance(value, dict):
        return {k: _without_namespaces(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_namespaces(v) for v in value)
    return value


def model_name(model_cfg) -> str:
    """The arch (``_name`` / ``arch``) of a model config, Namespace or dict."""
    model_cfg = plain(model_cfg)
    get = model_cfg.get if isinstance(model_cfg, dict) else lambda k: getattr(model_cfg, k, None)
    return get("_name") or get("arch") or ""


def as_namespace(model_cfg) -> argparse.Namespace:
    model_cfg = plain(model_cfg)
    return argparse.Namespace(**(model_cfg if isinstance(model_cfg, dict) else vars(model_cfg)))


#: The files of a hub directory, named as fairseq's ``hub_utils.from_pretrained`` expects them:
#: it loads ``model.pt``, sets the task's data to the directory (so the task reads ``dict.txt``)
#: and points ``--sentencepiece-model`` at ``sentencepiece.bpe.model``.
HUB_MODEL, HUB_DICT, HUB_SENTENCEPIECE = "model.pt", "dict.txt", "sentencepiece.bpe.model"


#: The data-bin file names of ``scripts/prepare_corpus.sh`` (fairseq_ext.corpus).
DATA_BIN_DICT, DATA_BIN_SENTENCEPIECE = "dict.txt", "spm.model"


def tokenizer_files(state: dict, source: Path, dictionary: Optional[Path] = None,
                    sentencepiece_model: Optional[Path] = None) -> Tuple[Path, Path]:
    """The ``dict.txt`` and sentencepiece model a checkpoint was trained with: the given paths,
    or those in the data-bin of its ``cfg.task.data`` (where ``scripts/prepare_corpus.sh``
    writes them)."""
    task_cfg = plain_config(state["cfg"]).get("task") or {}
    data = str(task_cfg.get("data") or "").split(os.pathsep)[0]
    found = {}
    for given, name, flag in ((dictionary, DATA_BIN_DICT, "--dict"),
                              (sentencepiece_model, DATA_BIN_SENTENCEPIECE,
                               "--sentencepiece-model")):
        if given is not None:
            if not given.is_file():
                raise ExportError(f"{flag} {given}: no such file")
            found[name] = given
            continue
        candidate = Path(data) / name if data else None
        if candidate is None or not candidate.is_file():
            where = f"its training data {data}" if data else "no training data in its config"
            raise ExportError(f"{source}: no {name} in {where}; give the file the model was "
                              f"trained with: {flag} PATH")
        found[name] = candidate
    return found[DATA_BIN_DICT], found[DATA_BIN_SENTENCEPIECE]


def check_vocabulary(weights: dict, embedding_key: str, dictionary: Path) -> None:
    """The model's embedding ``weights[embedding_key]`` has one row per symbol of
    ``dictionary`` as its task builds it (fairseq's four specials, the entries, and ``<mask>``,
    which ``masked_lm`` and ``bidirectional_lm`` append); else :class:`ExportError` naming the
    file and both sizes."""
    from fairseq.data import Dictionary

    rows = weights[embedding_key].size(0)
    try:
        symbols = Dictionary.load(str(dictionary))
    except Exception as e:  # fairseq raises ValueError/RuntimeError on a malformed line
        raise ExportError(f"{dictionary}: not a fairseq dictionary ({e})")
    if "<mask>" not in symbols.indices:
        symbols.add_symbol("<mask>")
    if len(symbols) != rows:
        raise ExportError(f"{dictionary}: {len(symbols)} symbols with <mask>, but the model's "
                          f"embedding has {rows} rows: not the dictionary it was trained with "
                          "(give the right one with --dict)")


def log_to_stderr(module_logger: logging.Logger) -> None:
    """The exporters' command lines: INFO lines on stderr in fairseq's format (unless the
    process already configured logging), so the log says what was written and from what."""
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S", level=logging.INFO, stream=sys.stderr)
    module_logger.setLevel(logging.INFO)


def add_tokenizer_and_force_arguments(parser: argparse.ArgumentParser, *, scope: str,
                                      dict_default: str, sentencepiece_default: str) -> None:
    """The options both export command lines take: ``--dict`` and ``--sentencepiece-model``
    (the tokenizer files, found by :func:`tokenizer_files` when not given) and ``--force``
    (overwrite OUTPUT). ``scope`` prefixes their help (e.g. ``"hub directory only: "``)."""
    parser.add_argument("--dict", type=Path, default=None,
                        help=f"{scope}the dict.txt the model was trained with (default: "
                             f"{dict_default})")
    parser.add_argument("--sentencepiece-model", type=Path, default=None,
                        help=f"{scope}the sentencepiece model the data was encoded with "
                             f"(default: {sentencepiece_default})")
    parser.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")


def run_export_command(program: str, module_logger: logging.Logger, body: Callable[[], int]) -> int:
    """Run an export command line's ``body`` with INFO logging on stderr
    (:func:`log_to_stderr`); an :class:`ExportError` or an ``OutputError`` (an output that
    exists without ``--force``, an unwritable folder) becomes one line ``program: error: ...`` on
    stderr and exit status 2."""
    log_to_stderr(module_logger)
    try:
        return body()
    except (ExportError, OutputError) as e:
        print(error_line(program, e), file=sys.stderr)
        return 2

"""Re-run bookkeeping of the corpus pipeline: atomic outputs, step stamps, and the destdir
manifest.

* Every output is written under a temporary name (``<name>.tmp-<pid>``) and renamed into place
  when complete; a failing step removes its temporaries.
* A step is done only when its stamp (``prep/<step>.stamp.json``, written last and atomically)
  exists and matches: same settings hash, and the same size and mtime for every input the
  step read from the destdir and every output it wrote. Redoing a step therefore also redoes
  the steps that read its outputs.
* ``manifest.json`` records the settings (input fingerprint included) a destdir was built
  with. A destdir built from other settings is never reused: :func:`claim_destdir` stops with
  an error naming the differences unless ``--overwrite`` is given, and then it removes only the
  files this tool makes (:data:`TOOL_FILES`), never anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .documents import SPLITS
from .errors import CorpusError

MANIFEST_NAME = "manifest.json"
WORK_DIR = "prep"
PREPROCESS_TEMPORARY_PREFIX = ".preprocess.tmp-"
SPM_MODEL = "spm.model"
GPT2_DIR = "gpt2"
GPT2_FILES = (f"{GPT2_DIR}/encoder.json", f"{GPT2_DIR}/vocab.bpe")
STEP_NAMES = ("clean", "tokenizer", "encode", "dict", "preprocess")
# What fairseq-preprocess writes into the destdir.
BINARY_FILES = tuple(f"{split}.{extension}" for split in SPLITS for extension in ("bin", "idx")) + (
    "dict.txt",
    "preprocess.log",
)
# Every file this tool may create in a destdir (relative paths), besides temporaries.
TOOL_FILES = (
    MANIFEST_NAME,
    SPM_MODEL,
    *GPT2_FILES,
    *BINARY_FILES,
    *(f"{WORK_DIR}/{split}.{extension}" for split in SPLITS for extension in ("txt", "tok")),
    f"{WORK_DIR}/dict.txt",
    *(f"{WORK_DIR}/{step}.stamp.json" for step in STEP_NAMES),
)


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before it is complete."""
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def remove_stale_temporaries(paths: list[Path]) -> None:
    """Remove temporaries of ``paths`` left by an interrupted run."""
    for path in paths:
        for stale in path.parent.glob(f"{path.name}.tmp-*"):
            stale.unlink()


@contextlib.contextmanager
def atomic_outputs(paths: list[Path]) -> Iterator[list[Path]]:
    """Yield temporary paths to write ``paths`` to; rename them into place on success, remove
    them on failure."""
    temporaries = [temporary_path(path) for path in paths]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield temporaries
    except BaseException:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
        raise
    for temporary, path in zip(temporaries, paths):
        os.replace(temporary, path)


def write_json_atomically(path: Path, content: dict[str, Any]) -> None:
    with atomic_outputs([path]) as (temporary,):
        temporary.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


class StepRunner:
    """Runs the pipeline steps of one destdir, skipping those whose stamp matches."""

    def __init__(self, destdir: Path, settings: dict[str, Any], log: Callable[[str], None]):
        self.destdir = destdir
        self.settings_hash = settings_hash(settings)
        self.log = log
        self.seconds: dict[str, float] = {}  # of the run that made the outputs
        self.skipped: list[str] = []  # steps done by an earlier run

    def stamp_path(self, step: str) -> Path:
        return self.destdir / WORK_DIR / f"{step}.stamp.json"

    def run(
        self,
        step: str,
        inputs: list[Path],
        outputs: list[Path],
        action: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        """Run ``action`` (which writes ``outputs`` atomically and returns its statistics)
        unless the step's stamp matches; return the statistics, stored in the stamp."""
        stamp = self._matching_stamp(step, inputs, outputs)
        if stamp is not None:
            self.log(f"skip: {step} (done)")
            self.seconds[step] = stamp["seconds"]
            self.skipped.append(step)
            return stamp["stats"]
        self.log(f"run: {step}")
        self.stamp_path(step).unlink(missing_ok=True)
        remove_stale_temporaries(outputs)
        started = time.monotonic()
        stats = action()
        self.seconds[step] = round(time.monotonic() - started, 2)
        write_json_atomically(
            self.stamp_path(step),
            {
                "step": step,
                "settings_hash": self.settings_hash,
                "inputs": self._fingerprints(inputs),
                "outputs": self._fingerprints(outputs),
                "seconds": self.seconds[step],
                "stats": stats,
            },
        )
        return stats

    def _matching_stamp(
        self, step: str, inputs: list[Path], outputs: list[Path]
    ) -> dict[str, Any] | None:
        try:
            stamp = json.loads(self.stamp_path(step).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        matches = (
            stamp.get("settings_hash") == self.settings_hash
            and stamp.get("inputs") == self._fingerprints(inputs)
            and stamp.get("outputs") == self._fingerprints(outputs)
        )
        return stamp if matches else None

    def _fingerprints(self, paths: list[Path]) -> dict[str, list[int] | None]:
        fingerprints = {}
        for path in paths:
            try:
                status = path.stat()
                fingerprint = [status.st_size, status.st_mtime_ns]
            except FileNotFoundError:
                fingerprint = None
            fingerprints[path.relative_to(self.destdir).as_posix()] = fingerprint
        return fingerprints


def claim_destdir(
    destdir: Path, settings: dict[str, Any], overwrite: bool, log: Callable[[str], None]
) -> None:
    """Make sure ``destdir`` may be used for ``settings``, then record them in its manifest.

    Raises :class:`CorpusError` if it holds a data-bin of other settings (unless ``overwrite``)
    or files this tool would write but did not make (no manifest).
    """
    manifest_path = destdir / MANIFEST_NAME
    if manifest_path.exists():
        try:
            recorded = json.loads(manifest_path.read_text(encoding="utf-8"))["settings"]
        except (ValueError, KeyError, TypeError):
            recorded = {"manifest": "unreadable"}
        differences = describe_differences(recorded, settings)
        if differences:
            finished_steps = [
                step for step in STEP_NAMES if (destdir / WORK_DIR / f"{step}.stamp.json").exists()
            ]
            if overwrite:
                log(
                    f"overwrite: removing this tool's files from {destdir} (it was built with {differences})"
                )
            elif not finished_steps:
                log(
                    f"note: {destdir} holds an unfinished run with other settings ({differences}); "
                    "starting over"
                )
            else:
                raise CorpusError(
                    f"{destdir} holds a data-bin built with other settings ({differences}); "
                    "choose another --destdir, or pass --overwrite to replace this tool's files there"
                )
            remove_tool_files(destdir)
    else:
        present = [name for name in TOOL_FILES if (destdir / name).exists()]
        if present:
            raise CorpusError(
                f"{destdir} already has {', '.join(present[:5])} but no {MANIFEST_NAME}, so this tool "
                "did not make them; choose another --destdir (nothing was changed)"
            )
    write_json_atomically(manifest_path, {"settings": settings, "complete": False})


def describe_differences(recorded: dict[str, Any], requested: dict[str, Any]) -> str:
    """``key: recorded -> requested`` for every setting that differs, ``; ``-separated."""

    def shown(value: Any) -> str:
        """The value, with a sha256 shortened to its recognisable start."""
        text = str(value)
        return text[:12] + "..." if len(text) == 64 else text

    differences = []
    for key in sorted(set(recorded) | set(requested)):
        if recorded.get(key) != requested.get(key):
            differences.append(
                f"{key}: {shown(recorded.get(key, 'unset'))} -> {shown(requested.get(key, 'unset'))}"
            )
    return "; ".join(differences)


def remove_tool_files(destdir: Path) -> None:
    """Remove the files this tool makes in ``destdir`` (and their temporaries); leave
    everything else, and keep directories that still hold other files."""
    for name in TOOL_FILES:
        path = destdir / name
        path.unlink(missing_ok=True)
        remove_stale_temporaries([path])
    for stale in destdir.glob(f"{PREPROCESS_TEMPORARY_PREFIX}*"):
        shutil.rmtree(stale)
    for directory in (destdir / WORK_DIR, destdir / GPT2_DIR):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def data_bin_sha256(destdir: Path) -> str:
    """sha256 over the data a model trains on: each split's ``.bin`` and ``.idx`` and
    ``dict.txt`` (in :data:`BINARY_FILES` order; ``preprocess.log`` is left out)."""
    digest = hashlib.sha256()
    for name in BINARY_FILES:
        if name != "preprocess.log":
            digest.update(f"{name}\t{file_sha256(Path(destdir) / name)}\n".encode())
    return digest.hexdigest()


def corpus_identity(destdir: Path) -> dict[str, Any]:
    """What a data-bin holds, as its manifest records it: the sha256 of its binaries and
    dictionary (:func:`data_bin_sha256`; equal on two machines when the build is the same) and
    the tokens of each split; empty without a manifest."""
    try:
        manifest = json.loads((Path(destdir) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    summary = manifest.get("summary") or {}
    identity = {"data_sha256": summary.get("data_sha256")}
    identity.update({f"{split}_tokens": count
                     for split, count in (summary.get("tokens") or {}).items()})
    return identity

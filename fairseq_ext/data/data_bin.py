"""Checks of a fairseq data-bin made before fairseq reads it, so a wrong one stops the run with
one line naming the file and what to change.

* A data path that does not exist, or is not a data-bin: fairseq's tasks stop with
  ``FileNotFoundError: ... 'DATA/dict.txt'`` at the end of a traceback (it names the file; our
  ``bidirectional_lm`` task says it in one line, :func:`check_data_bin`).
* An empty split (``valid.bin`` of 0 bytes: ``fairseq-preprocess`` of an empty file, or a corpus
  too small for a validation split): fairseq crashes in ``np.memmap`` with ``ValueError: cannot
  mmap an empty file``, which names neither file nor fix (:func:`check_split_not_empty`).
"""
import os


class DataBinError(ValueError):
    """A data-bin that fairseq cannot read; the message says what to change."""


def check_data_bin(data: str) -> None:
    """Raise :class:`DataBinError` unless ``data`` (one data-bin path) holds a ``dict.txt``."""
    if not os.path.isdir(data):
        raise DataBinError(f"the data-bin {data} does not exist: check the path (the positional "
                           "DATA argument), or make it with scripts/prepare_corpus.sh")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise DataBinError(f"{data} is not a fairseq data-bin (it has no dict.txt): point DATA at "
                           "the folder fairseq-preprocess or scripts/prepare_corpus.sh wrote")


def check_split_not_empty(data: str, split: str, validation: bool = False) -> None:
    """Raise :class:`DataBinError` if ``split`` of the data-bin ``data`` exists and holds no
    tokens (fairseq's ``MMapIndexedDataset`` cannot map an empty ``.bin``). ``validation``:
    the message offers fairseq's ways to validate on something else."""
    path = os.path.join(data, f"{split}.bin")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        fix = ("add documents to it (scripts/prepare_corpus.sh --valid-fraction), validate on "
               "another split (--valid-subset), or train without validation "
               "(--disable-validation)" if validation else
               "add documents to it (re-run fairseq-preprocess or scripts/prepare_corpus.sh)")
        raise DataBinError(f"the {split} split of {data} is empty ({path} has 0 bytes): {fix}")

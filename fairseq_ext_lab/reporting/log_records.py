"""Reading fairseq's ``--log-format json`` output.

fairseq prints one JSON object per log record, after a logging prefix on stdout
(``2026-01-01 12:00:00 | INFO | train_inner | {...}``) or bare in a ``--log-file``; every
figure is a string. ``scripts/demo.py`` and ``scripts/plot_curves.py`` read runs through this,
and so does the GPU suite (``fairseq_ext_lab/benchmarks/gpu_suite/``), which loads this file by its
path before fairseq is installed: it imports the standard library only.
"""
import json
from typing import Optional


def parse_json_record(line: str) -> Optional[dict]:
    """The JSON object of a fairseq json log line (after any logging prefix), or None."""
    brace = line.find("{")
    if brace < 0:
        return None
    try:
        record = json.loads(line[brace:])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None

"""The suite's pure checks, on text and files its stages leave: a fairseq-hydra-train json log
(:func:`check_train_log`), pytest's junit XML (:func:`check_junit_skips`) and two runs'
per-update losses (:func:`compare_losses`). The standard library only (the package docstring
says why)."""
import dataclasses
import importlib.util
import math
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Mapping, Tuple

from .settings import REPO, default_of

TRAIN_SUMMARY_COLUMNS = ("arch", "precision", "updates", "first_loss", "last_loss", "valid_loss",
                         "wps_median", "s_per_update", "tflops", "mfu", "overflows", "verdict")
#: Skip reasons that mean the CUDA path did not run: for want of a GPU, a CUDA kernel or nvcc,
#: or of FlexAttention (tests/test_block_sparse_attention.py's module skip: its CUDA test then
#: never runs). Each such skip fails the tests stage.
NO_GPU_SKIPS = (re.compile(r"\bno\b.*(gpu|cuda|nvcc)", re.I),
                re.compile(r"\bno FlexAttention\b", re.I))
#: The reasons for which every test of one CUDA test module may be skipped on the GPU machine
#: (none of them means a CUDA path went untested): a module all skipped for any other reason,
#: not one of NO_GPU_SKIPS either, fails the tests stage too.
ACCEPTED_MODULE_SKIPS = (
    re.compile(r"^a GPU: scripts/gpu_suite\.sh checks FSDP$"),  # tests/test_distributed.py
)
#: fairseq's common.min_loss_scale, where it gives up.
MIN_LOSS_SCALE = 1e-4


def no_gpu_skip(reason: str) -> bool:
    """Whether skip `reason` says the CUDA path did not run (NO_GPU_SKIPS)."""
    return any(pattern.search(reason) for pattern in NO_GPU_SKIPS)


def module_of(classname: str) -> str:
    """The test module of a junit testcase's classname (``tests.test_x`` of
    ``tests.test_x.TestCase``)."""
    parts = (classname or "").split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return ".".join(parts[:i + 1])
    return classname or ""


def modules_skipped_whole(cases: List[Tuple[str, List[str]]]) -> Dict[str, List[str]]:
    """Module -> its skip reasons, for each module of `cases` ((classname, the reasons its
    testcase was skipped for: none if it ran)) whose every test was skipped for a reason neither
    in ACCEPTED_MODULE_SKIPS nor in NO_GPU_SKIPS (those fail already)."""
    by_module: Dict[str, List[List[str]]] = {}
    for classname, reasons in cases:
        by_module.setdefault(module_of(classname), []).append(reasons)
    found = {}
    for module, tests in by_module.items():
        if not all(tests):
            continue  # a test of it ran
        reasons = sorted({r for test in tests for r in test})
        unlisted = [r for r in reasons if not no_gpu_skip(r)
                    and not any(p.search(r) for p in ACCEPTED_MODULE_SKIPS)]
        if unlisted:
            found[module] = unlisted
    return found


# --------------------------------------------------------------------- the train log check

@dataclasses.dataclass
class TrainCheck:
    """The summary row of one train run (TRAIN_SUMMARY_COLUMNS) and what was wrong with it."""

    row: List[str]
    problems: List[str]


def standard_library_module(relative_path: str):
    """A module of the package that imports the standard library only, loaded from its file:
    imported through ``fairseq_ext_lab``, whose __init__ imports the plugin (fairseq and torch), it would need
    what this suite installs."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(f"gpu_suite_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The JSON object a fairseq log line ends with, else None: the package's own reader.
json_record = standard_library_module("fairseq_ext_lab/reporting/log_records.py").parse_json_record


def check_train_log(text: str, arch: str, precision: str, updates: int, require_cuda: bool = True,
                    peak_tflops: float = float(default_of("GPU_SUITE_PEAK_TFLOPS"))) -> TrainCheck:
    """Check a fairseq-hydra-train log (common.log_format=json records on stdout) and make its
    summary row: every update done, the loss fell, no NaN/inf, words/s logged, the precision
    asked for in fairseq's config, CUDA when the suite requires it; the achieved TFLOP/s (our
    criteria's FLOPs per update, the records' pflops, times updates per second) and MFU, that
    over `peak_tflops`; medians over the records after the first.

    Gradient overflow: none in bf16 and fp32; in fp16 the dynamic loss scaler (starting at 128)
    skips a few updates while it settles, so overflow fails the run only when it persists (any
    in the second half of the run, or more than a tenth of the updates skipped) or the loss
    scale reaches fairseq's minimum (1e-4)."""
    # fairseq's output, without the command line the stage printed first (paths may say anything).
    lines = [line for line in text.splitlines() if not line.startswith("+ ")]
    train, valid, other_overflow = [], [], []
    done = overflows = late_overflows = 0
    for line in lines:
        record = json_record(line)
        if record is not None:
            if "loss" in record and "num_updates" in record:
                train.append(record)
            elif "valid_loss" in record:
                valid.append(record)
            for key in ("num_updates", "train_num_updates", "valid_num_updates"):
                done = max(done, int(float(record.get(key, 0))))
        elif "gradient overflow detected" in line:
            overflows += 1
            late_overflows += done >= updates // 2
        elif "overflow" in line.lower() and "overflow in param" not in line:
            other_overflow.append(line)
    problems = []
    inner = [r for r in train if "wps" in r]
    if not inner:
        problems.append("no training records")
    else:
        losses = [float(r["loss"]) for r in inner]
        if not all(math.isfinite(v) for v in losses):
            problems.append(f"non-finite loss: {losses}")
        elif not losses[-1] < losses[0]:
            problems.append(f"the loss did not fall: {losses[0]} -> {losses[-1]}")
    if done < updates:
        problems.append(f"only {done} of {updates} updates")
    bad = [line for line in lines if re.search(r'"(-?inf|nan)"', line, re.I)] + other_overflow
    if bad:
        problems.append(f"{len(bad)} NaN/inf/overflow lines, first: {bad[0][:200]}")
    if overflows and precision != "fp16":  # no loss scaler: an overflow is a real one
        problems.append(f"{overflows} gradient overflows in {precision}")
    elif late_overflows or overflows > updates // 10:
        problems.append(f"the loss scale did not settle: {overflows} gradient overflows, "
                        f"{late_overflows} in the second half of the run")
    scales = [float(r["loss_scale"]) for r in train if "loss_scale" in r]
    if any(s <= MIN_LOSS_SCALE for s in scales) or any("Minimum loss scale" in x for x in lines):
        problems.append(f"the loss scale reached fairseq's minimum ({MIN_LOSS_SCALE})")
    # fairseq logs its config (a dict's repr) as it starts: the override reached the trainer.
    flag = {"bf16": "'bf16': True", "fp16": "'memory_efficient_fp16': True"}.get(precision)
    if flag and not any(flag in line for line in lines):
        problems.append(f"fairseq's config does not say {flag}: not trained in {precision}")
    if require_cuda and not any("CUDA enviroments" in line for line in lines):
        problems.append("fairseq trained without CUDA (no 'CUDA enviroments' banner in the log)")
    steady = inner[1:] or inner
    wps = [float(r["wps"]) for r in steady]
    ups = [float(r["ups"]) for r in steady if float(r.get("ups", 0)) > 0]
    tflops = [float(r["pflops"]) * float(r["ups"]) * 1e3 for r in steady
              if "pflops" in r and float(r.get("ups", 0)) > 0]
    row = [arch, precision, done,
           inner[0]["loss"] if inner else "-", inner[-1]["loss"] if inner else "-",
           valid[-1]["valid_loss"] if valid else "-",
           f"{statistics.median(wps):.0f}" if wps else "-",
           f"{1 / statistics.median(ups):.3f}" if ups else "-",
           f"{statistics.median(tflops):.1f}" if tflops else "-",
           f"{statistics.median(tflops) / peak_tflops:.1%}" if tflops else "-", overflows,
           "ok" if not problems else "FAIL: " + "; ".join(problems)]
    return TrainCheck([str(value) for value in row], problems)


# ------------------------------------------------------------------- the tests' skip check

def check_junit_skips(junit: Path, listing: Path, require_cuda: bool) -> bool:
    """List the skipped tests of pytest's junit XML in `listing` (name TAB reason) and print
    those skipped for want of a GPU, a CUDA kernel or nvcc (NO_GPU_SKIPS): such skips mean the
    CUDA paths did not run; and the test modules skipped whole for a reason outside
    ACCEPTED_MODULE_SKIPS (modules_skipped_whole). Returns False (a failed stage) when there are
    any and CUDA is required, or when the XML is missing or unreadable."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"error: no junit XML to check ({junit}): {error}", file=sys.stderr)
        return False
    skipped, cases = [], []
    for case in root.iter("testcase"):
        reasons = [skip.get("message", "") for skip in case.findall("skipped")]
        cases.append((case.get("classname"), reasons))
        for reason in reasons:
            skipped.append((f"{case.get('classname')}::{case.get('name')}", reason))
    with open(listing, "w") as f:
        f.writelines(f"{name}\t{reason}\n" for name, reason in skipped)
    print(f"{len(skipped)} skipped (list: {listing})")
    missing = [s for s in skipped if no_gpu_skip(s[1])]
    for name, reason in missing:
        print(f"  skipped without the GPU path: {name}: {reason}")
    whole = modules_skipped_whole(cases)
    for module, reasons in whole.items():
        print(f"  every test of {module} skipped, for a reason not in ACCEPTED_MODULE_SKIPS: "
              f"{'; '.join(reasons)}")
    ok = True
    if missing and require_cuda:
        print(f"{len(missing)} CUDA test(s) skipped on the GPU machine", file=sys.stderr)
        ok = False
    if whole and require_cuda:
        print(f"{len(whole)} CUDA test module(s) skipped whole on the GPU machine: "
              f"{' '.join(whole)}", file=sys.stderr)
        ok = False
    return ok


def train_losses(text: str) -> Dict[int, float]:
    """update -> training loss, from the json train_inner records of a fairseq log."""
    losses = {}
    for line in text.splitlines():
        record = None if line.startswith("+ ") else json_record(line)
        if record is not None and "loss" in record and "num_updates" in record:
            losses[int(float(record["num_updates"]))] = float(record["loss"])
    return losses


def compare_losses(reference: Mapping[int, float], other: Mapping[int, float],
                   tolerance: float) -> Tuple[str, List[str]]:
    """Compare two runs' per-update losses: a one-line summary (updates compared, the largest
    and the mean absolute difference, and where the largest is) and the problems (an update
    logged by one run only, a difference above `tolerance`, nothing to compare)."""
    problems = []
    only = sorted(set(reference) ^ set(other))
    if only:
        problems.append(f"updates logged by one run only: {only[:10]}")
    common = sorted(set(reference) & set(other))
    if not common:
        return "no update logged by both runs", problems + ["no losses to compare"]
    gaps = {u: abs(reference[u] - other[u]) for u in common}
    worst = max(common, key=gaps.get)
    line = (f"{len(common)} updates compared: max |loss difference| {gaps[worst]:.4f} at update "
            f"{worst} ({reference[worst]:.4f} against {other[worst]:.4f}), mean "
            f"{statistics.fmean(gaps.values()):.4f}; last update {common[-1]}: "
            f"{reference[common[-1]]:.4f} against {other[common[-1]]:.4f}")
    if not all(math.isfinite(g) for g in gaps.values()) or gaps[worst] > tolerance:
        problems.append(f"the losses differ by more than FSDP_LOSS_TOL={tolerance:g}")
    return line, problems


"""What the benchmarks (:mod:`~fairseq_ext_lab.benchmarks.three_ml`,
:mod:`~fairseq_ext_lab.benchmarks.swishrnn`) share: interleaved timing rounds, medians and
quartiles, the machine's description and load. (Synthetic masked-LM batches are in
:mod:`fairseq_ext.training.model_building`.)

Timings are taken in interleaved rounds (A, B, A, B, ...) so that drift on a shared machine
hits every contestant alike; the first ``warmup`` rounds are dropped and the median reported.
"""
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, Hashable, List, Optional

import torch

from fairseq_ext_lab.reporting.figures import cpu_model


def load_average() -> Optional[List[float]]:
    """The host's 1/5/15-minute load averages (other jobs on a shared machine add noise)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def quartiles(samples):
    """(p25, median, p75) of the samples."""
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    p25, p50, p75 = statistics.quantiles(samples, n=4, method="inclusive")
    return p25, p50, p75


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function: Callable[[], object], device: torch.device = torch.device("cpu")) -> float:
    """Wall-clock seconds of one call of ``function``, device work included."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def interleaved_rounds(calls: Dict[Hashable, Callable[[], float]], warmup: int, rounds: int,
                       progress: bool = False) -> Dict[Hashable, List[float]]:
    """``warmup + rounds`` rounds; each round calls every entry of ``calls`` once, in order
    (each call returns the seconds it measured). Returns the timed rounds' seconds per key.
    ``progress``: a line on stderr per round, and per call in the first (where compiles and
    caches are paid: a run cut off at its time limit still says where the time went)."""
    times: Dict[Hashable, List[float]] = {key: [] for key in calls}
    for round_index in range(warmup + rounds):
        started = time.perf_counter()
        for key, call in calls.items():
            seconds = call()
            if round_index >= warmup:
                times[key].append(seconds)
            if progress and round_index == 0:
                print(f"round 1, {key}: {seconds:.1f} s", file=sys.stderr, flush=True)
        if progress:
            kind = "warm-up" if round_index < warmup else "timed"
            print(f"round {round_index + 1}/{warmup + rounds} ({kind}): "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return times


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def environment(device: torch.device) -> dict:
    """What a benchmark figure needs beside it: device, versions, threads, load."""
    import fairseq

    return {"device": device_name(device), "device_type": device.type,
            "torch": torch.__version__, "fairseq": fairseq.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average": load_average()}


def move_to(sample, device: torch.device):
    """A (nested dict of) tensor(s) on ``device``."""
    if torch.is_tensor(sample):
        return sample.to(device)
    if isinstance(sample, dict):
        return {k: move_to(v, device) for k, v in sample.items()}
    return sample

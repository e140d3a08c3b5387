"""Count the ops a training step dispatches and the device-to-host reads it makes, on the CPU.

On a GPU, the host queues kernels and runs ahead of the device, so a step costs
``max(host, device)``, until the host needs a value that only the device has: ``.item()``,
``bool(tensor)``, ``.tolist()``, ``nonzero``, boolean-mask indexing (whose output size is the
mask's count), ``masked_select``, ``unique``... Each such read makes the host wait for
everything queued before it, and the device then idles while the host catches up (a "host
sync"; ``torch.cuda.set_sync_debug_mode("warn")`` reports them on a GPU). The same code run on
the CPU makes the same calls, so they can be counted here, without a GPU:

* :class:`DeviceReadCounter` is a ``TorchDispatchMode`` (every aten op that reaches a kernel:
  forward, backward and optimizer alike, counted as *ops dispatched*) and a
  ``TorchFunctionMode`` (the ``Tensor`` methods that read data without an aten op on the CPU:
  ``tolist``, ``numpy``, ``cpu``, ``to("cpu")``). A read is one of :data:`READ_OPS`, a boolean
  (or byte) tensor used as an index (:data:`MASK_INDEX_OPS`), or one of
  :data:`READ_METHODS`. ``nonzero_static`` is not a read: its output size is given.
* Each read is attributed to **where it comes from** (:func:`attribute`), read off the Python
  stack at the call: our model, our criterion, fairseq's model, fairseq's criterion, fairseq's
  trainer (optimizer, gradient clipping, logging)... A read inside one of fairseq's modules
  that *our* model calls (3ML's prediction head is fairseq's ``RobertaLMHead``) is our
  model's: what counts is whose code chose to make it.

What it cannot see: a read that happens in C++ without an aten op (none in PyTorch's Python
API once the methods above are counted) and the D2H copies a CUDA-only code path would make
(``if tensor.is_cuda``), which this CPU run does not take. fairseq's ``masked_lm`` criterion
has such a branch: on the CPU it calls ``masked_tokens.any()`` (one read), on CUDA a
``torch.where`` (none); both are reported as what they are on the CPU.
"""
import collections
import contextlib
import dataclasses
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops that return a value the host must read before it can go on (a scalar, or an
#: output whose size depends on the data).
READ_OPS = frozenset({
    "aten::_local_scalar_dense",  # .item(), bool(t), int(t), float(t), `if t:`
    "aten::nonzero", "aten::masked_select", "aten::argwhere",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::equal",  # returns a Python bool
    "aten::allclose",
})
#: aten ops that read back only without an ``output_size`` (the size they would otherwise sum).
READ_WITHOUT_OUTPUT_SIZE = frozenset({"aten::repeat_interleave"})
#: aten ops that read their indices' count when an index is a boolean (or byte) mask:
#: ``x[mask]``, ``x[mask] = v``.
MASK_INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_",
                            "aten::_index_put_impl", "aten::_index_put_impl_"})
#: ``Tensor`` methods that copy data to the host (a D2H copy on a GPU), seen before dispatch.
READ_METHODS = frozenset({"tolist", "numpy", "__array__", "cpu"})

#: Where a read comes from: (package, its first level: subpackage or module file) of the
#: (package, folder or top-level file) or (package, folder, file) -> (owner, part), or ``None``
#: for a file that is no source (it drives fairseq's update from outside, as a benchmark does);
#: a file's own entry wins over its folder's; files not listed are skipped. ``None`` parts are
#: neutral (helpers anyone calls, such as ``fairseq.utils.item``): the frame that called them
#: decides.
SOURCES: Dict[Tuple[str, ...], Optional[Tuple[str, Optional[str]]]] = {
    ("fairseq_ext", "models"): ("ours", "model"),
    ("fairseq_ext", "modules"): ("ours", "model"),
    ("fairseq_ext", "ops"): ("ours", "model"),
    ("fairseq_ext", "criterions"): ("ours", "criterion"),
    ("fairseq_ext", "flops"): ("ours", "criterion"),
    ("fairseq_ext", "tasks"): ("ours", "task"),
    ("fairseq_ext", "data"): ("ours", "task"),
    ("fairseq_ext", "optim"): ("ours", "trainer"),
    ("fairseq_ext", "training"): ("ours", "trainer"),
    # TrainerStep lives with the run plumbing but is the harness, not the trainer
    ("fairseq_ext", "training", "trainer_harness.py"): None,
    ("fairseq", "models"): ("fairseq", "model"),
    ("fairseq", "modules"): ("fairseq", "model"),
    ("fairseq", "criterions"): ("fairseq", "criterion"),
    ("fairseq", "tasks"): ("fairseq", "task"),
    ("fairseq", "data"): ("fairseq", "task"),
    ("fairseq", "trainer.py"): ("fairseq", "trainer"),
    ("fairseq", "optim"): ("fairseq", "trainer"),
    ("fairseq", "distributed"): ("fairseq", "trainer"),
    ("fairseq", "logging"): ("fairseq", "trainer"),
    ("fairseq", "nan_detector.py"): ("fairseq", "trainer"),
    ("fairseq", "utils.py"): ("fairseq", None),
}
OWNER_NAMES = {"ours": "our", "fairseq": "fairseq's"}


def _package_parts(filename: str) -> Optional[Tuple[str, ...]]:
    """``.../fairseq_ext/models/three_ml.py`` -> ``("fairseq_ext", "models")``, the package and
    its first level below (the innermost directory named ``fairseq`` or ``fairseq_ext``);
    ``None`` outside both packages."""
    parts = filename.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in ("fairseq_ext", "fairseq"):
            return parts[i], parts[i + 1]
    return None


def classify(filename: str) -> Optional[Tuple[str, Optional[str]]]:
    """``(owner, part)`` of a source file (:data:`SOURCES`), or ``None`` for files outside
    fairseq and fairseq-ext or not listed there."""
    parts = _package_parts(filename)
    if parts is None:
        return None
    own = parts + (os.path.basename(filename),)
    return SOURCES[own] if own in SOURCES else SOURCES.get(parts)


Frames = List[Tuple[str, int]]  # (filename, line), innermost first


def stack_frames(frame) -> Frames:
    """The Python stack from ``frame`` outwards."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return frames


_TRACEBACK_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def forward_frames(node) -> Optional[Frames]:
    """The forward stack that created the autograd ``node`` running now (recorded by anomaly
    mode as ``traceback_``), innermost first; ``None`` without it."""
    lines = node.metadata.get("traceback_") if node is not None else None
    if not lines:
        return None
    found = [(m.group(1), int(m.group(2))) for line in lines
             for m in [_TRACEBACK_LINE.search(line)] if m]
    return found[::-1]


def attribute(frames: Frames) -> str:
    """Where a read made at ``frames`` comes from, such as ``"our model"`` or ``"fairseq's
    criterion"``.

    The innermost frame of fairseq or fairseq-ext code names the part (model, criterion,
    task, trainer); going outwards through the frames of that same part, the outermost one
    names the owner. So a read inside fairseq's ``RobertaLMHead`` called by our 3ML model is
    "our model", and one inside fairseq's ``RobertaModel`` called by our criterion is
    "fairseq's model". Neutral helpers (``fairseq.utils``) are skipped."""
    part = owner = None
    for filename, _ in frames:
        found = classify(filename)
        if found is None or found[1] is None:
            continue
        if part is None:
            part, owner = found[1], found[0]
        elif found[1] == part:
            owner = found[0]
        else:
            break
    if part is None:
        return "other"
    return f"{OWNER_NAMES[owner]} {part}"


def call_site(frames: Frames) -> str:
    """``package/file.py:line`` of the innermost frame of fairseq or fairseq-ext code."""
    for filename, line in frames:
        filename = filename.replace(os.sep, "/")
        if classify(filename) is not None:
            package = "/fairseq_ext/" if "/fairseq_ext/" in filename else "/fairseq/"
            return f"{package[1:]}{filename.rsplit(package, 1)[1]}:{line}"
    return "?"


def _is_mask(index) -> bool:
    return torch.is_tensor(index) and index.dtype in (torch.bool, torch.uint8)


def is_read(op_name: str, args, kwargs=None) -> bool:
    """Whether the aten op ``op_name`` (``"aten::index"``) called with ``args`` and
    ``kwargs`` reads data back to the host."""
    if op_name in READ_OPS:
        return True
    if op_name in READ_WITHOUT_OUTPUT_SIZE:
        return (kwargs or {}).get("output_size") is None
    if op_name in MASK_INDEX_OPS and len(args) > 1:
        indices = args[1]
        return isinstance(indices, (list, tuple)) and any(_is_mask(i) for i in indices)
    return False


@dataclasses.dataclass
class Counts:
    """What :class:`DeviceReadCounter` saw over ``steps`` steps."""

    ops: int = 0
    reads: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # (source, what) -> count, what being the op or method, e.g. "aten::nonzero"
    read_sites: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    steps: int = 1

    @property
    def total_reads(self) -> int:
        return sum(self.reads.values())

    def per_step(self) -> dict:
        """Ops and reads per step, the reads by source."""
        steps = max(self.steps, 1)
        return {"ops": self.ops / steps, "reads": self.total_reads / steps,
                "reads_by_source": {k: v / steps for k, v in sorted(self.reads.items())}}

    def reads_from(self, prefix: str) -> int:
        """Reads whose source starts with ``prefix`` (``"our"``, ``"fairseq's criterion"``)."""
        return sum(v for k, v in self.reads.items() if k.startswith(prefix))


class _ReadMethods(TorchFunctionMode):
    def __init__(self, record: Callable[[str], None]):
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READ_METHODS or (name == "to" and _to_host(args, kwargs)):
            self.record(f"Tensor.{name}")
        return func(*args, **kwargs)


def _to_host(args, kwargs) -> bool:
    """``tensor.to("cpu")``: the code names the host (on a GPU: a D2H copy). A ``torch.device``
    is not counted: on the CPU, ``x.to(other.device)`` names the CPU too, and on a GPU it is a
    copy between device tensors."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str) and target.startswith("cpu")


class _DispatchedOps(TorchDispatchMode):
    def __init__(self, on_op: Callable[[str, tuple, dict], None]):
        super().__init__()
        self.on_op = on_op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.on_op(func._schema.name, args, kwargs)
        return func(*args, **kwargs)


class DeviceReadCounter:
    """Context manager counting ops dispatched and device-to-host reads (see module docs).

    ::

        with DeviceReadCounter() as counter:
            trainer.train_step([sample])
        counter.counts.per_step()   # {"ops": ..., "reads": ..., "reads_by_source": {...}}

    ``counter.step()`` marks the end of a step (for per-step averages over several).
    """

    def __init__(self):
        self.counts = Counts(steps=0)
        self._function_mode = _ReadMethods(self._record_read)
        self._dispatch_mode = _DispatchedOps(self._on_op)

    def _record_read(self, what: str) -> None:
        frames = forward_frames(torch._C._current_autograd_node())
        if frames is not None:  # in the backward pass: where its forward op was called
            what += " (backward)"
        else:
            frames = stack_frames(sys._getframe(1))
        source = attribute(frames)
        self.counts.reads[source] += 1
        self.counts.read_sites[source, f"{what} at {call_site(frames)}"] += 1

    def _on_op(self, name: str, args, kwargs) -> None:
        self.counts.ops += 1
        if is_read(name, args, kwargs):
            self._record_read(name)

    def step(self) -> None:
        self.counts.steps += 1

    def __enter__(self) -> "DeviceReadCounter":
        self._function_mode.__enter__()
        self._dispatch_mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._dispatch_mode.__exit__(*exc)
        self._function_mode.__exit__(*exc)


@contextlib.contextmanager
def sized_as_on_cuda(module: torch.nn.Module):
    """Run ``module``'s size choices as on CUDA: each submodule that offers a
    ``sized_as_on_cuda()`` context (3ML's model: ``--static-sizes auto`` becomes static, as it
    is there and under torch.compile) is entered, so that the reads counted on the CPU are the
    GPU's; each restores itself on exit."""
    with contextlib.ExitStack() as stack:
        for m in module.modules():
            if callable(getattr(m, "sized_as_on_cuda", None)):
                stack.enter_context(m.sized_as_on_cuda())
        yield


def count_step(step: Callable[[], object], steps: int = 1) -> Counts:
    """Counts of ``steps`` calls of ``step`` (each call one step), in anomaly mode, so that a
    read in the backward pass is attributed to the forward code that made its op.

    A compiled model runs its eager code while counting (``torch.compiler.set_stance
    ("force_eager")``): nothing is compiled under the counter's modes, and the compiled
    graphs of the timed updates are left as they were. Its fused kernels are no ops, and
    what it reads is what its eager code reads (a compiled graph keeps the reads that set
    a size: ``nonzero``, boolean indexing)."""
    stance = (torch.compiler.set_stance("force_eager")
              if hasattr(torch.compiler, "set_stance") else contextlib.nullcontext())
    with stance, torch.autograd.set_detect_anomaly(True, check_nan=False), \
            DeviceReadCounter() as counter:
        for _ in range(steps):
            step()
            counter.step()
    return counter.counts


def format_sites(counts: Counts) -> str:
    """``source: what xN, ...`` per source, per step."""
    by_source = collections.defaultdict(list)
    steps = max(counts.steps, 1)
    for (source, what), n in sorted(counts.read_sites.items()):
        by_source[source].append(f"{what} x{n / steps:g}")
    return "; ".join(f"{source}: {', '.join(sites)}" for source, sites in by_source.items())

"""Whole rows: a replica's share of the batch computes, bit for bit, what the whole batch computes.

A CPU's kernels choose how to compute from the shape they are given, not only from the values: a
matrix product blocks its rows by their count, and an elementwise op runs vector code over most of a
tensor and scalar code over its tail. A replica that steps 2 of 32 environments therefore rounds its
rows' logits, sigmoids and values differently in the last bit from plain Python, which computed them
among 32 rows; a chaotic loop turns that bit into another trajectory within 20 iterations.

:func:`whole_rows` closes that gap where it opens. On its thread, each torch op that computes row by
row and may round by the shape (matrix products, convolutions, softmax, layer norm, reductions over
the inner dimensions, and elementwise functions that are not exact in IEEE arithmetic: ``tanh``,
``sigmoid``, ``exp``, ``gelu``, ...) and is handed the share's rows runs on the whole batch's shape
instead: the share tiled ``total // count`` times, so that its rows sit where plain Python's tensor had
them, and the result is the share's block of the answer. The op then runs the very kernel, on the very
positions, that plain Python's did; since each row of a row-wise op comes from that row alone, what the
other blocks hold does not matter, and tiling never changes what the op means. Ops that are exact
whatever the shape (indexing, copies, ``+ - * /``, comparisons, integers) run as they are.

What it cannot reach (an in-place op, a Python function torch does not see into, a batch axis other
than the first, a tensor larger than :data:`LARGEST`) the safety net still sees: it compares a run's
first iterations with plain Python's bit for bit and labels a run that differs by rounding before it
starts (:mod:`fragnb.runtime.check`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["whole_rows", "WholeRows", "LARGEST"]

#: The largest tensor (in elements, once tiled) an op is widened to; a larger one runs on the share's
#: shape (tiling it would cost more memory than it is worth; the safety net still compares).
LARGEST = 1 << 24

#: Elementwise functions whose last bit may depend on where an element sits (vector body or scalar
#: tail) or on the kernel's fused multiply-adds: widened. The others (``add``, ``mul``, ``div``,
#: ``sqrt``, comparisons, ``where``, ``clamp``, ``relu``) round exactly as IEEE says, anywhere.
POINTWISE = frozenset(
    "tanh sigmoid exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan atan2 arctan2 sinh cosh asinh "
    "acosh atanh erf erfc erfinv pow float_power silu gelu elu selu celu softplus mish log_sigmoid logsigmoid "
    "hardswish hardsigmoid rsqrt reciprocal lgamma digamma xlogy logit sinc addcmul addcdiv lerp hypot fmod "
    "remainder tanhshrink glu logaddexp logaddexp2 i0 polygamma".split()
)

#: Row-wise functions that are not elementwise: for each, the argument position of the dimension(s)
#: they reduce or normalise over (None: they never reduce over the rows).
ROWWISE: dict[str, int | None] = {
    "linear": None,
    "matmul": None,
    "mm": None,
    "bmm": None,
    "addmm": None,
    "baddbmm": None,
    "conv1d": None,
    "conv2d": None,
    "conv3d": None,
    "conv_transpose1d": None,
    "conv_transpose2d": None,
    "conv_transpose3d": None,
    "layer_norm": None,
    "rms_norm": None,
    "softmax": 1,
    "log_softmax": 1,
    "sum": 1,
    "mean": 1,
    "amax": 1,
    "amin": 1,
    "max": 1,
    "min": 1,
    "logsumexp": 1,
    "prod": 1,
    "cumsum": 1,
    "cumprod": 1,
    "var": 1,
    "std": 1,
    "var_mean": 1,
    "std_mean": 1,
    "norm": 2,
    "normalize": 2,
}

_DATA = ("input", "self")  # the keyword a row-wise function's rows may come by
_KINDS: dict = {}  # a function's kind, by the function: "pointwise", "rowwise" or None


def _kind(func) -> str | None:
    kind = _KINDS.get(func, False)
    if kind is False:
        name = getattr(func, "__name__", "")
        if name.startswith("__") and name.endswith("__"):  # x ** 2, 2 ** x
            name = name.strip("_")
            name = name[1:] if name.startswith("r") and name[1:] in POINTWISE else name
        kind = "pointwise" if name in POINTWISE else "rowwise" if name in ROWWISE else None
        _KINDS[func] = kind = (kind, name)
    return kind


class WholeRows(TorchFunctionMode):
    """The torch function mode :func:`whole_rows` enters: ``block`` is the share's index among ``blocks``
    equal shares of the whole batch."""

    def __init__(self, block: int, blocks: int):
        super().__init__()
        self.block, self.blocks = block, blocks

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind, name = _kind(func)
        if kind is None:
            return func(*args, **kwargs)
        tiled = self._tiled(kind, name, args, kwargs)
        if tiled is None:
            return func(*args, **kwargs)
        targs, tkwargs, rows = tiled
        first = self.block * rows
        return _block(func(*targs, **tkwargs), first, rows, rows * self.blocks)

    def _tiled(self, kind: str, name: str, args: tuple, kwargs: dict):
        """The arguments on the whole batch's shape and the share's rows, or None to run the op as it is."""
        slots = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        slots += [(k, a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
        if not slots:
            return None
        if kind == "pointwise":
            rank = max(a.dim() for _, a in slots)
            full = [(k, a) for k, a in slots if a.dim() == rank]
            rows = max(a.shape[0] for _, a in full) if rank else 0
            if rows == 0 or any(a.shape[0] not in (1, rows) for _, a in full):
                return None
            picked = [k for k, a in full if a.shape[0] == rows]
        else:
            key, data = next(((k, a) for k, a in slots if k in (0, *_DATA)), (None, None))
            if data is None or data.dim() < 2 or not _over_inner(name, args, kwargs, data):
                return None
            rows, picked = data.shape[0], [key]
            if name in ("matmul", "bmm", "baddbmm", "addmm"):  # operands that carry the same rows
                rest = [(k, a) for k, a in slots if k != key and a.dim() >= 2 and a.shape[0] == rows]
                if name in ("matmul", "bmm", "baddbmm"):
                    rest = [(k, a) for k, a in rest if a.dim() == data.dim() and a.dim() >= 3]
                picked += [k for k, _ in rest]
        values = dict(slots)
        if not any(values[k].is_floating_point() for k in picked) or values[picked[0]].numel() * self.blocks > LARGEST:
            return None  # integers come out the same from any kernel
        targs, tkwargs = list(args), dict(kwargs)
        for k in picked:
            wide = torch.cat([values[k]] * self.blocks)
            if isinstance(k, int):
                targs[k] = wide
            else:
                tkwargs[k] = wide
        return targs, tkwargs, rows


def _over_inner(name: str, args: tuple, kwargs: dict, data: torch.Tensor) -> bool:
    """Whether a row-wise function reduces or normalises over dimensions other than the rows' (0)."""
    if name in ("layer_norm", "rms_norm"):
        shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape", ())
        return data.dim() > len(shape)
    at = ROWWISE[name]
    if at is None:
        return True
    dims = args[at] if len(args) > at else kwargs.get("dim")
    if dims is None or isinstance(dims, torch.Tensor):
        return False  # over every dimension, the rows' too (or `max(a, b)`: elementwise, and exact)
    dims = [dims] if isinstance(dims, int) else list(dims)
    return bool(dims) and all(isinstance(d, int) and d % data.dim() != 0 for d in dims)


def _block(out, first: int, rows: int, whole: int):
    """The share's rows of what an op computed on the whole batch's shape (each output that has them)."""
    if isinstance(out, torch.Tensor):
        return out[first : first + rows] if out.dim() >= 1 and out.shape[0] == whole else out
    if isinstance(out, tuple):
        parts = [_block(o, first, rows, whole) for o in out]
        return tuple(parts) if type(out) is tuple else type(out)(parts)  # max(x, dim) answers a named tuple
    return out


@contextlib.contextmanager
def whole_rows(first: int, count: int, total: int) -> Iterator[None]:
    """On this thread, torch ops on a share of ``count`` rows (environments ``first .. first + count - 1``
    of ``total``) compute what they compute among the whole batch's rows.

    Parameters
    ----------
    first, count, total : int
        The first environment this replica steps, how many it steps, and the whole batch's size
        (``count`` divides ``total`` and ``first``). Nothing changes where ``count == total``.

    Examples
    --------
    The outputs for environments 2 and 3 of 4, computed by a replica that holds only those two, are the
    bits plain Python computes for them among all four:

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.SiLU(), torch.nn.Linear(64, 2))
    >>> obs = torch.randn(4, 3)
    >>> whole = net(obs)
    >>> with whole_rows(2, 2, 4):
    ...     mine = net(obs[2:])
    >>> torch.equal(mine, whole[2:])
    True
    """
    if count <= 0 or count >= total or total % count or first % count:
        yield
        return
    with WholeRows(first // count, total // count):
        yield

"""Whole rows: a replica's share of the batch computes, bit for bit, what the whole batch computes.

A CPU's kernels choose how to compute from the shape they are given, not only from the values: a
matrix product blocks its rows by their count, and an elementwise function runs vector code over most
of a tensor and scalar code over its tail. A replica that steps 2 of 32 environments therefore rounds
its rows' logits, sigmoids and values differently in the last bit from plain Python, which computed
them among 32 rows; a chaotic loop turns that bit into another trajectory within 20 iterations.

:func:`whole_rows` closes that gap where it opens. On its thread, each torch function that computes
row by row and may round by the shape (matrix products, convolutions, softmax, layer norm, reductions
over the inner dimensions, and elementwise functions that IEEE arithmetic does not round exactly:
``tanh``, ``sigmoid``, ``exp``, ``gelu``, ...) and is handed the share's rows runs on the whole batch's
shape instead: the share tiled ``total // count`` times, so that its rows sit where plain Python's
tensor had them, and the answer is the share's block of the result. The function then runs the very
kernel, on the very positions, that plain Python's did; since each row of a row-wise function comes
from that row alone, what the other blocks hold does not matter, and tiling never changes what the
function means. What is exact whatever the shape (indexing, copies, ``+ - * /``, ``sqrt``, comparisons,
integers) runs as it is, at no cost.

Those functions are wrapped where modules and loops look them up (``torch.tanh``, ``Tensor.exp``,
``torch.nn.functional.linear``, ``x @ w``, ...) while some thread computes a share, and the wrappers
act only on such a thread: a per-op hook (a torch function mode) cost a replica of notebook 01 twice
its step time, since every op paid for it, the exact ones too (``benchmarks/exactness.py``).

What it cannot reach (an in-place function, a function a module kept a reference to before, a batch
axis other than the first, a tensor larger than :data:`LARGEST`) the safety net still sees: it
compares a run's first iterations with plain Python's bit for bit and says before the run starts that
it reproduces plain Python within rounding (:mod:`fragnb.runtime.check`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Iterator

import torch
import torch.nn.functional as F

__all__ = ["whole_rows", "LARGEST", "POINTWISE", "ROWWISE"]

#: The largest tensor (in elements, once tiled) a function is widened to; a larger one runs on the
#: share's shape (tiling it would cost more memory than it is worth; the safety net still compares).
LARGEST = 1 << 24

#: Elementwise functions whose last bit may depend on where an element sits (vector body or scalar
#: tail) or on fused multiply-adds in the vector code: widened. The others (``add``, ``mul``, ``div``,
#: ``sqrt``, comparisons, ``where``, ``clamp``, ``relu``) IEEE arithmetic rounds alike anywhere.
POINTWISE = frozenset(
    "tanh sigmoid exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan atan2 arctan2 sinh cosh asinh "
    "acosh atanh erf erfc erfinv pow float_power silu gelu elu selu celu softplus mish logsigmoid hardswish "
    "hardsigmoid rsqrt reciprocal lgamma digamma xlogy logit sinc addcmul addcdiv lerp hypot fmod remainder "
    "tanhshrink logaddexp logaddexp2 __pow__ __rpow__".split()
)

#: Row-wise functions that are not elementwise, with the argument position of the dimension(s) they
#: reduce or normalise over (None: never the rows').
ROWWISE: dict[str, int | None] = {
    **dict.fromkeys(
        "linear matmul mm bmm addmm baddbmm conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d "
        "layer_norm rms_norm __matmul__".split()
    ),
    **dict.fromkeys(
        "softmax log_softmax sum mean amax amin max min logsumexp prod cumsum cumprod var std var_mean std_mean".split(),
        1,
    ),
    "norm": 2,
    "normalize": 2,
}

_BATCHED = ("matmul", "bmm", "baddbmm", "__matmul__")  # both operands may carry the rows
#: Convolutions widen a batched input only (an unbatched one's first dimension is its channels).
_CONV_RANK = {f"conv{k}{d}d": d + 2 for d in (1, 2, 3) for k in ("", "_transpose")}
_OWNERS = (torch, torch.Tensor, F)
_SHARE = threading.local()  # .blocks: (the share's index, how many shares), on a thread that computes one
_LOCK = threading.Lock()
_INSTALLED: dict[tuple[object, str], object] = {}  # (owner, name) -> the function the wrapper replaced
_USERS = 0


def _tiled(name: str, args: tuple, kwargs: dict, blocks: int):
    """The arguments on the whole batch's shape and the share's rows, or None to run as they are."""
    if name == "addmm":  # (bias, rows, weight): the rows are the second operand's
        return _operands(args, kwargs, blocks, (1, "mat1"), lambda k, a: k in (0, "input") and a.dim() == 2)
    data = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if not isinstance(data, torch.Tensor):
        return _operands(args, kwargs, blocks, None, None) if name in POINTWISE else None
    if not data.is_floating_point() or data.numel() * blocks > LARGEST:
        return None  # integers come out the same from any kernel
    if name in POINTWISE:
        if data.dim() < 1:
            return _operands(args, kwargs, blocks, None, None)
        if any(isinstance(a, torch.Tensor) for a in args[1:]) or any(
            isinstance(a, torch.Tensor) for a in kwargs.values()
        ):
            return _operands(args, kwargs, blocks, None, None)  # x * y, lerp(a, b, w): every operand with the rows
    elif data.dim() < 2 or not _over_inner(name, args, kwargs, data) or _CONV_RANK.get(name, data.dim()) != data.dim():
        return None
    elif name in _BATCHED and any(
        isinstance(a, torch.Tensor) and a.dim() > data.dim() for a in (*args[1:], *kwargs.values())
    ):
        return None  # matrix @ batch of matrices: the answer's first dimension is the other operand's
    elif name in _BATCHED and data.dim() >= 3:
        rows, rank = data.shape[0], data.dim()
        return _operands(
            args, kwargs, blocks, (0, "input", "self"), lambda k, a: a.dim() == rank and a.shape[0] == rows
        )
    wide = torch.cat([data] * blocks)
    if args:
        return (wide, *args[1:]), kwargs, data.shape[0]
    return args, {**kwargs, ("input" if "input" in kwargs else "self"): wide}, data.shape[0]


def _operands(args: tuple, kwargs: dict, blocks: int, first, also):
    """:func:`_tiled` where several operands may carry the rows: those of elementwise functions whose
    first dimension is the rows' (``first`` None), or the operand at ``first`` and those ``also`` picks."""
    slots = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    slots += [(k, a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
    if not slots:
        return None
    if first is None:
        rank = max(a.dim() for _, a in slots)
        full = [(k, a) for k, a in slots if a.dim() == rank]
        rows = max(a.shape[0] for _, a in full) if rank else 0
        if rows == 0 or any(a.shape[0] not in (1, rows) for _, a in full):
            return None
        picked = [(k, a) for k, a in full if a.shape[0] == rows]
    else:
        key, data = next(((k, a) for k, a in slots if k in first), (None, None))
        if data is None or data.dim() < 1:
            return None
        rows = data.shape[0]
        picked = [(key, data)] + [(k, a) for k, a in slots if k != key and also(k, a) and a.shape[0] == rows]
    if not any(a.is_floating_point() for _, a in picked) or picked[0][1].numel() * blocks > LARGEST:
        return None
    targs, tkwargs = list(args), dict(kwargs)
    for k, a in picked:
        if isinstance(k, int):
            targs[k] = torch.cat([a] * blocks)
        else:
            tkwargs[k] = torch.cat([a] * blocks)
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
    """The share's rows of what a function computed on the whole batch's shape (each output that has them)."""
    if isinstance(out, torch.Tensor):
        return out[first : first + rows] if out.dim() >= 1 and out.shape[0] == whole else out
    if isinstance(out, tuple):
        parts = [_block(o, first, rows, whole) for o in out]
        return tuple(parts) if type(out) is tuple else type(out)(parts)  # max(x, dim) answers a named tuple
    return out


def _widened(fn, name: str):
    """``fn``, computing on the whole batch's shape on a thread inside :func:`whole_rows`."""

    @functools.wraps(fn)
    def widened(*args, **kwargs):
        share = getattr(_SHARE, "blocks", None)
        if share is None:
            return fn(*args, **kwargs)
        tiled = _tiled(name, args, kwargs, share[1])
        if tiled is None:
            return fn(*args, **kwargs)
        return _wide(fn, share, *tiled, plain=(args, kwargs))

    return widened


def _wide(fn, share: tuple[int, int], args, kwargs: dict, rows: int, plain: tuple[tuple, dict]):
    """``fn`` on arguments tiled to the whole batch's shape, and the share's block of what it answers;
    ``fn`` on the share's own ``plain`` arguments (args, kwargs) where its answer has no such block (a
    shape this module did not foresee: the share's rows as they are, which the safety net compares)."""
    _SHARE.blocks = None  # what ``fn`` calls in turn sees the whole shape already
    try:
        out = fn(*args, **kwargs)
        if not _has_block(out, rows * share[1]):
            return fn(*plain[0], **plain[1])
    finally:
        _SHARE.blocks = share
    return _block(out, share[0] * rows, rows, rows * share[1])


def _has_block(out, whole: int) -> bool:
    if isinstance(out, torch.Tensor):
        return out.dim() >= 1 and out.shape[0] == whole
    return isinstance(out, tuple) and any(_has_block(o, whole) for o in out)


#: Modules that compute each row of their input from that row alone, whatever their settings (and
#: Dropout, BatchNorm only where they do: not training): a ``Sequential`` of these computes its input
#: on the whole shape at once, tiled once, instead of layer by layer.
_ROWWISE_MODULES = tuple(
    getattr(torch.nn, n)
    for n in (
        "Linear Bilinear Identity Tanh ReLU ReLU6 Sigmoid SiLU GELU ELU SELU CELU LeakyReLU PReLU Softplus Mish "
        "Hardswish Hardsigmoid Hardtanh LogSigmoid Softsign Tanhshrink Conv1d Conv2d Conv3d LayerNorm RMSNorm "
        "Sequential"
    ).split()
    if hasattr(torch.nn, n)
)
_EVAL_ROWWISE = (torch.nn.Dropout, torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)


_CHECKED: weakref.WeakKeyDictionary = (
    weakref.WeakKeyDictionary()
)  # Sequential -> row-wise, where training can't change it


def _rowwise_module(module: torch.nn.Module) -> bool:
    """Whether ``module`` computes each row of its input from that row alone."""
    known = _CHECKED.get(module)
    if known is None:
        known = _CHECKED[module] = _rowwise(module)
    return known if known is not None else _rowwise(module, True)


def _rowwise(module: torch.nn.Module, training: bool = False) -> bool | None:
    """Whether ``module`` is row-wise; None where that depends on its modules' training flags (and
    ``training``: decide it from them as they are now)."""
    modes = any(isinstance(m, _EVAL_ROWWISE) for m in module.modules())
    if modes and not training:
        return None
    for m in module.modules():
        if isinstance(m, _EVAL_ROWWISE):
            if m.training and not (isinstance(m, torch.nn.Dropout) and m.p == 0):
                return False
        elif type(m) not in _ROWWISE_MODULES:
            return False
        elif isinstance(m, torch.nn.Flatten) and m.start_dim % 2 == 0:
            return False
    return True


def _sequential(forward):
    """``Sequential.forward``, computing a row-wise stack on the whole batch's shape, tiled once."""

    @functools.wraps(forward)
    def widened(self, input):
        share = getattr(_SHARE, "blocks", None)
        if (
            share is None
            or not isinstance(input, torch.Tensor)
            or input.dim() < 2
            or not input.is_floating_point()
            or input.numel() * share[1] > LARGEST
            or not _rowwise_module(self)
        ):
            return forward(self, input)
        return _wide(forward, share, (self, torch.cat([input] * share[1])), {}, input.shape[0], ((self, input), {}))

    return widened


def _install() -> None:
    global _USERS
    with _LOCK:
        _USERS += 1
        if _USERS > 1:
            return
        for owner in _OWNERS:
            for name in (*POINTWISE, *ROWWISE):
                fn = getattr(owner, name, None)
                if callable(fn) and not isinstance(fn, type):
                    _INSTALLED[owner, name] = owner.__dict__.get(name)  # None: inherited (TensorBase's method)
                    setattr(owner, name, _widened(fn, name))
        _INSTALLED[torch.nn.Sequential, "forward"] = torch.nn.Sequential.forward
        torch.nn.Sequential.forward = _sequential(torch.nn.Sequential.forward)


def _uninstall() -> None:
    global _USERS
    with _LOCK:
        _USERS -= 1
        if _USERS:
            return
        for (owner, name), fn in _INSTALLED.items():
            if fn is None:
                delattr(owner, name)
            else:
                setattr(owner, name, fn)
        _INSTALLED.clear()


@contextlib.contextmanager
def whole_rows(first: int, count: int, total: int) -> Iterator[None]:
    """On this thread, torch functions handed a share of ``count`` rows (environments ``first .. first +
    count - 1`` of ``total``) compute what they compute among the whole batch's rows.

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
    _install()
    _SHARE.blocks = (first // count, total // count)
    try:
        yield
    finally:
        _SHARE.blocks = None
        _uninstall()

"""A stand-in for the parts of PyTorch flashtile's interface uses, for checking its host path where PyTorch is not
installed (tests/python/test_warm_path.py runs host_calls.py with this folder first on PYTHONPATH and the fake
driver of FakeCuda.c). Tensors are shapes, strides, a dtype, a device and a made-up device address; nothing is
ever read or written through them (the fake driver launches nothing)."""

import contextlib
import math
import types


class dtype:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return f"torch.{self.name}"


float16, bfloat16, float32, int32 = dtype("float16", 2), dtype("bfloat16", 2), dtype("float32", 4), dtype("int32", 4)
float8_e4m3fn = dtype("float8_e4m3fn", 1)  # FP8 KV caches (host/fp8_kvcache_calls.py)


class device:
    def __init__(self, type_: str, index=None):
        if ":" in type_:
            type_, index = type_.split(":")[0], int(type_.split(":")[1])
        self.type, self.index = type_, (0 if index is None and type_ == "cuda" else index)

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")


class Size(tuple):
    pass


_next_address = [1 << 32]


def _allocate(nbytes: int) -> int:
    address = _next_address[0]
    _next_address[0] += (nbytes + 511) // 512 * 512 + 512
    return address


def _packed_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class Tensor:
    def __init__(self, shape, dtype_, device_, strides=None, address=None, requires_grad=False):
        self._shape, self.dtype, self.device = Size(shape), dtype_, device_
        self._strides = tuple(strides) if strides is not None else _packed_strides(shape)
        self._address = address if address is not None else _allocate(self.numel() * dtype_.itemsize)
        self.requires_grad = requires_grad

    shape = property(lambda self: self._shape)
    is_cuda = property(lambda self: self.device.type == "cuda")

    def dim(self):
        return len(self._shape)

    def stride(self):
        return self._strides

    def numel(self):
        return math.prod(self._shape)

    def data_ptr(self):
        return self._address if self.numel() else 0

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def contiguous(self):
        if self._strides == _packed_strides(self._shape):
            return self
        return Tensor(self._shape, self.dtype, self.device)

    def clone(self):
        return Tensor(self._shape, self.dtype, self.device)

    def new_empty(self, shape, dtype=None):
        return Tensor(shape, dtype or self.dtype, self.device)

    def view_at_offset(self, elements: int):
        """This tensor's shape and strides `elements` further in memory (a view at an odd offset)."""
        return Tensor(self._shape, self.dtype, self.device, self._strides, self._address + elements * self.dtype.itemsize)

    def transpose(self, a: int, b: int):
        shape, strides = list(self._shape), list(self._strides)
        shape[a], shape[b], strides[a], strides[b] = shape[b], shape[a], strides[b], strides[a]
        return Tensor(shape, self.dtype, self.device, strides, self._address)

    def __getitem__(self, index):
        if index[0] is Ellipsis and isinstance(index[1], slice):
            shape = self._shape[:-1] + (len(range(*index[1].indices(self._shape[-1]))),)
            return Tensor(shape, self.dtype, self.device, self._strides, self._address)
        raise NotImplementedError("the stand-in supports t[..., :n] only")


def empty(*shape, dtype=None, device=None):
    """torch.empty((2, 3), ...) or torch.empty(2, 3, ...)."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device_ = device if isinstance(device, globals()["device"]) else globals()["device"](device or "cpu")
    return Tensor(shape, dtype or float32, device_)


zeros = empty


def full(shape, value, dtype=None, device=None):
    return empty(shape, dtype=dtype, device=device)


randn = zeros


def empty_like(t):
    return Tensor(t.shape, t.dtype, t.device)


randn_like = empty_like


_grad = [True]


def is_grad_enabled():
    return _grad[0]


@contextlib.contextmanager
def no_grad():
    previous, _grad[0] = _grad[0], False
    try:
        yield
    finally:
        _grad[0] = previous


class _CustomOp:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def register_fake(self, fn):
        return fn

    def register_autograd(self, backward, setup_context=None):
        pass


class _Library(types.SimpleNamespace):
    @staticmethod
    def custom_op(name, mutates_args=(), device_types=None):
        namespace, op = name.split("::")

        def register(fn):
            custom = _CustomOp(fn)
            setattr(ops.__dict__.setdefault(namespace, types.SimpleNamespace()), op, custom)
            return custom

        return register


library = _Library()


class _Context(types.SimpleNamespace):
    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = tensors

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = value


class _Function:
    """torch.autograd.Function's shape: apply runs the subclass's forward with a context that records what it saves
    (no graph: the stand-in has no backward)."""

    @classmethod
    def apply(cls, *args):
        return cls.forward(_Context(), *args)


autograd = types.SimpleNamespace(Function=_Function)
ops = types.SimpleNamespace()
compiler = types.SimpleNamespace(is_compiling=lambda: False)
_current = [0]
_C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0, _cuda_getDevice=lambda: _current[0])


@contextlib.contextmanager
def _device(index):
    previous, _current[0] = _current[0], index
    try:
        yield
    finally:
        _current[0] = previous


cuda = types.SimpleNamespace(device=_device, current_device=lambda: _current[0],
                             current_stream=lambda index=None: types.SimpleNamespace(cuda_stream=0),
                             get_device_name=lambda index=None: "no GPU (stand-in torch, fake driver)",
                             synchronize=lambda: None, is_current_stream_capturing=lambda: False)


def _pad(t, pad):
    return Tensor(t.shape[:-1] + (t.shape[-1] + pad[1],), t.dtype, t.device)


nn = types.SimpleNamespace(functional=types.SimpleNamespace(
    pad=_pad, scaled_dot_product_attention=lambda q, k, v, is_causal=False: empty_like(q)))
__version__ = "stand-in"

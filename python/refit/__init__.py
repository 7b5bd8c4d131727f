"""refit from Python: a binding of include/refit.h (librefit.so) through ctypes.

    import refit
    job = refit.Job("llama-3.2-1b", trainer="fsdp=2", rollout="tp=2",
                    options={"transport": "mpi", "mode": "fused"})
    for info in job.tensors("rollout"):         # names, shapes, dtypes, bytes
        ...
    job.register("rollout", {name: array, ...})  # numpy arrays or torch tensors
    job.transfer()
    job.verify()
    job.record("results.h5")
    job.close()

Under mpirun every process builds the same job; MPI_COMM_WORLD is the default communicator,
an mpi4py communicator may be given instead. Every failure raises refit.RefitError with
refit's one-line message. REFIT_LIB names librefit.so where the linker would not find it.
"""

import atexit
import ctypes
import json
import weakref

from . import _lib as _c
from ._lib import MEMORY_DEVICE, MEMORY_HOST, ROLE_ROLLOUT, ROLE_TRAINER

__all__ = ["RefitError", "Context", "Job", "version", "ROLE_TRAINER", "ROLE_ROLLOUT"]


class RefitError(Exception):
    """A refit call failed: `status` is its refit_status, `name` its text, the message refit's."""

    def __init__(self, status, message):
        self.status = status
        self.name = _c.lib().refit_status_string(status).decode()
        super().__init__(message or self.name)


def version():
    """The loaded library's version text, "0.1.0 (git 0123abcdef01)"."""
    return _c.lib().refit_version_string().decode()


def _role(role):
    if role in ("trainer", ROLE_TRAINER):
        return ROLE_TRAINER
    if role in ("rollout", ROLE_ROLLOUT):
        return ROLE_ROLLOUT
    raise ValueError("role %r: give 'trainer' or 'rollout'" % (role,))


class Context:
    """A library context: starts MPI unless mpi4py (or the caller) did, and finalises what it
    started when closed. Jobs given none share one that lives until the interpreter exits."""

    def __init__(self):
        self._handle = ctypes.c_void_p()
        st = _c.lib().refit_context_create(ctypes.byref(self._handle))
        if st != 0:
            raise RefitError(st, "refit_context_create failed")

    def close(self):
        if self._handle:
            _c.lib().refit_context_destroy(self._handle)
            self._handle = ctypes.c_void_p()


_default = None
_live = weakref.WeakSet()  # jobs not closed yet: closed at exit, before MPI is finalised


def _shutdown():
    for job in list(_live):
        job.close()
    if _default is not None:
        _default.close()


def _default_context():
    """The process's context for jobs given none: MPI can start only once in a process, so it
    lives until the interpreter exits (and then finalises MPI if it started it)."""
    global _default
    if _default is None:
        _default = Context()
        atexit.register(_shutdown)
    return _default


# Array dtypes by name (numpy's dtype.name, torch's str(dtype) without "torch.") and refit's.
_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "uint8": "u8",
    "float8_e4m3fn": "fp8_e4m3fn",
}


def _describe(array, dtype):
    """(address, memory kind, dtype, shape, strides in elements, bytes) of a numpy array, a
    torch tensor, or anything with __array_interface__."""
    if hasattr(array, "data_ptr") and hasattr(array, "element_size"):  # torch
        name = str(array.dtype).replace("torch.", "")
        memory = MEMORY_DEVICE if array.device.type == "cuda" else MEMORY_HOST
        size = array.element_size()
        return (array.data_ptr(), memory, dtype or _DTYPES.get(name, name), tuple(array.shape),
                tuple(array.stride()), array.numel() * size)
    face = array.__array_interface__
    name = getattr(array.dtype, "name", str(array.dtype))
    size = array.dtype.itemsize
    shape = tuple(face["shape"])
    strides = face.get("strides")
    strides = tuple(s // size for s in strides) if strides else None
    return (face["data"][0], MEMORY_HOST, dtype or _DTYPES.get(name, name), shape, strides,
            array.nbytes)


class Job:
    """One transfer between trainer and rollout ranks: include/refit.h's refit_job."""

    def __init__(self, model, trainer, rollout, options=None, comm=None, context=None):
        self._context = context or _default_context()
        self._handle = ctypes.c_void_p()
        self._kept = {}  # registered arrays, alive as long as the job holds their memory
        pairs = []
        for key, value in (options or {}).items():
            pairs += [str(key).encode(), str(value).encode()]
        argv = (ctypes.c_char_p * (len(pairs) + 1))(*pairs, None)
        fcomm = comm.py2f() if comm is not None else _c.lib().refit_comm_world_f()
        st = _c.lib().refit_job_create_f(
            self._context._handle, model.encode(), trainer.encode(), rollout.encode(), argv,
            fcomm, ctypes.byref(self._handle))
        if st != 0:
            raise RefitError(st, _c.lib().refit_context_error(self._context._handle).decode())
        _live.add(self)

    def _check(self, st):
        if st != 0:
            raise RefitError(st, _c.lib().refit_job_error(self._handle).decode())

    def close(self):
        """Collective: every rank closes its job (at exit, those still open are closed)."""
        _live.discard(self)
        if self._handle:
            _c.lib().refit_job_destroy(self._handle)
            self._handle = ctypes.c_void_p()
            self._kept.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def roles(self):
        mask = _c.lib().refit_job_roles(self._handle)
        return [name for name, bit in (("trainer", ROLE_TRAINER), ("rollout", ROLE_ROLLOUT))
                if mask & bit]

    def rank(self, role):
        """This rank's trainer or rollout rank, -1 without that role."""
        return _c.lib().refit_job_rank(self._handle, _role(role))

    @property
    def memory(self):
        return "device" if _c.lib().refit_job_memory(self._handle) == MEMORY_DEVICE else "host"

    @property
    def transport(self):
        return _c.lib().refit_job_transport(self._handle).decode()

    @property
    def plan(self):
        """The plan as `refit plan --json` prints it, as a dict."""
        return json.loads(_c.lib().refit_job_plan_json(self._handle).decode())

    def tensors(self, role):
        """This rank's tensors of `role`: dicts of name, dtype, shape and bytes."""
        out, r = [], _role(role)
        for i in range(_c.lib().refit_tensor_count(self._handle, r)):
            info = _c.TensorInfo()
            self._check(_c.lib().refit_tensor_get(self._handle, r, i, ctypes.byref(info)))
            out.append({"name": info.name.decode(), "dtype": info.dtype.decode(),
                        "shape": tuple(info.shape[d] for d in range(info.ndim)),
                        "bytes": info.bytes})
        return out

    def buffer(self, role, name):
        """(address, bytes) of the memory the engine uses for a tensor: the library's own until
        the tensor is registered (shm and rma write and read it there)."""
        data, size = ctypes.c_void_p(), ctypes.c_int64()
        self._check(_c.lib().refit_tensor_buffer(self._handle, _role(role), name.encode(),
                                                 ctypes.byref(data), ctypes.byref(size)))
        return data.value or 0, size.value

    def register(self, role, arrays, dtype=None):
        """Registers {name: array} of `role` (numpy arrays or torch tensors), all or none.
        `dtype` names refit's dtype where the array's cannot ("bf16" for uint16 arrays)."""
        r = _role(role)
        items = list(arrays.items())
        descs = (_c.Tensor * max(len(items), 1))()
        keep = []
        for k, (name, array) in enumerate(items):
            addr, memory, dt, shape, strides, size = _describe(array, dtype)
            c_shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            c_strides = (ctypes.c_int64 * max(len(shape), 1))(*strides) if strides else None
            keep += [c_shape, c_strides, name.encode(), str(dt).encode()]
            descs[k] = _c.Tensor(keep[-2], r, addr, memory, keep[-1], len(shape),
                                 ctypes.cast(c_shape, ctypes.POINTER(ctypes.c_int64)),
                                 ctypes.cast(c_strides, ctypes.POINTER(ctypes.c_int64))
                                 if c_strides else None, size)
        self._check(_c.lib().refit_register(self._handle, descs, len(items)))
        for name, array in items:
            self._kept[(r, name)] = array

    def transfer(self):
        """Collective: moves one version of the weights."""
        self._check(_c.lib().refit_transfer(self._handle))

    def verify(self):
        """Collective: checks the last transfer; returns (wrong elements or -1, tensors whose
        checksums differ), raising RefitError (REFIT_ERR_VERIFY) when anything differs."""
        wrong, bad = ctypes.c_int64(), ctypes.c_int64()
        st = _c.lib().refit_verify(self._handle, ctypes.byref(wrong), ctypes.byref(bad))
        self._check(st)
        return wrong.value, bad.value

    def timings(self):
        """This rank's phases of the last transfer, {phase: seconds}."""
        phases = (ctypes.c_double * _c.PHASE_COUNT)()
        self._check(_c.lib().refit_timings(self._handle, phases, _c.PHASE_COUNT))
        return {_c.lib().refit_phase_name(i).decode(): phases[i] for i in range(_c.PHASE_COUNT)}

    def record(self, path):
        """Collective: appends the transfers since the last record to an HDF5 results file."""
        self._check(_c.lib().refit_record(self._handle, str(path).encode()))

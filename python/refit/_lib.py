"""librefit.so through ctypes: finding and loading it, and the signatures of include/refit.h."""

import ctypes
import ctypes.util
import os

API_VERSION_MAJOR = 1

ROLE_TRAINER = 1
ROLE_ROLLOUT = 2
MEMORY_HOST = 0
MEMORY_DEVICE = 1
MAX_DIMS = 4
PHASE_COUNT = 9


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("bytes", ctypes.c_int64),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("role", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("memory", ctypes.c_int),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("bytes", ctypes.c_int64),
    ]


def _find():
    """REFIT_LIB names the library's path; else the linker's search path finds librefit.so.1."""
    path = os.environ.get("REFIT_LIB")
    if path:
        return path
    found = ctypes.util.find_library("refit")
    if found:
        return found
    return "librefit.so.%d" % API_VERSION_MAJOR


def _declare(lib):
    P, I, I64, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p
    sigs = {
        "refit_status_string": (S, [I]),
        "refit_api_version": (I, []),
        "refit_version_string": (S, []),
        "refit_context_create": (I, [ctypes.POINTER(P)]),
        "refit_context_destroy": (None, [P]),
        "refit_context_error": (S, [P]),
        "refit_job_create_f": (I, [P, S, S, S, ctypes.POINTER(S), I64, ctypes.POINTER(P)]),
        "refit_comm_world_f": (I64, []),
        "refit_job_destroy": (None, [P]),
        "refit_job_error": (S, [P]),
        "refit_job_roles": (I, [P]),
        "refit_job_rank": (I, [P, I]),
        "refit_job_memory": (I, [P]),
        "refit_job_transport": (S, [P]),
        "refit_job_plan": (S, [P]),
        "refit_job_plan_json": (S, [P]),
        "refit_tensor_count": (I, [P, I]),
        "refit_tensor_get": (I, [P, I, I, ctypes.POINTER(TensorInfo)]),
        "refit_tensor_buffer": (I, [P, I, S, ctypes.POINTER(P), ctypes.POINTER(I64)]),
        "refit_register": (I, [P, ctypes.POINTER(Tensor), I]),
        "refit_transfer": (I, [P]),
        "refit_verify": (I, [P, ctypes.POINTER(I64), ctypes.POINTER(I64)]),
        "refit_timings": (I, [P, ctypes.POINTER(ctypes.c_double), I]),
        "refit_phase_name": (S, [I]),
        "refit_record": (I, [P, S]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = None


def lib():
    """The loaded library. RTLD_GLOBAL: Open MPI's components, which MPI_Init loads, need
    libmpi's symbols in the global scope."""
    global _lib
    if _lib is None:
        loaded = _declare(ctypes.CDLL(_find(), mode=ctypes.RTLD_GLOBAL))
        version = loaded.refit_api_version()
        if version // 10000 != API_VERSION_MAJOR:
            raise ImportError(
                "librefit at %s has API version %d; this binding needs major %d"
                % (_find(), version, API_VERSION_MAJOR)
            )
        _lib = loaded
    return _lib

"""The C library through ctypes, its memory-mapping calls typed (chapters 00 and 04).

The measured clock (:mod:`hpclab.measure.clock`) maps a page for its machine code; the
page-cache probe (:mod:`hpclab.storage.cache`) maps a file to ask ``mincore`` which of its
pages are resident. Untyped, ctypes would pass a 64-bit address as a C ``int``.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def libc() -> ctypes.CDLL:
    """The C library (this process's own symbols where no libc file is found), with ``mmap``,
    ``munmap`` and ``mprotect`` typed; raises OSError when it cannot be loaded."""
    lib = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    lib.mmap.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    lib.mmap.restype = ctypes.c_void_p
    lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    lib.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return lib

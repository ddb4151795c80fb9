"""What the benchmark scripts share: the repository root, Debian's
allocators that the bare runs preload, and the environment every run starts
from (stdlib only).

The frozen studies in scripts/studies/ import it too (they put scripts/ on
sys.path first).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = "/usr/lib/x86_64-linux-gnu"
DEBIAN_JEMALLOC = f"{LIB}/libjemalloc.so.2"
DEBIAN_MIMALLOC = f"{LIB}/libmimalloc.so.2"
# Debian's tcmalloc (gperftools), the allocator library `compare -a
# tcmalloc=PATH` takes as a fourth contender.
DEBIAN_TCMALLOC = f"{LIB}/libtcmalloc_minimal.so.4"
# Debian's builds of the two allocators, preloaded for the bare runs.
DEBIAN = {"jemalloc": DEBIAN_JEMALLOC, "mimalloc": DEBIAN_MIMALLOC}


def require_debian(libs=None):
    """Exits with the apt-get line when one of Debian's allocators is missing."""
    for lib in libs or DEBIAN.values():
        if not os.path.exists(lib):
            sys.exit(f"{lib} is missing: apt-get install libjemalloc2 libmimalloc2.0")


def clean_env():
    """The environment without LD_PRELOAD or any ALLOCMUX_ setting, so that
    each configuration sets exactly what it measures."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "ALLOCMUX_"))}

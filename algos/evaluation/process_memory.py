"""Memory probes for the ``perf/*`` entries of each training step (docs/metrics.md).

* :func:`process_memory` measures this process's resident and peak memory, and GPU memory too (:func:`gpu_memory`).
* :func:`gpu_memory` reads the CUDA caching allocator's figures, without importing torch or starting CUDA.
"""

from __future__ import annotations

import os
import sys


def process_memory() -> dict[str, float]:
    """This process's memory: ``perf/rss_gib`` (resident now, Linux), ``perf/peak_rss_gib`` (the high-water
    mark since the process started) and, when this process has initialised CUDA, :func:`gpu_memory`'s entries."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm") as f:
            out["perf/rss_gib"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except OSError:  # not Linux
        pass
    out.update(gpu_memory())
    try:
        import resource  # Unix only
    except ImportError:
        return out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out["perf/peak_rss_gib"] = peak / (2**30 if sys.platform == "darwin" else 2**20)
    return out


def gpu_memory() -> dict[str, float]:
    """The CUDA caching allocator's figures for the current device, in GiB: ``perf/gpu_allocated_gib`` (tensors
    now), ``perf/gpu_peak_allocated_gib`` (``torch.cuda.max_memory_allocated``, the high-water mark since the
    process started), ``perf/gpu_reserved_gib`` and ``perf/gpu_peak_reserved_gib`` (what the allocator holds
    from the driver, now and at most). Empty when torch is not imported or CUDA was never initialised in this
    process (a CPU run): it never imports torch nor starts CUDA itself."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    gib = 2**30
    return {"perf/gpu_allocated_gib": torch.cuda.memory_allocated() / gib,
            "perf/gpu_peak_allocated_gib": torch.cuda.max_memory_allocated() / gib,
            "perf/gpu_reserved_gib": torch.cuda.memory_reserved() / gib,
            "perf/gpu_peak_reserved_gib": torch.cuda.max_memory_reserved() / gib}

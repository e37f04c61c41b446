"""Devices the harness runs on: which params to generate, GPU pinning per xdist worker, ports.

Without xdist a test runs once on the CPU and once per visible GPU (cuda:0,
cuda:1, ...). Under xdist every worker must collect the same items, so there is
a single "cuda" param, run on the one GPU the worker pinned. Pinning sets
CUDA_VISIBLE_DEVICES from the caller's own list before anything initializes
CUDA, which is why nothing here touches torch.cuda at import time.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import MutableMapping

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
CPU = "cpu"
CUDA = "cuda"  # the single GPU param under xdist (and where no GPU is visible)
ANY_DEVICE = "any"  # recorded for implementation tests that take no device

_WORKER_ID = re.compile(r"gw(\d+)")
_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class DeviceParam:
    id: str
    skip_reason: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.id != CPU


def worker_index(worker_id: str) -> int:
    """'gw3' -> 3 (the id xdist gives its workers)."""
    match = _WORKER_ID.fullmatch(worker_id)
    if match is None:
        raise ValueError(f"invalid xdist worker id: {worker_id!r} (accepted: 'gw<N>')")
    return int(match.group(1))


def visible_entries(value: str | None) -> list[str] | None:
    """The entries of a CUDA_VISIBLE_DEVICES value; None when the variable is unset."""
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def pinned_entry(caller_visible: str | None, index: int, detected_count: int | None) -> str | None:
    """The one GPU worker `index` keeps: the caller's list (or all detected GPUs), modulo its length.

    None: nothing to pin (no GPU known). An empty caller list stays empty, so a
    caller that hid every GPU keeps them hidden.
    """
    entries = visible_entries(caller_visible)
    if entries is None:
        if not detected_count:
            return None
        entries = [str(i) for i in range(detected_count)]
    if not entries:
        return ""
    return entries[index % len(entries)]


def count_gpus_without_cuda() -> int | None:
    """GPUs present, counted without initializing CUDA in this process; None if unknown."""
    import torch  # importing torch leaves CUDA uninitialized

    if torch.version.cuda is None:
        return 0  # a CPU build of torch can use no GPU
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        command = [smi, "-L"]
    else:  # no driver tool: ask a throwaway interpreter, whose CUDA state dies with it
        command = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S * 6, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if smi is not None:
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return int(out.strip()) if out.strip().isdigit() else None


def pin_worker_gpu(worker_id: str, environ: MutableMapping[str, str] | None = None) -> str | None:
    """Restrict this xdist worker to one GPU of the caller's list; returns what was set (None: untouched).

    Must run before CUDA is initialized in this process (pytest_configure on the worker).
    """
    environ = os.environ if environ is None else environ
    caller_visible = environ.get(CUDA_ENV)
    detected = None if caller_visible is not None else count_gpus_without_cuda()
    entry = pinned_entry(caller_visible, worker_index(worker_id), detected)
    if entry is not None:
        environ[CUDA_ENV] = entry
    return entry


def visible_gpu_count() -> int:
    """GPUs this process can use (initializes CUDA: call only after any pinning)."""
    import torch

    if not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def no_gpu_reason() -> str:
    import torch

    visible = os.environ.get(CUDA_ENV)
    shown = "unset" if visible is None else repr(visible)
    build = f"torch {torch.__version__} built with CUDA {torch.version.cuda}" if torch.version.cuda else f"torch {torch.__version__} built without CUDA"
    return f"no CUDA device visible ({CUDA_ENV} {shown}; {build})"


def device_params(distributed: bool, gpu_count: int) -> list[DeviceParam]:
    """CPU always; under xdist one 'cuda'; otherwise one 'cuda:N' per GPU; none at all without a GPU (no phantom items).

    The matrix still shows the GPU column that did not run, with the reason (Harness.device_ids).
    """
    params = [DeviceParam(CPU)]
    if gpu_count == 0:
        return params
    if distributed:
        params.append(DeviceParam(CUDA))
    else:
        params += [DeviceParam(f"cuda:{i}") for i in range(gpu_count)]
    return params


def pytest_params(params: list[DeviceParam] | None = None) -> list:
    """Device params as pytest params, ids as the suite's: GPU ones marked gpu, and skipped with the reason where none is visible.

    params: the suite's own (Harness.device_params); by default this
    process's (one "cuda" under xdist, so every worker collects the same
    items). A test then builds on devices.torch_device(id).
    """
    import pytest

    if params is None:
        params = device_params("PYTEST_XDIST_WORKER" in os.environ, visible_gpu_count())
    out = []
    for param in params:
        marks = [pytest.mark.gpu] if param.is_gpu else []
        if param.skip_reason:
            marks.append(pytest.mark.skip(reason=param.skip_reason))
        out.append(pytest.param(param.id, id=param.id, marks=marks))
    return out


def needs_gpu(test):
    """Decorates a test that needs a GPU and takes no device param: marked gpu, skipped with the reason where none is visible."""
    import pytest

    return pytest.mark.gpu(pytest.mark.skipif(visible_gpu_count() == 0, reason=no_gpu_reason())(test))


def torch_device(param_id: str) -> str:
    """The torch device string for a device param ('cuda' is the worker's pinned GPU)."""
    return "cuda:0" if param_id == CUDA else param_id


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now, chosen by the OS at run time (no fixed ports shared between workers).

    The port is released before returning, so hand it to its user at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _nvidia_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    versions = sorted({line.strip() for line in out.splitlines() if line.strip()})
    return ",".join(versions) or None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe_devices() -> list[dict]:
    """{"name", "kind", "model", "driver"} for the CPU and every GPU this process sees."""
    import torch

    devices = [{"name": CPU, "kind": CPU, "model": _cpu_model(), "driver": None}]
    count = visible_gpu_count()
    if count:
        nvidia = _nvidia_driver()
        parts = ([f"nvidia {nvidia}"] if nvidia else []) + ([f"cuda {torch.version.cuda}"] if torch.version.cuda else [])
        driver = "; ".join(parts) or None
        for index in range(count):
            devices.append({"name": f"cuda:{index}", "kind": CUDA, "model": torch.cuda.get_device_name(index), "driver": driver})
    return devices

"""A live run starts cuInit at once where the NVIDIA driver has GPUs (netdoctor.host.cuda_warmup)."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import pytest

from netdoctor.host import cuda_warmup


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_warmup, "_started", False)


def test_no_driver_no_warm_up(tmp_path: Path) -> None:
    assert cuda_warmup.start_cuda_init(gpus_dir=str(tmp_path / "absent")) is False
    (tmp_path / "gpus").mkdir()
    assert cuda_warmup.start_cuda_init(gpus_dir=str(tmp_path / "gpus")) is False      # a driver without GPUs


def test_cuinit_once_per_process_in_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpus" / "0000:18:00.0").mkdir(parents=True)
    called = threading.Event()
    names: list[str] = []

    class FakeLibrary:
        def cuInit(self, flags: ctypes.c_uint) -> int:  # noqa: N802 - the driver's name
            names.append(threading.current_thread().name)
            called.set()
            return 0

    monkeypatch.setattr(cuda_warmup.ctypes, "CDLL", lambda name: FakeLibrary())
    assert cuda_warmup.start_cuda_init(gpus_dir=str(tmp_path / "gpus")) is True
    assert called.wait(10)
    assert cuda_warmup.start_cuda_init(gpus_dir=str(tmp_path / "gpus")) is False
    assert names == ["netdoctor-cuinit"]


def test_a_missing_libcuda_is_left_to_the_nvml_read(tmp_path: Path) -> None:
    (tmp_path / "gpus" / "0000:18:00.0").mkdir(parents=True)
    assert cuda_warmup.start_cuda_init("libcuda-netdoctor-absent.so.1", gpus_dir=str(tmp_path / "gpus")) is True
    cuda_warmup._cuda_init("libcuda-netdoctor-absent.so.1")      # no exception, nothing to say


@pytest.mark.parametrize(("probe", "dmabuf_matters", "started"), [
    (True, False, True), (True, True, True), (False, True, True),
    # `check --no-probe` where NVML will not ask about DMA-BUF: a cuInit would only hold up
    # the NVML calls, which the driver answers one at a time.
    (False, False, False)])
def test_cuinit_only_where_the_run_needs_it(probe: bool, dmabuf_matters: bool, started: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from netdoctor import check_command
    from netdoctor.host import nvml

    calls: list[bool] = []
    monkeypatch.setattr(cuda_warmup, "start_cuda_init", lambda: calls.append(True) or True)
    monkeypatch.setattr(nvml, "dmabuf_can_matter", lambda sys: dmabuf_matters)
    check_command._start_cuda_init(probe=probe)
    assert calls == ([True] if started else [])

"""Shared helpers: in-process runs of a script's main, and spies on its functions."""

import signal
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """main installs SIGINT/SIGTERM handlers; put pytest's back after each test."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def only_run(folder: Path) -> Path:
    (run_dir,) = (Path(folder) / "runs").iterdir()
    return run_dir


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard holds for a run: tag -> [(step, value)]."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def spy(monkeypatch, module, name: str, before=None, after=None) -> list:
    """Wrap module.name: before(*args, **kwargs) runs ahead of each call, after(result, *args, **kwargs)
    behind it; the list returned collects (args, kwargs, result) of every call."""
    real = getattr(module, name)
    calls = []

    def wrapper(*args, **kwargs):
        if before:
            before(*args, **kwargs)
        result = real(*args, **kwargs)
        calls.append((args, kwargs, result))
        if after:
            after(result, *args, **kwargs)
        return result

    monkeypatch.setattr(module, name, wrapper)
    return calls

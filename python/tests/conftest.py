"""Shared fixtures of the Python tests. [gpu] tests (the `gpu` marker) need torch with CUDA
and are skipped, visibly, elsewhere: `pytest -rs` lists each skip with its reason."""
import pytest

import winnow


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, visibly, without one)")


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "WINNOW_SKIP: no torch"
    if not torch.cuda.is_available():
        return "WINNOW_SKIP: no GPU"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def ctx():
    """One context for the session (device 0; compile-only without a GPU)."""
    return winnow.Context(0)


@pytest.fixture(scope="session")
def arch():
    """The arch plans name: the device's with a GPU (None), else sm_90a (compile only)."""
    return None if _gpu_reason() is None else "sm_90a"

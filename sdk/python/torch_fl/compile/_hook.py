"""Registers the "torchfl" backend with Dynamo without importing Dynamo.

`import torch_fl` must stay cheap, and importing torch._dynamo costs about a
second. So the backend is registered at the moment Dynamo's backend
registry module finishes loading (or at once, when it already has). The
`torch_dynamo_backends` entry point reaches the same function when the
package metadata declares it; whichever comes first registers it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["install_backend_hook"]

_REGISTRY = "torch._dynamo.backends.registry"
BACKEND_NAME = "torchfl"


def _register(registry: ModuleType) -> None:
    if BACKEND_NAME in registry._COMPILER_FNS:
        return
    from torch_fl.compile import torchfl_backend

    registry.register_backend(compiler_fn=torchfl_backend, name=BACKEND_NAME)


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the registry module with its own loader, then registers."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        module.__loader__ = self._inner
        _register(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RegistryFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _REGISTRY:
            return None
        _remove_finder()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


_finder: _RegistryFinder | None = None


def _remove_finder() -> None:
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None


def install_backend_hook() -> None:
    """Makes `torch.compile(backend="torchfl")` resolve, now or when Dynamo loads."""
    global _finder
    registry = sys.modules.get(_REGISTRY)
    if registry is not None:
        _register(registry)
        return
    if _finder is None:
        _finder = _RegistryFinder()
        sys.meta_path.insert(0, _finder)

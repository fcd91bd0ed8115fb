"""Registrations with parts of torch that `import torch_fl` must not import.

Importing torch._dynamo costs about a second and torch._inductor more, so the
"torchfl" Dynamo backend, the device's Dynamo interface and its inductor
placeholder are registered at the moment the module they go into finishes
loading (or at once, when it already has). The `torch_dynamo_backends` entry
point reaches the backend registration too; whichever comes first registers it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["install_backend_hook", "when_imported"]

_REGISTRY = "torch._dynamo.backends.registry"
BACKEND_NAME = "torchfl"

_pending: dict[str, list[Callable[[ModuleType], None]]] = {}


def _loaded(name: str) -> ModuleType | None:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or getattr(spec, "_initializing", False):
        return None
    return module


def when_imported(name: str, fn: Callable[[ModuleType], None]) -> None:
    """Calls fn(module) once `name` has finished loading: now, or when it does."""
    module = _loaded(name)
    if module is not None:
        fn(module)
        return
    _pending.setdefault(name, []).append(fn)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


class _RegisteringLoader(importlib.abc.Loader):
    """Runs a module with its own loader, then the registrations waiting for it."""

    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        module.__loader__ = self._inner
        for fn in _pending.pop(self._name, []):
            fn(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RegisteringLoader(spec.loader, fullname)
        return spec


_finder = _Finder()


def _register_backend(registry: ModuleType) -> None:
    if BACKEND_NAME in registry._COMPILER_FNS:
        return
    from torch_fl.compile import torchfl_backend

    registry.register_backend(compiler_fn=torchfl_backend, name=BACKEND_NAME)


def install_backend_hook() -> None:
    """Makes `torch.compile(backend="torchfl")` resolve, now or when Dynamo loads."""
    when_imported(_REGISTRY, _register_backend)

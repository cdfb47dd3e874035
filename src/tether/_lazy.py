"""``lazy``: a package whose public names are imported the first time one is used.

``tether.wire`` and ``tether.agentd`` are used by the daemon and by one-shot commands alike;
``tether ps`` needs their messages and states, not trio, so it must not pay for importing it.
Each name is loaded from its private module on first use and, as ``_util.reexport`` does for
an eager package, a class or function gets the package as its ``__module__``.
"""

from __future__ import annotations

import importlib
import types

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping


def lazy(
    namespace: MutableMapping[str, object], where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose globals are ``namespace``;
    ``where`` maps each public name to the module (relative to the package) that defines it."""
    package = str(namespace["__name__"])

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        if isinstance(value, type | types.FunctionType):
            value.__module__ = package
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__

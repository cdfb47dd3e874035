"""Turn a channel's element type into something ``isinstance`` can check on every send."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

ClassSpec = type | tuple[type, ...]


def isinstance_spec(item_type: object) -> ClassSpec | None:
    """The class (or tuple of classes) that every item must be an instance of.

    ``None`` means no check: ``typing.Any`` and ``object`` accept everything. Classes, unions of
    classes, ``None``, ``NewType`` and parametrised generics (checked by their origin, so
    ``list[int]`` checks ``list``) are supported.

    Raises:
        TypeError: ``item_type`` cannot be checked at run time (a ``Literal``, a ``TypeVar``,
            a protocol that is not ``runtime_checkable``...); pass ``check_types=False``.
    """
    classes = _flatten(item_type)
    if classes is None:
        return None
    spec: ClassSpec = classes[0] if len(classes) == 1 else classes
    try:
        isinstance(None, spec)
    except TypeError as exc:
        raise _uncheckable(item_type) from exc
    return spec


def _flatten(item_type: object) -> tuple[type, ...] | None:
    if item_type is Any or item_type is object:
        return None
    if item_type is None or item_type is types.NoneType:
        return (types.NoneType,)
    supertype = getattr(item_type, "__supertype__", None)
    if supertype is not None:  # typing.NewType
        return _flatten(supertype)
    origin = get_origin(item_type)
    if origin is Annotated:
        return _flatten(get_args(item_type)[0])
    if origin is Union or origin is types.UnionType:
        found: list[type] = []
        for arg in get_args(item_type):
            sub = _flatten(arg)
            if sub is None:
                return None
            found.extend(cls for cls in sub if cls not in found)
        return tuple(found)
    if isinstance(origin, type):
        return (origin,)
    if isinstance(item_type, type):
        return (item_type,)
    raise _uncheckable(item_type)


def _uncheckable(item_type: object) -> TypeError:
    return TypeError(
        f"cannot check items against {item_type!r} at run time; "
        "use a class or a union of classes, or pass check_types=False"
    )


def describe(spec: ClassSpec) -> str:
    """``spec`` as a reader writes it: ``int | str``."""
    classes = spec if isinstance(spec, tuple) else (spec,)
    return " | ".join(cls.__qualname__ for cls in classes)


def wrong_type(value: object, types: ClassSpec) -> TypeError:
    """The error of a send whose value is not of the channel's element type."""
    return TypeError(
        f"this channel carries {describe(types)}, not {type(value).__qualname__}: {value!r:.80}"
    )

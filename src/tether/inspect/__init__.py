"""See inside a live trio program: its task tree, where each task waits and on what, and the
sections its program adds (``tether inspect SESSION`` shows a harness's; ADR 0040). Each name
is imported on first use (``tether._lazy``): ``tether inspect`` renders without trio."""

from .._lazy import lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._render import render as render
    from ._snapshot import Section as Section
    from ._snapshot import add_section as add_section
    from ._snapshot import snapshot as snapshot

__all__ = ["Section", "add_section", "render", "snapshot"]

_WHERE = {
    "Section": "._snapshot",
    "add_section": "._snapshot",
    "render": "._render",
    "snapshot": "._snapshot",
}
"""Where each public name lives."""
_get, __dir__ = lazy(globals(), _WHERE)


def __getattr__(name: str) -> object:
    return _get(name)

"""A real engine: ``python -m tether.harness.openai --base-url URL --model NAME`` runs a harness
whose engine streams chat completions from an OpenAI-compatible server (the real wire format,
over httpx: ``pip install 'tether[openai]'``) and runs the ``shell`` calls the model makes
through ``ctx.run_tool`` (ADR 0041)."""

from ..._util import reexport
from ._conversation import MODEL_ERROR as MODEL_ERROR
from ._conversation import PARTIAL_REPLY as PARTIAL_REPLY
from ._engine import ModelSettings as ModelSettings
from ._engine import OpenAIEngine as OpenAIEngine
from ._stream import Failure as Failure
from ._stream import ModelError as ModelError

__all__ = [
    "MODEL_ERROR",
    "PARTIAL_REPLY",
    "Failure",
    "ModelError",
    "ModelSettings",
    "OpenAIEngine",
]

reexport(globals())

"""An OpenAI-compatible HTTP server (``lexguide serve``) with structured outputs.

``create_app(model, parallel=4, n_ctx=None)`` builds the FastAPI app; ``serve(path, ...)``
loads a model and runs it under uvicorn. Needs the ``server`` extra
(``pip install 'lexguide[server]'``); see ``docs/server.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "serve"]


def create_app(model: Any, **kwargs: Any) -> Any:
    """The ASGI app serving ``model`` (see :func:`lexguide.server.app.create_app`)."""
    from lexguide.server.app import create_app as _create_app

    return _create_app(model, **kwargs)


def serve(model_path: Any = None, **kwargs: Any) -> None:
    """Load a model and serve it until interrupted (see :func:`lexguide.server.app.serve`)."""
    from lexguide.server.app import serve as _serve

    _serve(model_path, **kwargs)

"""lexguide's constraints inside other inference engines (see ``docs/integrations.md``).

- :mod:`lexguide.integrations.transformers` — a ``LogitsProcessor`` for ``model.generate``
  (extra ``transformers``);
- :mod:`lexguide.integrations.llama_cpp` — a logits processor for llama-cpp-python's
  ``create_completion`` / ``create_chat_completion`` (extra ``llama-cpp``);
- :mod:`lexguide.integrations.vllm` — a custom logits processor for vLLM's v1 engine, both
  model runners, constrained per request (extra ``vllm``).

Each module imports its framework when it is imported, and raises an ``ImportError`` naming
the extra to install when the framework is missing. This package imports none of them.
"""

__all__: list[str] = []

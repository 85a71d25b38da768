"""Chat prompts: render messages with the GGUF's ``tokenizer.chat_template`` (Jinja2).

The template runs in Jinja2's immutable sandbox with the variables Hugging Face templates use
(``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``,
``strftime_now``). Gemma 3 GGUFs ship without a template; for them the well-known Gemma turn
format is used.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from lexguide.errors import ModelError

__all__ = ["GEMMA_TEMPLATE", "render_chat"]

# Gemma's turn format (the template of the Hugging Face Gemma 3 instruction models, without
# image handling): a system message is prepended to the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def _raise(message: str) -> None:
    raise ModelError(f"chat template error: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    try:
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:  # jinja2 is a dependency; this only guards broken installs
        raise ModelError("chat templates need jinja2: pip install jinja2") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except TemplateSyntaxError as e:
        raise ModelError(f"chat template line {e.lineno}: {e.message}") from None


def render_chat(template: str, messages: Sequence[Mapping[str, Any]], *,
                add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "",
                **extra: Any) -> str:
    """The prompt text for ``messages`` (each a mapping with ``role`` and ``content``).

    Raises :class:`ModelError` for malformed messages or a template that fails (with the
    template's own message for ``raise_exception``). Pure; compiled templates are cached.
    """
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ModelError(f"messages[{i}] must be a mapping with 'role' and 'content'")
    compiled = _compile(template)
    from jinja2 import TemplateError

    try:
        return str(compiled.render(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **extra,
        ))
    except TemplateError as e:
        raise ModelError(f"chat template failed: {e}") from None

"""The playground page at ``/``, driven in headless Chromium (skipped without ``chromium``)."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
jsonschema = pytest.importorskip("jsonschema")

from server_helpers import start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install -y chromium)")

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def page(smollm2_file, tmp_path_factory):
    from cdp_pipe import Browser

    server = start_server(smollm2_file, tmp_path_factory.mktemp("playground"), "--parallel",
                          "2", "--ctx", "512")
    try:
        browser = Browser(CHROMIUM)
    except (OSError, RuntimeError) as e:  # pragma: no cover - a chromium that cannot start
        server.stop()
        pytest.skip(f"chromium cannot start: {e}")
    try:
        session = browser.open_page(server.url + "/")
        _wait(browser, session, 'document.readyState == "complete" && !!document.getElementById("send")')
        yield browser, session
    finally:
        browser.close()
        server.stop()


def _wait(browser, session, expression, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not browser.evaluate(session, expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.1)


def _submit(browser, session, **fields):
    sets = "".join(f"document.getElementById({json.dumps(k)}).value = {json.dumps(v)};"
                   for k, v in fields.items())
    browser.evaluate(session, sets + 'document.body.dataset.state = "";'
                     'document.getElementById("send").click(); true')
    _wait(browser, session, 'document.body.dataset.state == "done"')
    return browser.evaluate(session, '[document.getElementById("output").textContent,'
                            'document.getElementById("status").textContent,'
                            'document.getElementById("status").className]')


def test_schema_gives_valid_json(page):
    browser, session = page
    output, status, cls = _submit(browser, session, mode="chat", prompt="Invent a person.",
                                  kind="json_schema", constraint=json.dumps(SCHEMA),
                                  max_tokens="40", temperature="0")
    jsonschema.validate(json.loads(output), SCHEMA)
    assert "valid: yes" in status and cls == "ok"


def test_regex_completion_and_errors_shown(page):
    browser, session = page
    output, status, _ = _submit(browser, session, mode="completion", prompt="Phone: ",
                                kind="regex", constraint="[0-9]{3}-[0-9]{4}", max_tokens="12")
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", output) and "valid: yes" in status
    output, status, cls = _submit(browser, session, mode="chat", kind="grammar",
                                  constraint='root ::= "a" missing_rule')
    assert status.startswith("error: invalid grammar") and "line 1:" in status and cls == "bad"


def test_structural_tag_from_its_example(page):
    """The kind's example (a bare triggered_tags format) gives one complete tag; a bad spec
    shows the server's message with the JSON path."""
    browser, session = page
    browser.evaluate(session, 'const k = document.getElementById("kind");'
                     'k.value = "structural_tag"; k.dispatchEvent(new Event("change")); true')
    output, status, cls = _submit(browser, session, mode="chat", prompt="Weather in Paris?",
                                  max_tokens="48", temperature="0")
    m = re.fullmatch(r"<tool_call>(.*)</tool_call>", output, re.DOTALL)
    assert m, output
    jsonschema.validate(json.loads(m.group(1)), {"type": "object", "required": ["city"]})
    assert "valid: yes" in status and cls == "ok"
    _, status, cls = _submit(browser, session, mode="chat", constraint=json.dumps(
        {"type": "structural_tag", "format": {"type": "const_string"}}))
    assert "$.format" in status and "missing field 'value'" in status and cls == "bad"

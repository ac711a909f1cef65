"""The page's answer grader (attn_core/static/answer_box.js), run in Node.js for the tests.

The grader is written once, in the page's module; the tests of the boxes (tests/test_answer.py) and
the browser tests ask it for verdicts through :func:`grade` and :func:`parse_answer`.
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

JS = Path(__file__).resolve().parents[1] / "attn_core" / "static" / "answer_box.js"
NODE = shutil.which("node")


def _grader_source() -> str:
    m = re.search(r"// <grader>\n(.*?)// </grader>", JS.read_text(), re.S)
    assert m, "grader markers missing in answer_box.js"
    return m.group(1)


_SERVER = """
const rl = require("readline").createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const [what, a, b] = JSON.parse(line);
  let out;
  if (what === "grade") out = gradeAnswer(a, b);
  else {
    try {
      out = parseAnswer(a, b);
    } catch (err) {
      if (!(err instanceof AnswerParseError)) throw err;
      out = null;
    }
  }
  process.stdout.write(JSON.stringify(out) + "\\n");
});
"""


@functools.cache
def _grader():
    """One Node.js process running the page's grader, answering one JSON line per request."""
    proc = subprocess.Popen([NODE, "-e", _grader_source() + _SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    atexit.register(proc.kill)
    return proc


def _node(call: list):
    proc = _grader()
    proc.stdin.write(json.dumps(call) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def grade(spec: dict, text: str) -> dict:
    """The page's verdict for ``text`` in a box of ``spec``."""
    return _node(["grade", spec, text])


def parse_answer(text: str, unit=None) -> dict | None:
    """The page's reading of ``text`` (None: not readable)."""
    return _node(["parse", text, unit])

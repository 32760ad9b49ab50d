"""Checks a recorded AG-UI SSE stream with the protocol's own tools.

Usage: validate_events.py CAPTURE.sse [--features a,b]

1. Every `data:` event parses as an `ag_ui.core.Event` (the pydantic models generated from the
   AG-UI 1.0 schema, PyPI `ag-ui-protocol`), with no field the model does not know.
2. The stream passes the conformance validator (PyPI `ag-ui-validate`), warnings included.
Prints `OK <n events>` or the problems, and exits non-zero on any.
"""

import json
import subprocess
import sys

from pydantic import TypeAdapter

from ag_ui.core import Event

path = sys.argv[1]
extra_args = sys.argv[2:]
events = []
with open(path, encoding="utf-8") as capture:
    for line in capture:
        if line.startswith("data:"):
            events.append(json.loads(line[5:].strip()))

problems = []
adapter = TypeAdapter(Event)


def unknown_fields(model, where):
    extra = getattr(model, "__pydantic_extra__", None) or {}
    found = [f"{where}.{name}" for name in extra]
    for name, value in model:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if hasattr(item, "__pydantic_extra__"):
                found += unknown_fields(item, f"{where}.{name}")
    return found


for index, event in enumerate(events):
    try:
        model = adapter.validate_python(event)
    except Exception as error:  # pydantic.ValidationError
        problems.append(f"event {index} ({event.get('type')}): {error}")
        continue
    for name in unknown_fields(model, event.get("type", "?")):
        problems.append(f"event {index}: field {name} is not in the AG-UI schema")

result = subprocess.run(
    ["ag-ui-validate", path, "--json", "--max-warnings", "0", "--fail-on", "warning", *extra_args],
    capture_output=True,
    text=True,
)
if result.returncode != 0:
    problems.append(f"ag-ui-validate exit {result.returncode}: {result.stdout}{result.stderr}")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"OK {len(events)}")

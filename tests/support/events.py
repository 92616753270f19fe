"""Sample events from ``events/``, loaded by one helper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())

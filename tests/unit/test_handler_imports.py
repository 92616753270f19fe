"""Each Lambda handler imports its own function's wiring and no other: a container runs one function, and the
wiring of the others (their clients, their modules) would be paid for at every cold start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

WIRINGS = {"mirror", "checkpoint", "heartbeat", "topic_sync", "verify", "metrics_api", "composed"}
# topic sync advertises the metrics API of its deployment: that wiring is part of its own
OWN = {"topic_sync": {"topic_sync", "metrics_api"}}


@pytest.mark.parametrize("handler", ["mirror", "checkpoint", "heartbeat", "topic_sync", "verify", "metrics_api"])
def test_a_handler_imports_only_its_functions_wiring(handler: str) -> None:
    # GIVEN a fresh interpreter WHEN the handler module is imported, as Lambda's runtime imports the entry point
    probe = (
        "import json, sys\n"
        f"import srm.handlers.{handler}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('srm.app.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={"AWS_REGION": "us-east-1"}, check=True
    )
    loaded = {m.removeprefix("srm.app.") for m in json.loads(done.stdout)}
    # THEN of the functions' wirings only its own is loaded, and not the composition root of every function
    assert loaded & WIRINGS == OWN.get(handler, {handler})


def test_the_composed_app_is_every_wiring_and_what_every_wiring_returns_once_imported() -> None:
    # GIVEN the composition root imported (srm run's workers, the tests) WHEN a function's wiring asks for the
    # container's instance THEN it is the one App, whichever wiring asks
    from srm.app import App
    from srm.app.checkpoint import CheckpointWiring
    from srm.app.mirror import MirrorWiring

    App.reset()
    try:
        assert MirrorWiring.current() is App.current() is CheckpointWiring.current()
    finally:
        App.reset()

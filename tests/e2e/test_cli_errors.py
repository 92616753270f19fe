"""`srm run --config` with bad input: one clear line on stderr, exit status 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runtime import run_cli

pytestmark = pytest.mark.e2e

A = "127.0.0.1:9"  # never contacted: validation fails first
B = "127.0.0.1:19"

CASES = {
    "unknown-alias": (
        "srm.yaml",
        f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{bootstrap.servers: '{B}'}}\n"
        "flows:\n  a->z: {enabled: true}\n",
        ("a->z.enabled", "'z'", "srm.yaml:5"),
    ),
    "bad-regex": (
        "srm.yaml",
        f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{bootstrap.servers: '{B}'}}\n"
        "flows:\n  a->b: {enabled: true, topics: 'orders.(['}\n",
        ("a->b.topics", "orders.([", "not a valid regex"),
    ),
    "missing-bootstrap": (
        "srm.yaml",
        f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{}}\nflows:\n  a->b: {{enabled: true}}\n",
        ("b.bootstrap.servers", "srm.yaml"),
    ),
    "flow-to-itself": (
        "mm2.properties",
        f"clusters = a, b\na.bootstrap.servers = {A}\nb.bootstrap.servers = {B}\na->a.enabled = true\n",
        ("a->a", "mm2.properties:4"),
    ),
    "nonexistent-file": (None, None, ("missing.yaml", "cannot read")),
    "unknown-extension": ("srm.json", "{}", ("srm.json", ".properties")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_run_with_bad_config_prints_one_line_error_and_exits_2(tmp_path: Path, case: str):
    # GIVEN a bad config file (or none at all)
    name, text, expected = CASES[case]
    if name is None:
        path = tmp_path / "missing.yaml"
    else:
        path = tmp_path / name
        path.write_text(text)

    # WHEN srm run is given it
    result = run_cli("srm", "run", "--config", str(path), cwd=tmp_path)

    # THEN it exits with 2 and one "srm: " line that names what is wrong, without a traceback
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("srm: "), lines[0]
    for fragment in expected:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert result.stdout == ""
    assert not (tmp_path / ".srm-local").exists()  # nothing was started

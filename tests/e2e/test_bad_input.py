"""Bad input as a new user meets it, through the real CLIs (subprocesses): each row is one case. Whatever the
input, the answer is the documented exit status and one line (or the few a row allows) that names the key, file or
cluster at fault — never a traceback, never a secret, never a flood of client logs.

A row's files are written to its own directory (``{dir}`` in its arguments); ``SECRET`` stands in every config a row
writes where a password would be, and must appear in no output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.runtime import run_cli

pytestmark = pytest.mark.e2e

A = "127.0.0.1:9"  # never contacted: validation fails first
B = "127.0.0.1:19"
SECRET = "s3cr3t-never-printed"
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SECRET}";'
TWO_CLUSTERS = f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{bootstrap.servers: '{B}'}}\n"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # the CLI (srm, srm-control) and its arguments; "{dir}" is the row's directory
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # written into the row's directory first
    says: tuple[str, ...] = ()  # fragments stderr carries: the key, file:line, cluster
    exit: int = 2
    lines: int = 1  # stderr lines at most
    timeout: float = 60.0  # the run must end within it (a hang fails the row)
    env: Mapping[str, str] = field(default_factory=dict)


def run(*args: str) -> tuple[str, ...]:
    return ("srm", "run", *args)


CASES: dict[str, Case] = {
    # -- the config file itself ------------------------------------------------------------------------------------
    "unknown-alias": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->z: {enabled: true}\n"},
        ("a->z.enabled", "'z'", "srm.yaml:5"),
    ),
    "bad-regex": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true, topics: 'orders.(['}\n"},
        ("a->b.topics", "orders.([", "not a valid regex"),
    ),
    "missing-bootstrap": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{}}\nflows:\n  a->b: {{enabled: true}}\n"},
        ("b.bootstrap.servers", "srm.yaml"),
    ),
    "flow-to-itself": Case(
        run("--config", "{dir}/mm2.properties"),
        {"mm2.properties": f"clusters = a, b\na.bootstrap.servers = {A}\nb.bootstrap.servers = {B}\na->a.enabled = true\n"},
        ("a->a", "mm2.properties:4"),
    ),
    "nonexistent-file": Case(run("--config", "{dir}/missing.yaml"), {}, ("missing.yaml", "cannot read")),
    "unknown-extension": Case(run("--config", "{dir}/srm.json"), {"srm.json": "{}"}, ("srm.json", ".properties")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_one_clear_line_and_its_exit_status(tmp_path: Path, name: str):
    # GIVEN the row's files, a secret in them where a password would be
    case = CASES[name]
    for file, content in case.files.items():
        path = tmp_path / file
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    # WHEN the CLI is given the row's input
    args = [a.replace("{dir}", str(tmp_path)) for a in case.args]
    result = run_cli(*args, cwd=tmp_path, timeout=case.timeout, env=case.env)

    # THEN it exits as documented with at most the row's lines, naming what is wrong, no traceback and no secret
    output = result.stdout + result.stderr
    assert result.returncode == case.exit, output
    assert "Traceback" not in output, output
    assert SECRET not in output
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= case.lines, result.stderr
    for fragment in case.says:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    if case.exit == 2 and case.args[:2] == ("srm", "run"):
        assert lines[0].startswith("srm: "), lines[0]
        assert not (tmp_path / ".srm-local").exists()  # nothing was started

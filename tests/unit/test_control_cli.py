"""``srm-control`` as a command: every verb's output, exit status and one-line errors, on moto's DynamoDB."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from srm.cli.control import main
from srm.config.parsing import parse_properties_text
from srm.config.store import ConfigConflictError
from srm.control.edits import Control
from srm.local.store import free_port

MM2 = textwrap.dedent(
    r"""
    # an mm2.properties as MM2 users write it
    clusters = us-west, us-east
    us-west.bootstrap.servers = west-1:9092,west-2:9092
    us-east.bootstrap.servers = east-1:9092
    us-east.security.protocol = SASL_SSL
    us-east.sasl.mechanism = SCRAM-SHA-512
    us-east.sasl.jaas.config = ${secretsmanager:srm/us-east:jaas}
    us-west->us-east.enabled = true
    us-west->us-east.topics = orders.*, payments
    us-west->us-east.topics.exclude = .*\\.tmp, .*[\\-\\.]internal
    us-west->us-east.emit.checkpoints.interval.seconds = 30
    us-east->us-west.enabled = false
    replication.factor = 3
    tasks.max = 4
    """
)
# A JAAS line with its password written out, which the config table never stores.
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'


class Cli:
    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(args), out=out, err=err)
        return code, out.getvalue(), err.getvalue()


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    monkeypatch.chdir(tmp_path)
    with mock_aws():
        (tmp_path / "mm2.properties").write_text(MM2)
        yield Cli(tmp_path)


def items() -> list[dict[str, Any]]:
    return boto3.client("dynamodb", region_name="us-east-1").scan(TableName="srm-config")["Items"]


def test_config_import_then_export_round_trips_an_mm2_properties(cli: Cli):
    # GIVEN an mm2.properties imported into a fresh table
    code, out, err = cli("config", "import", "mm2.properties", "--create-tables")
    assert (code, err) == (0, "")
    assert "imported mm2.properties into srm-config: 2 cluster(s), 2 flow(s) (1 enabled)" in out

    # WHEN it is exported in both formats
    code, exported, _ = cli("config", "export")
    assert code == 0
    _, exported_yaml, _ = cli("config", "export", "--format", "yaml")

    # THEN both read back to exactly the imported property map, and re-importing the export changes nothing
    original = dict(parse_properties_text(MM2))
    assert dict(parse_properties_text(exported)) == original
    from srm.config.parsing import parse_yaml_text

    assert dict(parse_yaml_text(exported_yaml)) == original
    assert "# flow us-west->us-east" in exported and "us-west->us-east.topics.exclude = .*\\\\.tmp" in exported
    (cli.cwd / "exported.properties").write_text(exported)
    code, out, _ = cli("config", "import", "exported.properties")
    assert (code, out.strip()) == (
        0,
        "exported.properties: the config table srm-config already holds exactly this; nothing written",
    )


def test_config_import_takes_a_folder_of_connector_definitions(cli: Cli):
    # GIVEN MirrorMaker 2's three connectors of us-west->us-east in a folder
    from tests.unit.test_connectors import the_three

    the_three(cli.cwd / "connectors")
    # WHEN the folder is imported THEN the config table holds the one flow they make
    code, out, err = cli("config", "import", "connectors", "--create-tables")
    assert (code, err) == (0, "")
    assert "imported connectors into srm-config: 2 cluster(s), 1 flow(s) (1 enabled)" in out
    code, exported, _ = cli("config", "export")
    assert code == 0 and "us-west->us-east.topics = orders.*" in exported
    assert "us-west->us-east.groups = billing|audit" in exported


def test_topics_list_add_remove_print_before_and_after(cli: Cli):
    cli("config", "import", "mm2.properties", "--create-tables")
    code, out, _ = cli("topics", "--source", "us-west", "--target", "us-east", "--list")
    assert code == 0
    assert out.splitlines()[:3] == ["us-west->us-east topics (set on the flow):", "  orders.*", "  payments"]

    code, out, _ = cli(
        "topics", "--source", "us-west", "--target", "us-east", "--add", "refunds,audit", "--remove", "payments"
    )
    assert code == 0
    assert "us-west->us-east topics: orders.*, refunds, audit  (was: orders.*, payments)" in out
    assert "refresh.topics.interval.seconds = 600" in out

    code, out, _ = cli("topics", "--source", "us-west", "--target", "us-east", "--add-blacklist", r"audit\..*")
    assert code == 0 and r"topics.exclude: .*\.tmp, .*[\-\.]internal, audit\..*  (was:" in out


def test_groups_add_to_the_default_replaces_it(cli: Cli):
    cli("config", "import", "mm2.properties", "--create-tables")
    code, out, _ = cli("groups", "--source", "us-west", "--target", "us-east", "--add", "billing-.*")
    assert code == 0
    assert "note: us-west->us-east groups was MM2's default '.*' (everything); now only the added patterns" in out
    assert "us-west->us-east groups: billing-.*  (was: .*)" in out


def test_flows_list_enable_disable(cli: Cli):
    cli("config", "import", "mm2.properties", "--create-tables")
    code, out, _ = cli("flows", "list")
    header, *rows = out.splitlines()
    assert code == 0 and header.split() == ["FLOW", "ENABLED", "TOPICS", "GROUPS", "LAST", "CHANGED"]
    by_flow = {row.split()[0]: row.split()[1:4] for row in rows}
    assert by_flow == {
        "us-east->us-west": ["no", ".*", "(default)"],
        "us-west->us-east": ["yes", "orders.*,", "payments"],
    }

    assert cli("flows", "enable", "us-east->us-west")[:2] == (0, "us-east->us-west: enabled\n")
    assert (
        cli("flows", "enable", "--source", "us-east", "--target", "us-west")[1] == "us-east->us-west: already enabled\n"
    )
    assert cli("flows", "disable", "us-west->us-east")[:2] == (0, "us-west->us-east: disabled\n")
    assert "us-west->us-east  no " in cli("flows", "list")[1]


def test_flows_list_shows_each_flows_transform_chain(cli: Cli):
    chain = (
        "us-west->us-east.transforms = drop, stamp\n"
        "us-west->us-east.transforms.drop.type = org.apache.kafka.connect.transforms.Filter\n"
        "us-west->us-east.transforms.drop.predicate = tomb\n"
        "us-west->us-east.transforms.stamp.type = InsertHeader\n"
        "us-west->us-east.transforms.stamp.header = origin\n"
        "us-west->us-east.transforms.stamp.value.literal = us-west\n"
        "predicates = tomb\n"
        "predicates.tomb.type = RecordIsTombstone\n"
    )
    (cli.cwd / "chain.properties").write_text(MM2 + chain)
    assert cli("config", "import", "chain.properties", "--create-tables")[0] == 0
    code, out, _ = cli("flows", "list")
    chains = [line for line in out.splitlines() if "transforms:" in line]
    assert code == 0 and len(chains) == 1
    assert chains[0].startswith("us-west->us-east transforms: drop: Filter if tomb (RecordIsTombstone) -> stamp: ")


BAD = {
    "bad-regex": (("topics", "--source", "us-west", "--target", "us-east", "--add", "x(["), "not a valid regex"),
    "unknown-alias": (("topics", "--source", "us-west", "--target", "eu", "--add", "x"), "unknown cluster alias 'eu'"),
    "same-cluster": (("groups", "--source", "us-west", "--target", "us-west", "--add", "x"), "two different clusters"),
    "unknown-flow": (("flows", "enable", "us-west->us-west2"), "unknown cluster alias 'us-west2'"),
    "unquoted-flow": (("flows", "disable", "us-west-"), "quote it: the shell took '>' as a redirection"),
    "no-change": (("topics", "--source", "us-west", "--target", "us-east"), "give --list, or patterns"),
    "list-and-add": (("topics", "--source", "us-west", "--target", "us-east", "--list", "--add", "x"), "--list cannot"),
    "missing-source": (("topics", "--target", "us-east", "--list"), "required: --source"),
    "unknown-command": (("replicate",), "invalid choice: 'replicate'"),
    "malformed-file": (("config", "import", "broken.yaml"), "broken.yaml:3: not valid YAML"),
    "invalid-file": (("config", "import", "invalid.properties"), "invalid.properties:2: a->a.enabled"),
    "missing-file": (("config", "import", "nope.yaml"), "cannot read config file"),
    "secret-in-file": (("config", "import", "secret.properties"), "never stores secrets"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_prints_one_line_exits_2_and_writes_nothing(cli: Cli, case: str):
    # GIVEN a loaded configuration and some bad files
    cli("config", "import", "mm2.properties", "--create-tables")
    (cli.cwd / "broken.yaml").write_text("clusters:\n  a: [unclosed\n")
    (cli.cwd / "invalid.properties").write_text("clusters = a, b\na->a.enabled = true\n")
    (cli.cwd / "secret.properties").write_text(MM2.replace("${secretsmanager:srm/us-east:jaas}", SCRAM_JAAS))
    before = items()

    # WHEN the bad command runs
    args, expected = BAD[case]
    code, out, err = cli(*args)

    # THEN one line on stderr names the problem, exit 2, and the table is unchanged
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("srm-control: "), err
    assert expected in err, err
    assert "Traceback" not in err
    assert items() == before


def test_conflict_is_one_line_exit_1(cli: Cli, monkeypatch: pytest.MonkeyPatch):
    cli("config", "import", "mm2.properties", "--create-tables")

    def conflicting(*_a: Any, **_k: Any) -> Any:
        raise ConfigConflictError(("flow#us-west->us-east",))

    monkeypatch.setattr(Control, "edit_filters", conflicting)
    code, _, err = cli("topics", "--source", "us-west", "--target", "us-east", "--add", "x")
    assert code == 1
    assert err == (
        "srm-control: flow us-west->us-east changed since it was read (someone else wrote it meanwhile); nothing was "
        "written: run the command again to apply it to the current configuration\n"
    )


def test_missing_table_and_empty_table_exit_1_with_a_hint(cli: Cli):
    code, _, err = cli("flows", "list")
    assert code == 1 and "config table srm-config does not exist" in err and "--create-tables" in err
    cli("config", "import", "mm2.properties", "--create-tables", "--dry-run")  # a dry run creates nothing
    assert cli("flows", "list")[0] == 1


def test_local_where_no_srm_run_ran_exits_1_saying_so(cli: Cli):
    code, _, err = cli("--local", "flows", "list")
    assert code == 1
    assert err.startswith("srm-control: no srm run has run in ") and "srm run --config FILE" in err
    assert len(err.splitlines()) == 1


def test_local_before_its_srm_run_found_the_state_exits_1_saying_so(cli: Cli, tmp_path: Path):
    (tmp_path / ".srm-local").mkdir()
    (tmp_path / "mm2.properties").write_text(MM2)
    (tmp_path / ".srm-local" / "config.path").write_text(f"{tmp_path / 'mm2.properties'}\n")
    code, _, err = cli("--local", "flows", "list")
    assert code == 1
    assert "has not found its state yet" in err and len(err.splitlines()) == 1


def test_local_and_state_of_exclude_endpoint_url(cli: Cli):
    code, _, err = cli("--local", "--endpoint-url", "http://127.0.0.1:1", "flows", "list")
    assert code == 2 and "--local and --endpoint-url exclude each other" in err


def test_unreachable_endpoint_exits_1_in_one_line(cli: Cli):
    code, _, err = cli("flows", "list", "--endpoint-url", f"http://127.0.0.1:{free_port()}")
    assert code == 1
    assert len(err.splitlines()) == 1 and "cannot read config table srm-config at http://127.0.0.1:" in err

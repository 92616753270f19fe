"""srm.control.edits's use cases on moto's DynamoDB: allow/deny list edits, flows, the conditional-write conflict."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError
from srm.control.edits import Control, ControlError, FilterEdit
from srm.errors import ConfigError

TABLE = "srm-config"
BASE = {
    "clusters": "a, b, c",
    "a.bootstrap.servers": "a:9092",
    "b.bootstrap.servers": "b:9092",
    "a->b.enabled": "true",
    "b->a.enabled": "false",
    "c->a.enabled": "false",
}


@pytest.fixture
def control() -> Iterator[Control]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(client, TABLE)
        yield Control(DynamoDBConfig(client, TABLE, cache_seconds=0), author="test")


def load(control: Control, **extra: str) -> None:
    control.import_config(SrmConfig.from_properties(Properties.of({**BASE, **extra})))


def stored(control: Control) -> dict[str, str]:
    return dict(control.store.read().properties())


def test_add_to_the_implicit_default_replaces_it_with_the_added_patterns(control: Control):
    # GIVEN a flow that sets no topics (MM2's default .* applies)
    load(control)

    # WHEN an operator adds two patterns, one comma-separated list style and one plain
    change = control.edit_filters("a", "b", "topics", FilterEdit(add=("orders.*", "payments")))

    # THEN the flow replicates exactly those (not "everything and those"), and the operator is told so
    assert change.written
    assert stored(control)["a->b.topics"] == "orders.*, payments"
    assert change.before.include.defined_by is None
    assert change.after.include.patterns == ("orders.*", "payments")
    assert any("default '.*'" in n for n in change.notes)
    # the deny list keeps MM2's defaults and is not written
    assert "a->b.topics.exclude" not in stored(control)


def test_add_to_an_explicit_match_all_keeps_it_and_says_it_changes_nothing(control: Control):
    load(control, **{"a->b.topics": ".*"})
    change = control.edit_filters("a", "b", "topics", FilterEdit(add=("orders",)))
    assert stored(control)["a->b.topics"] == ".*, orders"
    assert "'orders' is already matched by '.*' in a->b topics" in change.notes


def test_edit_of_an_inherited_value_starts_from_it_and_gives_the_flow_its_own(control: Control):
    # GIVEN topics set for every flow at the global level
    load(control, topics="orders, payments")

    # WHEN one pattern is removed from a->b
    change = control.edit_filters("a", "b", "topics", FilterEdit(remove=("payments",)))

    # THEN a->b gets its own list, the global one and the other flows are untouched
    props = stored(control)
    assert (props["a->b.topics"], props["topics"]) == ("orders", "orders, payments")
    assert change.before.include.origin("a", "b") == "inherited from topics"
    assert change.after.include.origin("a", "b") == "set on the flow"
    assert any("no longer apply" in n for n in change.notes)


def test_remove_of_a_listed_pattern_empties_the_list_and_says_so(control: Control):
    load(control, **{"a->b.topics": "orders"})
    change = control.edit_filters("a", "b", "topics", FilterEdit(remove=("orders",)))
    assert stored(control)["a->b.topics"] == ""
    assert change.after.include.patterns == ()
    assert any("is now empty" in n for n in change.notes)


def test_remove_of_a_name_still_matched_by_another_pattern_is_refused_and_writes_nothing(control: Control):
    # GIVEN topics = orders.* ; the operator removes "orders.eu", which is not in the list
    load(control, **{"a->b.topics": "orders.*"})
    before = control.store.read()

    # WHEN / THEN refused (orders.eu would still be replicated), with the hint to exclude it instead
    with pytest.raises(ControlError, match=r"'orders\.\*' there still selects it.*--add-exclude 'orders.eu'"):
        control.edit_filters("a", "b", "topics", FilterEdit(remove=("orders.eu",)))
    assert control.store.read() == before


def test_remove_of_an_absent_unmatched_pattern_is_a_no_op_with_a_note(control: Control):
    load(control, **{"a->b.topics": "orders"})
    change = control.edit_filters("a", "b", "topics", FilterEdit(remove=("payments",)))
    assert not change.written
    assert change.notes == ("'payments' is not in a->b topics: nothing to remove",)
    assert control.store.read().scope("flow#a->b").version == 1


def test_add_exclude_extends_the_default_deny_list(control: Control):
    load(control, **{"a->b.topics": "orders.*"})
    change = control.edit_filters("a", "b", "topics", FilterEdit(add_exclude=(r"orders\.tmp",)))
    assert stored(control)["a->b.topics.exclude"] == r".*[\-\.]internal, .*\.replica, __.*, orders\.tmp"
    assert change.after.exclude.patterns[-1] == r"orders\.tmp"


def test_add_of_an_excluded_or_internal_name_is_written_with_a_warning_note(control: Control):
    load(control, **{"a->b.topics": "orders", "a->b.topics.exclude": r".*\.tmp"})
    change = control.edit_filters("a", "b", "topics", FilterEdit(add=("x.tmp", "__consumer_offsets")))
    assert stored(control)["a->b.topics"] == "orders, x.tmp, __consumer_offsets"
    assert "'x.tmp' is also matched by a->b topics.exclude ('.*\\.tmp'): it stays excluded" in change.notes
    assert any("'__consumer_offsets' is an internal topic name" in n for n in change.notes)


def test_remove_exclude_of_a_name_still_excluded_by_another_pattern_is_refused(control: Control):
    load(control)
    with pytest.raises(ControlError, match=r"'__.\*' there still excludes it"):
        control.edit_filters("a", "b", "topics", FilterEdit(remove_exclude=("__offsets",)))


def test_groups_follow_the_same_rules_on_groups_and_groups_exclude(control: Control):
    load(control)
    control.edit_filters("a", "b", "groups", FilterEdit(add=("app-.*",), add_exclude=("app-test",)))
    props = stored(control)
    assert props["a->b.groups"] == "app-.*"
    assert props["a->b.groups.exclude"] == "console-consumer-.*, connect-.*, __.*, app-test"
    assert control.filters("a", "b", "groups").include.patterns == ("app-.*",)


@pytest.mark.parametrize(
    ("source", "target", "edit", "message"),
    [
        ("a", "b", FilterEdit(add=("orders.([",)), r"'orders\.\(\[' is not a valid regex"),
        ("a", "z", FilterEdit(add=("x",)), r"unknown cluster alias 'z' \(the target\); clusters: a, b, c"),
        ("a", "a", FilterEdit(add=("x",)), r"a->a: a flow needs two different clusters"),
        ("b", "c", FilterEdit(add=("x",)), r"flow b->c does not exist \(flows: a->b, b->a, c->a\)"),
        ("a", "b", FilterEdit(add=("x",), remove=("x",)), r"'x' is both added and removed"),
        ("a", "b", FilterEdit(), r"nothing to change"),
    ],
    ids=["bad-regex", "unknown-alias", "same-cluster", "unknown-flow", "add-and-remove", "empty"],
)
def test_bad_edit_raises_one_clear_error_and_writes_nothing(control: Control, source, target, edit, message):
    load(control)
    before = control.store.read()
    with pytest.raises(ControlError, match=message):
        control.edit_filters(source, target, "topics", edit)
    assert control.store.read() == before


def test_two_operators_editing_from_the_same_version_second_fails_and_nothing_is_lost(control: Control):
    # GIVEN two operators who read the same version of a->b
    load(control, **{"a->b.topics": "orders"})
    alice, bob = control.store.read(), control.store.read()

    # WHEN alice adds payments, then bob (still on the old version) adds refunds
    control.edit_filters("a", "b", "topics", FilterEdit(add=("payments",)), base=alice)
    with pytest.raises(ConfigConflictError, match=r"flow a->b changed since it was read.*nothing was written"):
        control.edit_filters("a", "b", "topics", FilterEdit(add=("refunds",)), base=bob)

    # THEN alice's edit stands; bob's retry applies on top of it, so neither edit is lost
    assert stored(control)["a->b.topics"] == "orders, payments"
    control.edit_filters("a", "b", "topics", FilterEdit(add=("refunds",)))
    assert stored(control)["a->b.topics"] == "orders, payments, refunds"
    assert control.store.read().scope("flow#a->b").version == 3


def test_flows_lists_every_flow_with_enabled_and_filters(control: Control):
    load(control, **{"a->b.topics": "orders"})
    flows = {f.name: f for f in control.flows()}
    assert list(flows) == ["a->b", "b->a", "c->a"]
    assert (flows["a->b"].enabled, flows["a->b"].topics.patterns, flows["a->b"].version) == (True, ("orders",), 1)
    assert (flows["b->a"].enabled, flows["b->a"].topics.defined_by) == (False, None)


def test_enable_and_disable_write_the_flow_and_a_repeat_writes_nothing(control: Control):
    load(control)
    assert control.set_enabled("b", "a", True).written
    assert stored(control)["b->a.enabled"] == "true"
    repeat = control.set_enabled("b", "a", True)
    assert (repeat.written, repeat.notes) == (False, ("already enabled",))
    assert control.set_enabled("a", "b", False).flow.enabled is False
    assert stored(control)["a->b.enabled"] == "false"


def test_enable_of_a_flow_whose_cluster_has_no_bootstrap_servers_fails_validation_and_writes_nothing(
    control: Control,
):
    # GIVEN c has no bootstrap servers (fine while c->a is disabled)
    load(control)
    before = control.store.read()

    # WHEN c->a is enabled / THEN the whole configuration is validated first, and nothing is written
    with pytest.raises(ConfigError, match=r"cluster 'c' has no bootstrap servers"):
        control.set_enabled("c", "a", True)
    assert control.store.read() == before


def test_import_dry_run_reports_the_diff_and_writes_nothing(control: Control):
    load(control, **{"a->b.topics": "orders"})
    before = control.store.read()
    new = SrmConfig.from_properties(Properties.of({**BASE, "a->b.topics": "payments", "replication.factor": "1"}))
    result = control.import_config(new, dry_run=True)
    assert (result.added, result.changed, result.removed) == (
        {"replication.factor": "1"},
        {"a->b.topics": ("orders", "payments")},
        {},
    )
    assert not result.written
    assert control.store.read() == before


def test_import_replaces_the_table_with_the_file(control: Control):
    load(control, **{"a->b.topics": "orders"})
    result = control.import_config(SrmConfig.from_properties(Properties.of({**BASE, "c->a.topics": "x"})))
    assert result.written and result.removed == {"a->b.topics": "orders"}
    assert stored(control) == {**BASE, "c->a.topics": "x"}


_SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'


def test_import_with_a_literal_secret_is_refused_and_writes_nothing(control: Control):
    load(control)
    before = control.store.read()
    secret = SrmConfig.from_properties(Properties.of({**BASE, "a.sasl.jaas.config": _SCRAM_JAAS}))
    with pytest.raises(ConfigError, match="never stores secrets"):
        control.import_config(secret)
    assert control.store.read() == before


def test_flows_of_an_empty_table_say_to_import_a_configuration_first(control: Control):
    from srm.config.store import ConfigStoreError

    with pytest.raises(ConfigStoreError, match="config table srm-config is empty: import a configuration first"):
        control.flows()

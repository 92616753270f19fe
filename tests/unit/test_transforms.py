"""Single Message Transforms on raw records (srm.core.transforms): every built-in transform and predicate, negation,
a chain's order, custom classes by dotted path, and the one-line errors of a chain that cannot be built."""

from __future__ import annotations

import pytest

from srm.core.events import PartitionBatch
from srm.core.transforms import TransformChain, TransformConfigError, TransformError, build_chain

CONNECT = "org.apache.kafka.connect.transforms."
Header = tuple[str, bytes | None]
Row = tuple[bytes | None, bytes | None, list[Header] | None]  # key, value, headers


def batch(rows: list[Row], topic: str = "orders", first: int = 10) -> PartitionBatch:
    return PartitionBatch(
        topic,
        3,
        list(range(first, first + len(rows))),
        [k for k, _, _ in rows],
        [v for _, v, _ in rows],
        [1_000 + i for i in range(len(rows))],
        [h for _, _, h in rows],
    )


def chain(**keys: str) -> TransformChain:
    """A chain from Connect's keys, written with '__' for '.' and '_' for '-' (``transforms__x__type``)."""
    named = {k.replace("__", "\0").replace("_", "-").replace("\0", "."): v for k, v in keys.items()}
    return build_chain({k: (v, k) for k, v in named.items()})


def rows_of(out: PartitionBatch) -> list[tuple[int, bytes | None, bytes | None, list[Header] | None]]:
    return list(zip(out.offsets, out.keys, out.values, out.headers, strict=True))


def config_error(**keys: str) -> TransformConfigError:
    with pytest.raises(TransformConfigError) as info:
        chain(**keys)
    assert "\n" not in str(info.value)
    return info.value


# -- built-in transforms and predicates ---------------------------------------------------------------------------
def test_filter_with_tombstone_predicate_drops_tombstones_keeps_order_offsets_and_timestamps():
    c = chain(
        transforms="drop",
        transforms__drop__type=CONNECT + "Filter",
        transforms__drop__predicate="tomb",
        predicates="tomb",
        predicates__tomb__type=CONNECT + "predicates.RecordIsTombstone",
    )
    out, dropped = c.apply(batch([(b"k0", b"v0", None), (b"k1", None, None), (b"k2", b"", [("h", None)])]))
    assert dropped == 1
    assert rows_of(out) == [(10, b"k0", b"v0", None), (12, b"k2", b"", [("h", None)])]  # an empty value is no tombstone
    assert (out.topic, out.partition, out.timestamps) == ("orders", 3, [1_000, 1_002])


def test_filter_without_predicate_drops_every_record():
    out, dropped = chain(transforms="all", transforms__all__type="Filter").apply(batch([(None, b"x", None)] * 3))
    assert (len(out), dropped) == (0, 3)


def test_insert_header_appends_literal_as_utf8_after_existing_duplicates_kept():
    c = chain(
        transforms="origin",
        transforms__origin__type=CONNECT + "InsertHeader",
        transforms__origin__header="origin",
        **{"transforms__origin__value.literal": "us-wést"},
    )
    out, _ = c.apply(batch([(None, b"v", [("origin", b"old"), ("x", None)]), (None, b"w", None)]))
    assert out.headers == [
        [("origin", b"old"), ("x", None), ("origin", "us-wést".encode())],
        [("origin", "us-wést".encode())],
    ]


def test_drop_headers_removes_every_named_header_others_kept_in_order():
    c = chain(transforms="strip", transforms__strip__type="DropHeaders", transforms__strip__headers="a, c")
    headers: list[Header] = [("a", b"1"), ("b", b"2"), ("a", None), ("c", b"3"), ("b", b"4")]
    out, dropped = c.apply(batch([(None, b"v", headers), (None, b"w", None), (None, b"x", [("b", b"5")])]))
    assert dropped == 0
    assert out.headers == [[("b", b"2"), ("b", b"4")], None, [("b", b"5")]]


def test_topic_name_matches_is_a_full_match():
    keys = {
        "transforms": "drop",
        "transforms__drop__type": "Filter",
        "transforms__drop__predicate": "audit",
        "predicates": "audit",
        "predicates__audit__type": CONNECT + "predicates.TopicNameMatches",
        "predicates__audit__pattern": "audit\\..*",
    }
    c = chain(**keys)
    assert c.apply(batch([(None, b"v", None)], topic="audit.log"))[1] == 1
    assert c.apply(batch([(None, b"v", None)], topic="x.audit.log"))[1] == 0  # matches(), not find()


def test_has_header_key_predicate_applies_only_to_records_with_the_header():
    c = chain(
        transforms="drop",
        transforms__drop__type="Filter",
        transforms__drop__predicate="internal",
        predicates="internal",
        predicates__internal__type="HasHeaderKey",
        predicates__internal__name="x-internal",
    )
    out, dropped = c.apply(
        batch([(None, b"a", [("x-internal", None)]), (None, b"b", [("x", b"")]), (None, b"c", None)])
    )
    assert (out.values, dropped) == ([b"b", b"c"], 1)


def test_negate_applies_the_stage_where_the_predicate_is_false():
    c = chain(
        transforms="keep-tombstones-only",
        transforms__keep_tombstones_only__type="Filter",
        transforms__keep_tombstones_only__predicate="tomb",
        transforms__keep_tombstones_only__negate="TRUE",
        predicates="tomb",
        predicates__tomb__type="RecordIsTombstone",
    )
    out, dropped = c.apply(batch([(b"k0", b"v", None), (b"k1", None, None)]))
    assert (out.keys, dropped) == ([b"k1"], 1)


def test_chain_applies_stages_in_order():
    # GIVEN the same two stages in both orders: stamp a header, then drop it (or drop it, then stamp it)
    stamp = {"type": "InsertHeader", "header": "h", "value.literal": "1"}
    strip = {"type": "DropHeaders", "headers": "h"}

    def keys(order: str) -> dict[str, tuple[str, str]]:
        out = {"transforms": (order, "transforms")}
        for name, params in (("stamp", stamp), ("strip", strip)):
            out |= {f"transforms.{name}.{k}": (v, f"transforms.{name}.{k}") for k, v in params.items()}
        return out

    # WHEN each chain runs on a record without headers
    stamped_last = build_chain(keys("strip, stamp")).apply(batch([(None, b"v", None)]))[0]
    stripped_last = build_chain(keys("stamp, strip")).apply(batch([(None, b"v", None)]))[0]
    # THEN the later stage sees what the earlier one made
    assert stamped_last.headers == [[("h", b"1")]]
    assert stripped_last.headers == [[]]


def test_predicate_decides_per_stage_a_filter_after_insert_sees_the_new_header():
    c = chain(
        transforms="stamp, drop",
        transforms__stamp__type="InsertHeader",
        transforms__stamp__header="seen",
        transforms__stamp__predicate="tomb",
        **{"transforms__stamp__value.literal": "y"},
        transforms__drop__type="Filter",
        transforms__drop__predicate="seen",
        predicates="tomb, seen",
        predicates__tomb__type="RecordIsTombstone",
        predicates__seen__type="HasHeaderKey",
        predicates__seen__name="seen",
    )
    out, dropped = c.apply(batch([(b"k0", None, None), (b"k1", b"v", None)]))
    assert (out.keys, dropped) == ([b"k1"], 1)


def test_empty_configuration_is_a_falsy_chain():
    assert not build_chain({})
    assert not chain(transforms=" ")
    assert chain(transforms="f", transforms__f__type="Filter")


def test_describe_names_each_stage_in_order():
    c = chain(
        transforms="drop, stamp",
        transforms__drop__type="Filter",
        transforms__drop__predicate="tomb",
        transforms__drop__negate="true",
        transforms__stamp__type="InsertHeader",
        transforms__stamp__header="origin",
        **{"transforms__stamp__value.literal": "west"},
        predicates="tomb",
        predicates__tomb__type="RecordIsTombstone",
    )
    assert c.describe() == ["drop: Filter unless tomb (RecordIsTombstone)", "stamp: InsertHeader origin=west"]


# -- custom classes -----------------------------------------------------------------------------------------------
def test_custom_transform_and_predicate_by_dotted_path_are_configured_and_applied():
    c = chain(
        transforms="rev, prefix",
        transforms__rev__type="tests.support.transforms.Reverse",
        transforms__rev__predicate="abc",
        transforms__prefix__type="tests.support.transforms.KeyPrefix",
        transforms__prefix__prefix="west:",
        predicates="abc",
        predicates__abc__type="tests.support.transforms.ValueStartsWith",
        predicates__abc__prefix="abc",
    )
    out, _ = c.apply(batch([(b"k", b"abcd", None), (None, b"xyz", None)]))
    assert (out.keys, out.values) == ([b"west:k", b"west:"], [b"dcba", b"xyz"])
    assert c.describe()[0] == "rev: tests.support.transforms.Reverse if abc (tests.support.transforms.ValueStartsWith)"


def test_transform_that_raises_fails_with_topic_partition_offset_and_stage():
    c = chain(transforms="x", transforms__x__type="tests.support.transforms.Explodes")
    with pytest.raises(TransformError) as info:
        c.apply(batch([(None, b"ok", None), (None, b"boom", None)]))
    assert (info.value.topic, info.value.partition, info.value.offset) == ("orders", 3, 11)
    assert str(info.value) == (
        "orders-3@11: transform x: tests.support.transforms.Explodes failed: RuntimeError: cannot handle boom"
    )


def test_transform_changing_the_topic_is_refused_routing_is_the_policys():
    c = chain(transforms="r", transforms__r__type="tests.support.transforms.Rerouter")
    with pytest.raises(TransformError, match=r"orders-3@10: .* never its topic, partition or offset"):
        c.apply(batch([(None, b"v", None)]))


# -- configuration errors -----------------------------------------------------------------------------------------
def test_missing_predicate_names_the_transform_key():
    e = config_error(transforms="f", transforms__f__type="Filter", transforms__f__predicate="nope")
    assert e.key == "transforms.f.predicate"
    assert "no predicate 'nope'" in str(e) and "predicates listed: none" in str(e)


def test_bad_regex_names_the_pattern_key():
    e = config_error(
        transforms="f",
        transforms__f__type="Filter",
        transforms__f__predicate="p",
        predicates="p",
        predicates__p__type="TopicNameMatches",
        predicates__p__pattern="orders.([",
    )
    assert e.key == "predicates.p.pattern" and "'orders.([' is not a valid regex" in str(e)


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"transforms__h__type": "InsertHeader", "transforms__h__value.literal": "v"}, "transforms.h.header"),
        ({"transforms__h__type": "InsertHeader", "transforms__h__header": "h"}, "transforms.h.value.literal"),
        ({"transforms__h__type": "DropHeaders", "transforms__h__headers": " , "}, "transforms.h.headers"),
        ({"transforms__h__type": "tests.support.transforms.KeyPrefix"}, "transforms.h.type"),
        ({}, "transforms.h.type"),
    ],
)
def test_missing_required_parameter_names_its_key(keys: dict[str, str], key: str):
    e = config_error(transforms="h", **keys)
    assert e.key == key
    assert "missing" in str(e) or "prefix is required" in str(e)


def test_predicate_without_type_is_an_error():
    e = config_error(transforms="f", transforms__f__type="Filter", predicates="p")
    assert e.key == "predicates.p.type"


def test_unknown_java_class_names_the_supported_ones():
    e = config_error(transforms="x", transforms__x__type="io.debezium.transforms.ExtractNewRecordState")
    assert e.key == "transforms.x.type"
    assert "unknown class io.debezium.transforms.ExtractNewRecordState" in str(e)
    assert "Filter, InsertHeader, DropHeaders" in str(e)


@pytest.mark.parametrize("name", [CONNECT + "RegexRouter", "TimestampRouter"])
def test_routers_are_refused_routing_is_the_replication_policys(name: str):
    e = config_error(transforms="r", transforms__r__type=name)
    assert "replication policy's job" in str(e) and "replication.policy.class" in str(e)


@pytest.mark.parametrize("name", [CONNECT + "HeaderFrom$Value", "HeaderFrom$Key", CONNECT + "InsertField$Value"])
def test_field_transforms_are_refused_raw_bytes_have_no_fields(name: str):
    e = config_error(transforms="f", transforms__f__type=name)
    assert "raw bytes" in str(e) and "no fields" in str(e)


def test_a_predicate_class_as_a_transform_is_named_as_such():
    e = config_error(transforms="f", transforms__f__type="RecordIsTombstone")
    assert "RecordIsTombstone is a predicate" in str(e)


def test_class_without_apply_is_refused():
    e = config_error(transforms="f", transforms__f__type="tests.support.transforms.TakesNoConfig")
    assert "not a class with an apply() method" in str(e)


def test_negate_must_be_a_boolean():
    e = config_error(
        transforms="f",
        transforms__f__type="Filter",
        transforms__f__predicate="p",
        transforms__f__negate="yes",
        predicates="p",
        predicates__p__type="RecordIsTombstone",
    )
    assert e.key == "transforms.f.negate"


def test_a_name_listed_twice_is_an_error():
    assert config_error(transforms="f, f", transforms__f__type="Filter").key == "transforms"

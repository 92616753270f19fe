"""srm.config.parsing: both file formats (mm2.properties and YAML) to one property map, each value with its origin."""

from __future__ import annotations

import textwrap

import pytest

from srm.config.parsing import parse_config_bytes, parse_properties_text, parse_yaml_text
from srm.config.settings import SrmConfig, load_file
from srm.errors import ConfigError
from tests.unit.config_files import properties_file

# The same two-cluster setup, in both formats: they must flatten to the same property map.
MM2_PROPERTIES = textwrap.dedent(
    """\
    # two clusters, one replication
    clusters = us-west, us-east
    us-west.bootstrap.servers = west-1:9092,west-2:9092
    us-east.bootstrap.servers = east-1:9092
    us-east.security.protocol = SASL_SSL
    us-east.producer.linger.ms = 5
    us-west->us-east.enabled = true
    us-west->us-east.topics = orders.*, payments
    us-west->us-east.emit.checkpoints.interval.seconds = 30
    replication.factor = 3
    """
)


YAML = textwrap.dedent(
    """\
    clusters:
      us-west:
        bootstrap.servers: west-1:9092,west-2:9092
      us-east:
        bootstrap:
          servers: east-1:9092
        security.protocol: SASL_SSL
        producer:
          linger.ms: 5
    flows:
      us-west->us-east:
        enabled: true
        topics: [orders.*, payments]
        emit.checkpoints.interval.seconds: 30
    replication.factor: 3
    """
)


def test_parse_properties_separators_equals_colon_space_all_give_key_value():
    props = properties_file("a.x=1", "a.y: 2", "a.z   3", "a.w\t=\t 4 ", "  a.v = spaced value  ")

    assert dict(props) == {"a.x": "1", "a.y": "2", "a.z": "3", "a.w": "4", "a.v": "spaced value"}


def test_parse_properties_comments_and_blank_lines_are_skipped_and_origins_count_every_line():
    props = properties_file("# comment = 1", "! bang: 2", "", "   ", "   # indented comment", "k = v")

    assert dict(props) == {"k": "v"}
    assert props.origin("k") == "mm2.properties:6"


def test_parse_properties_line_continuation_joins_lines_and_keeps_first_line_origin():
    # GIVEN a value continued over three lines (leading whitespace of continuation lines is dropped)
    props = properties_file(
        "first = 1", "topics = orders.*, \\", "    payments, \\", "      # not a comment", "last = 2"
    )

    assert props["topics"] == "orders.*, payments, # not a comment"
    assert props.origin("topics") == "mm2.properties:2"
    assert props.origin("last") == "mm2.properties:5"


def test_parse_properties_even_backslashes_do_not_continue_the_line():
    props = properties_file(r"path = C:\\", "next = 1")

    assert props["path"] == "C:\\"
    assert props["next"] == "1"


def test_parse_properties_comment_ending_in_backslash_does_not_swallow_next_line():
    props = properties_file("# a comment \\", "k = v")

    assert dict(props) == {"k": "v"}


def test_parse_properties_escapes_in_keys_and_values_are_decoded():
    props = properties_file(r"key\ with\:colon\=eq = tab\there\u00e9 \\ end", r"nl = a\nb")

    assert props["key with:colon=eq"] == "tab\there\u00e9 \\ end"
    assert props["nl"] == "a\nb"


def test_parse_properties_incomplete_unicode_escape_is_not_decoded_as_a_character():
    # GIVEN a \u escape with only three hex digits at the end of the value
    props = properties_file(r"k = \u00e")

    # THEN it is not silently read as U+000E
    assert "\x0e" not in props["k"]
    assert props["k"] == "u00e"


def test_parse_properties_empty_value_and_key_only_line_give_empty_string():
    props = properties_file("empty =", "bare")

    assert dict(props) == {"empty": "", "bare": ""}


def test_parse_properties_repeated_key_last_definition_wins_with_its_origin():
    props = properties_file("k = 1", "k = 2")

    assert props["k"] == "2"
    assert props.origin("k") == "mm2.properties:2"


def test_parse_yaml_and_mm2_properties_of_the_same_setup_give_the_same_property_map():
    from_yaml = parse_yaml_text(YAML, "srm.yaml")
    from_properties = parse_properties_text(MM2_PROPERTIES, "mm2.properties")

    assert dict(from_yaml) == dict(from_properties)
    cfg_yaml, cfg_props = SrmConfig.from_properties(from_yaml), SrmConfig.from_properties(from_properties)
    assert cfg_yaml.settings("us-west", "us-east") == cfg_props.settings("us-west", "us-east")
    assert cfg_yaml.flows == cfg_props.flows == (("us-west", "us-east"),)


def test_parse_yaml_origins_name_file_and_line_of_each_value():
    props = parse_yaml_text(YAML, "srm.yaml")

    assert props.origin("us-west.bootstrap.servers") == "srm.yaml:3"
    assert props.origin("us-east.bootstrap.servers") == "srm.yaml:6"
    assert props.origin("us-east.producer.linger.ms") == "srm.yaml:9"
    assert props.origin("us-west->us-east.topics") == "srm.yaml:13"
    assert props.origin("replication.factor") == "srm.yaml:15"


def test_parse_yaml_clusters_as_list_and_global_nested_maps_flatten_with_dots():
    props = parse_yaml_text(
        textwrap.dedent(
            """\
            clusters: [a, b]
            a:
              bootstrap.servers: a:9092
            producer:
              acks: all
              compression: {type: zstd}
            """
        )
    )

    assert dict(props) == {
        "clusters": "a, b",
        "a.bootstrap.servers": "a:9092",
        "producer.acks": "all",
        "producer.compression.type": "zstd",
    }


def test_parse_yaml_scalars_bools_numbers_nulls_and_quoted_strings_become_mm2_strings():
    props = parse_yaml_text(
        textwrap.dedent(
            """\
            clusters: {a: , b: ~}
            flows:
              a->b:
                enabled: yes
                sync.group.offsets.enabled: false
                offset.lag.max: 10
                emit.checkpoints.interval.seconds: 0.5
                topics: ["t1", 't2', t3]
                groups: "true"
                metadata: null
            """
        )
    )

    assert dict(props) == {
        "clusters": "a, b",
        "a->b.enabled": "true",
        "a->b.sync.group.offsets.enabled": "false",
        "a->b.offset.lag.max": "10",
        "a->b.emit.checkpoints.interval.seconds": "0.5",
        "a->b.topics": "t1, t2, t3",
        "a->b.groups": "true",
        "a->b.metadata": "",
    }


@pytest.mark.parametrize(
    ("text", "origin", "fragment"),
    [
        ("- a\n- b\n", "f.yaml:1", "top level must be a mapping"),
        ("clusters: [a, b\n", "f.yaml:2", "not valid YAML"),
        ("clusters:\n  a: [x]\n", "f.yaml:2", "clusters.a must be a mapping"),
        ("flows:\n  a->b: true\n", "f.yaml:2", "flows.a->b must be a mapping"),
        ("x:\n  y: [1, {z: 2}]\n", "f.yaml:2", "expected a value or a list"),
    ],
)
def test_parse_yaml_invalid_shapes_raise_config_error_with_origin(text, origin, fragment):
    with pytest.raises(ConfigError) as info:
        parse_yaml_text(text, "f.yaml")

    assert info.value.origin == origin
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{origin}: ")


def test_parse_yaml_empty_document_gives_empty_map():
    assert dict(parse_yaml_text("", "f.yaml")) == {}


@pytest.mark.parametrize("name", ["srm.yaml", "mm2.properties"])
def test_load_file_not_utf8_is_a_config_error_naming_file_line_byte_and_offset(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"clusters: a\n# caf\xe9\n")

    with pytest.raises(ConfigError) as info:
        load_file(path)

    assert str(info.value) == f"{path}:2: not UTF-8 text (byte 0xe9 at offset 17); save the file as UTF-8"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00", "not a text file (a NUL byte at offset 7)"),
        ("clusters: a".encode("utf-16"), "it looks like UTF-16: save it as UTF-8"),
    ],
)
def test_parse_config_bytes_binary_or_utf16_is_not_a_text_file(data, fragment):
    with pytest.raises(ConfigError, match=r"^srm\.yaml:1: ") as info:
        parse_config_bytes(data, "srm.yaml")

    assert fragment in str(info.value)


def test_parse_config_bytes_a_utf8_byte_order_mark_is_dropped():
    props = parse_config_bytes("\ufeffclusters = a, b\n".encode(), "mm2.properties")

    assert dict(props) == {"clusters": "a, b"}

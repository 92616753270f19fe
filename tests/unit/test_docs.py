"""The documentation against the code: the references are generated from it (docs/tooling/reference.py), and the
hand-written pages may only name settings, flags, metrics, alarms and make targets that exist. Every setting, metric
and alarm is described somewhere; the runnable blocks run; copies of example files equal the files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs.tooling import pages, reference
from srm.config.flow_settings import SETTING_KEYS
from srm.config.keys import GLOBAL_KEYS, is_known_key
from srm.metrics.model.names import EMF_METRICS, TABLE_ATTRIBUTES

ROOT = Path(__file__).resolve().parents[2]
ALL_KEYS = SETTING_KEYS | GLOBAL_KEYS
# Other programs' options the pages show (their own commands, beside srm's), each with its program.
FOREIGN_FLAGS = {
    "--bootstrap-server": "kafka-consumer-groups",
    "--reset-offsets": "kafka-consumer-groups",
    "--from-file": "kafka-consumer-groups",
    "--execute": "kafka-consumer-groups",
    "--build-dir": "sam build",
    "--parameter-overrides": "sam build, sam deploy",
    "--config-file": "sam deploy",
    "--lint": "sam validate",
    "--extra-py-files": "AWS Glue's job arguments",
    "--service": "awscurl",
    "--name": "aws-sigv4-proxy",
    "--host": "aws-sigv4-proxy",
    "--runtime-interface-emulator-address": "aws-lambda-rie",
    "--strict": "mkdocs build",
}
# Names shaped like a setting that are not one, each with what it is.
NOT_SETTINGS = {
    "errors.tolerence": "the misspelt key of the unknown-key warning's example",
    "config.path": "a file of .srm-local/",
}
# Names shaped like a metric that are not one, each with what it is.
NOT_METRICS = {
    "DeleteRecords": "Kafka's admin API call",
    "replication-offsets": "srm-control's command",
    "connect-offsets": "Apache Kafka's documented Connect offsets topic (srm takeover --connectors)",
    "connect-cluster-offsets": "Strimzi's default Connect offsets topic (srm takeover --connectors)",
}
_SETTING = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$")
_FLOW_PREFIX = re.compile(r"^(<[^>]+>|[\w-]+)->(<[^>]+>|[\w-]+)\.")
_FAMILIES = {k.split(".")[0] for k in ALL_KEYS}


def _hand_written() -> dict[str, str]:
    return pages.pages()


def _setting_of(token: str) -> str | None:
    """The key a backquoted token names, with its level's prefix taken off; None: not shaped like srm's settings."""
    token = _FLOW_PREFIX.sub("", token.strip())
    token = re.sub(r"^<[^>]+>\.", "", token)
    if not _SETTING.match(token) or token.endswith((".internal", ".py")):  # topic and file names
        return None
    if token.split(".")[0] in _FAMILIES:
        return token
    alias, _, rest = token.partition(".")  # `us-west.topics`: a cluster's level
    alias_shaped = "-" in alias or alias in ("a", "b", "c")
    return rest if alias_shaped and _SETTING.match(rest) and rest.split(".")[0] in _FAMILIES else None


def _named_settings() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for page, text in _hand_written().items():
        for span in pages.code_spans(text):
            for word in re.split(r"[\s=:,()]+", span):
                key = _setting_of(word)
                if key is not None:
                    found.setdefault(key, set()).add(page)
    return found


# ---------------------------------------------------------------------------------------------------------------
# The generated references
# ---------------------------------------------------------------------------------------------------------------
def test_every_marker_names_a_generator_and_every_generator_renders() -> None:
    markers = {m for text in _hand_written().values() for m in re.findall(r"^<!-- generated: (\w+) -->$", text, re.M)}
    assert markers == set(reference.GENERATORS)
    assert [name for name, generate in reference.GENERATORS.items() if not generate().strip()] == []


# ---------------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------------
def test_settings_every_key_has_a_description_and_every_description_a_key() -> None:
    described = reference.setting_docs()
    assert sorted(ALL_KEYS - set(described)) == [], "describe them in docs/tooling/settings.yaml"
    assert sorted(set(described) - ALL_KEYS) == [], "no such setting: remove it from docs/tooling/settings.yaml"
    assert [k for k, d in described.items() if not d.get("meaning") or not d.get("mm2")] == []


def test_settings_reference_lists_every_key_with_its_default() -> None:
    assert set(reference._global_defaults()) == set(GLOBAL_KEYS), "say how a new global key's default is read"
    text = reference.settings_reference()
    assert [k for k in sorted(ALL_KEYS) if f"| `{k}` |" not in text] == []


def test_settings_named_in_a_page_exist() -> None:
    unknown = {
        key: sorted(where)
        for key, where in _named_settings().items()
        if key not in NOT_SETTINGS and key not in GLOBAL_KEYS and not is_known_key(key)
    }
    assert unknown == {}


# ---------------------------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------------------------
def _bench_flags() -> set[str]:
    """`python -m bench` and its modules' options, as their parsers add them."""
    return {
        flag
        for path in (ROOT / "bench").glob("*.py")
        for flag in re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", path.read_text(encoding="utf-8"))
    }


def test_cli_flags_named_in_a_page_exist() -> None:
    known = set().union(*reference.cli_flags().values()) | _bench_flags() | set(FOREIGN_FLAGS)
    named = {
        (flag, page)
        for page, text in _hand_written().items()
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9](?![\w-])", text)
    }
    assert sorted(f"{flag} ({page})" for flag, page in named if flag not in known) == []


def test_cli_every_option_says_what_it_does() -> None:
    # the reference shows each option with its help: an option without one would be listed undescribed
    undescribed = [
        f"{sub.prog} {'/'.join(a.option_strings)}"
        for parser in reference._parsers().values()
        for sub in reference._walk(parser)
        for a in sub._actions
        if a.option_strings and not a.help
    ]
    assert undescribed == []


def test_cli_reference_shows_every_command_and_option() -> None:
    text = reference.cli_reference()
    for parser in reference._parsers().values():
        for sub in reference._walk(parser):
            assert f"`{sub.prog}`" in text
            shown = {s for a in sub._actions if a.help != "==SUPPRESS==" for s in a.option_strings}
            assert [s for s in shown if s not in text] == [], sub.prog


# ---------------------------------------------------------------------------------------------------------------
# Metrics and alarms
# ---------------------------------------------------------------------------------------------------------------
_CAMEL = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]+)+$")
_KEBAB = re.compile(r"^[a-z]+(?:-[a-z]+)+$")


def _metric_shaped(token: str) -> bool:
    """Shaped like one of srm's metric or alarm names: CamelCase or kebab-case ending as one of theirs does."""
    camel_ends = {re.findall(r"[A-Z][a-z]+", m)[-1] for m in EMF_METRICS} | {"Alarm"}
    kebab_ends = {a.rsplit("-", 1)[-1] for a in TABLE_ATTRIBUTES}
    if _CAMEL.match(token):
        return re.findall(r"[A-Z][a-z]+", token)[-1] in camel_ends
    return bool(_KEBAB.match(token)) and token.rsplit("-", 1)[-1] in kebab_ends


def test_metrics_and_alarms_named_in_a_page_exist() -> None:
    exist = set(EMF_METRICS) | set(TABLE_ATTRIBUTES) | set(reference.template_alarms()) | reference.template_names()
    named = {
        (token, page)
        for page, text in _hand_written().items()
        for span in pages.code_spans(text)
        for token in re.split(r"[^\w-]+", span)
        if _metric_shaped(token) and token not in NOT_METRICS
    }
    assert sorted(f"{token} ({page})" for token, page in named if token not in exist) == []


def test_metrics_and_alarms_are_each_described_in_a_page() -> None:
    text = "\n".join(_hand_written().values())
    names = [*EMF_METRICS, *reference.template_alarms()]
    assert [n for n in names if not re.search(rf"`{n}`", text)] == [], "describe them in docs/guides/monitoring.md"
    generated = reference.metrics_reference()
    assert [n for n in [*names, *TABLE_ATTRIBUTES] if f"`{n}`" not in generated] == []


# ---------------------------------------------------------------------------------------------------------------
# Make targets, copies, runnable blocks, the front door
# ---------------------------------------------------------------------------------------------------------------
def test_make_targets_named_in_a_page_exist() -> None:
    targets = reference.make_targets()
    named = {
        (target, page)
        for page, text in _hand_written().items()
        for span in pages.code_spans(text)
        for target in re.findall(r"(?<![\w-])make ([a-z][\w-]*)", span)
    }
    assert sorted(f"make {t} ({page})" for t, page in named if t not in targets) == []


@pytest.mark.parametrize("block", pages.copied_blocks(), ids=str)
def test_a_copy_of_an_example_file_equals_the_file(block: pages.Block) -> None:
    assert block.body == (ROOT / str(block.path)).read_text(encoding="utf-8")


@pytest.mark.parametrize("block", [b for b in pages.runnable_blocks() if b.needs is None], ids=str)
def test_a_runnable_block_runs(block: pages.Block, tmp_path: Path) -> None:
    done = pages.run(block, tmp_path)
    assert done.returncode == 0, f"{block}:\n{done.stdout}\n{done.stderr}"


def test_the_runnable_blocks_need_only_what_the_suite_provides() -> None:
    assert {b.needs for b in pages.runnable_blocks()} <= {None, "clusters"}


def test_the_front_door_is_small_and_links_to_pages_that_exist() -> None:
    front = pages.FRONT_DOOR
    assert front.stat().st_size <= 10 * 1024
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", front.read_text(encoding="utf-8"))
    assert [link for link in links if "://" not in link and not (ROOT / link).is_file()] == []

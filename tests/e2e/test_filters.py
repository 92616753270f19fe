"""Topic filters through `srm run`: allow and deny lists, and internal topics that are never data."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import assert_identical, create_topic_with_records, list_topic_names, unique, wait_replicated
from tests.support.runtime import srm_run

pytestmark = pytest.mark.e2e

INTERNAL = ("__x", ".hidden", "foo.internal", "bar-internal", "mm2-thing", "srm-thing")


def test_allow_and_deny_lists_replicate_only_allowed_and_not_denied_topics(clusters, tmp_path: Path):
    # GIVEN four topics: two allowed, one allowed but denied, one not allowed
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("flt")
    allowed = [f"{p}.keep", f"{p}.also"]
    denied = [f"{p}.keep-secret", f"{p}.other"]
    for topic in allowed + denied:
        create_topic_with_records(a, topic, 1, 30)
    flow = {"topics": [f"{p}\\.keep.*", f"{p}\\.also"], "topics.exclude": [f"{p}\\..*-secret"]}

    # WHEN srm run has replicated the allowed ones and run a few more refresh intervals
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}) as run:
        for topic in allowed:
            wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        time.sleep(3)
        assert run.alive(), run.output()[-2000:]

    # THEN exactly the allowed-and-not-denied topics have remote topics
    assert {t for t in list_topic_names(b) if p in t} == {f"a.{t}" for t in allowed}
    for topic in allowed:
        assert_identical(a, topic, b, f"a.{topic}")


@pytest.mark.parametrize(
    ("exclude", "also_excluded"),
    [(None, ("baz.replica",)), ("", ())],
    ids=["default-exclude", "empty-exclude"],
)
def test_internal_topics_with_match_all_filter_never_replicated(
    fresh_clusters, tmp_path: Path, exclude: str | None, also_excluded: tuple[str, ...]
):
    # GIVEN internal topics, baz.replica (excluded by MM2's default topics.exclude only) and a plain topic on a
    a, b = fresh_clusters["a"].bootstrap, fresh_clusters["b"].bootstrap
    for topic in (*INTERNAL, "baz.replica", "visible"):
        create_topic_with_records(a, topic, 1, 10)
    flow = {"topics": ".*"} if exclude is None else {"topics": ".*", "topics.exclude": exclude}

    # WHEN a flow selecting every topic runs for several refresh intervals
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}) as run:
        wait_replicated(a, "visible", b, "a.visible", timeout=120)
        if not also_excluded:
            wait_replicated(a, "baz.replica", b, "a.baz.replica", timeout=60)
        time.sleep(3)
        assert run.alive(), run.output()[-2000:]

    # THEN no internal topic has a remote topic, whatever topics.exclude says
    on_b = list_topic_names(b)
    leaked = {t for t in on_b for name in (*INTERNAL, *also_excluded) if t.endswith(name) and t.startswith("a.")}
    assert not leaked, f"internal topics replicated: {sorted(leaked)}"
    bookkeeping = {"a.heartbeats", "a.checkpoints.internal"}  # MM2's, for flow a->b
    replicated = {t for t in on_b if t.startswith("a.") and t not in bookkeeping}
    assert replicated == {"a.visible"} | ({"a.baz.replica"} if not also_excluded else set())
    assert_identical(a, "visible", b, "a.visible")

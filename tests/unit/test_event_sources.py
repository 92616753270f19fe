"""srm.aws.lambda_mappings: the mapping lifecycle decision, and the Lambda API adapter checked with botocore's Stubber
(which validates every request against the Lambda API model; moto rejects MSK event source mappings)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from srm.aws.lambda_mappings import LambdaEventSources, LambdaMappingSwitch
from srm.config.settings import FlowSettings
from srm.core.plans import MappingChange, MappingConfig, ObservedMapping, TopicPlan, decide_mappings, mapping_group_id
from srm.replication.mappings import EventSourceMappingError, sync_mappings

CFG = MappingConfig(100, 500)
U1, U2, U3, U9 = (f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3, 9))
OTHER = MappingConfig(500, 500)
FUNCTION = "arn:aws:lambda:us-west-2:111122223333:function:srm-a-b-mirror"
CLUSTER = "arn:aws:kafka:us-west-2:111122223333:cluster/a/5f2a8c1e-3d4b-4a6f-9c0e-7b1d2e3f4a5b-3"


def mapping(topic: str, id_: str = "", config: MappingConfig = CFG, enabled: bool = True, busy: bool = False):
    return ObservedMapping(id_ or f"id-{topic}", topic, config, enabled, busy)


def actions(changes: list[MappingChange]) -> list[tuple[str, str]]:
    return [(c.action, c.topic) for c in changes]


# -- the decision -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wanted", "source_topics", "observed", "expected"),
    [
        pytest.param({"t": CFG}, {"t"}, [], [("create", "t")], id="new-topic-created"),
        pytest.param({"t": CFG}, {"t"}, [mapping("t")], [], id="in-step-kept"),
        pytest.param({"t": CFG}, {"t"}, [mapping("t", config=OTHER)], [("update", "t")], id="settings-updated"),
        pytest.param({"t": CFG}, {"t"}, [mapping("t", enabled=False)], [("update", "t")], id="reenabled"),
        pytest.param({}, {"t"}, [mapping("t")], [("disable", "t")], id="left-filter-disabled"),
        pytest.param({}, {"t"}, [mapping("t", enabled=False)], [], id="disabled-stays-disabled"),
        pytest.param({}, set(), [mapping("t")], [("delete", "t")], id="gone-deleted"),
        pytest.param({}, set(), [mapping("t", enabled=False)], [("delete", "t")], id="gone-disabled-deleted"),
        pytest.param({}, set(), [mapping("t", busy=True)], [], id="busy-left-alone"),
        pytest.param({"t": CFG}, {"t"}, [mapping("t", config=OTHER, busy=True)], [], id="busy-not-updated"),
        pytest.param(
            {"t": CFG},
            {"t"},
            [mapping("t", "b"), mapping("t", "a", enabled=False)],
            [("delete", "t")],
            id="duplicate-deleted-enabled-kept",
        ),
    ],
)
def test_decide_mappings_follows_the_lifecycle(wanted, source_topics, observed, expected):
    assert actions(decide_mappings(wanted, source_topics, observed)) == expected


def test_decide_mappings_duplicate_keeps_enabled_one_and_deletes_the_other():
    changes = decide_mappings({"t": CFG}, {"t"}, [mapping("t", "b"), mapping("t", "a", enabled=False)])
    assert [c.mapping.id for c in changes if c.mapping] == ["a"]


def test_decide_mappings_applied_result_decides_nothing_more():
    # GIVEN every kind of change WHEN the decided state is observed again THEN nothing is left to do
    observed = [mapping("keep"), mapping("stale", config=OTHER), mapping("out"), mapping("gone")]
    wanted = {"keep": CFG, "stale": CFG, "new": CFG}
    changes = decide_mappings(wanted, {"keep", "stale", "new", "out"}, observed)
    assert sorted(actions(changes)) == [("create", "new"), ("delete", "gone"), ("disable", "out"), ("update", "stale")]
    after = [mapping("keep"), mapping("stale"), mapping("out", enabled=False), mapping("new")]
    assert decide_mappings(wanted, {"keep", "stale", "new", "out"}, after) == []


# -- the Lambda API adapter ----------------------------------------------------------------------------------------
@pytest.fixture
def lam() -> Iterator[tuple[LambdaEventSources, Stubber]]:
    client = boto3.client("lambda", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield LambdaEventSources(client, FUNCTION, CLUSTER), stubber
        stubber.assert_no_pending_responses()


def esm(topic: str, uuid: str, state: str = "Enabled", batch: int = 100, window: int = 0, group: str = "") -> dict:
    return {
        "UUID": uuid,
        "Topics": [topic],
        "State": state,
        "BatchSize": batch,
        "MaximumBatchingWindowInSeconds": window,
        "FunctionArn": FUNCTION,
        "EventSourceArn": CLUSTER,
        "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": group or mapping_group_id("a", "b", topic)},
    }


def expect_list(stubber: Stubber, mappings: list[dict[str, Any]]) -> None:
    stubber.add_response(
        "list_event_source_mappings",
        {"EventSourceMappings": mappings},
        {"FunctionName": FUNCTION, "EventSourceArn": CLUSTER},
    )


def expect_create_orders(stubber: Stubber, **extra: Any) -> None:
    """The create request of topic ``orders``'s mapping: one topic, TRIM_HORIZON, its group, its tags."""
    stubber.add_response(
        "create_event_source_mapping",
        esm("orders", U1, state="Creating"),
        {
            "FunctionName": FUNCTION,
            "EventSourceArn": CLUSTER,
            "Topics": ["orders"],
            "StartingPosition": "TRIM_HORIZON",
            "Enabled": True,
            "BatchSize": 100,
            "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "srm-mirror.a-b.orders"},
            "Tags": {"srm:source": "a", "srm:target": "b", "srm:topic": "orders"},
            **extra,
        },
    )


def plan(replicated: list[str], source_topics: list[str]) -> TopicPlan:
    return TopicPlan({t: (f"a.{t}", 1) for t in replicated}, frozenset(source_topics))


SETTINGS = FlowSettings.model_validate(
    {"enabled": True, "event.source.batch.size": 100, "event.source.batching.window.ms": 500}
)


def test_lambda_create_sends_one_topic_msk_mapping_with_group_tags_and_trim_horizon(lam):
    # GIVEN a replicated topic with no mapping
    port, stubber = lam
    expect_list(stubber, [])
    expect_create_orders(stubber)
    # WHEN the mappings are synced THEN it is created (a sub-second window leaves MSK's 500 ms default)
    result = sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), SETTINGS)
    assert result.summary() == {"create": ["orders"]}
    assert result.mappings["orders"].id == U1


def test_lambda_create_starts_at_latest_when_the_source_consumer_resets_to_latest(lam):
    # GIVEN a new topic of a flow whose source consumer has auto.offset.reset = latest
    port, stubber = lam
    expect_list(stubber, [])
    expect_create_orders(stubber, StartingPosition="LATEST")
    # WHEN the mappings are synced THEN it starts from now, as MM2's consumer would
    result = sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), SETTINGS, start_from="latest")
    assert result.summary() == {"create": ["orders"]}


def test_lambda_switch_turns_mappings_off_and_on_retrying_a_busy_one():
    client = boto3.client("lambda", region_name="us-west-2")
    with Stubber(client) as stubber:
        busy = {"service_error_code": "ResourceInUseException", "expected_params": {"UUID": U1, "Enabled": False}}
        stubber.add_client_error("update_event_source_mapping", **busy)
        for uuid in (U1, U2):
            stubber.add_response("update_event_source_mapping", esm("t", uuid), {"UUID": uuid, "Enabled": False})
        LambdaMappingSwitch(client, sleep=lambda _: None).set_enabled([U1, U2], False)
        stubber.assert_no_pending_responses()


def test_lambda_mappings_in_step_second_run_makes_no_write_call(lam):
    # GIVEN mappings exactly as wanted, plus one of another flow's group on the same function
    port, stubber = lam
    expect_list(stubber, [esm("orders", U1), esm("x", U9, group="someone-else")])
    # WHEN synced THEN only the list call happens (Stubber fails on any unexpected call)
    result = sync_mappings(port, "a", "b", plan(["orders"], ["orders", "x"]), SETTINGS)
    assert result.applied == [] and set(result.mappings) == {"orders"}


def test_lambda_filter_change_disables_gone_topic_deletes_new_settings_update(lam):
    # GIVEN three mappings: a topic now excluded, a topic deleted on the source, one with an old batch size
    port, stubber = lam
    expect_list(stubber, [esm("out", U1), esm("gone", U2), esm("kept", U3, batch=10, window=5)])
    stubber.add_response("delete_event_source_mapping", esm("gone", U2, state="Deleting"), {"UUID": U2})
    stubber.add_response(
        "update_event_source_mapping",
        esm("kept", U3, state="Updating"),
        {"UUID": U3, "Enabled": True, "BatchSize": 100, "MaximumBatchingWindowInSeconds": 0},
    )
    stubber.add_response(
        "update_event_source_mapping", esm("out", U1, state="Disabling"), {"UUID": U1, "Enabled": False}
    )
    # WHEN synced
    result = sync_mappings(port, "a", "b", plan(["kept"], ["kept", "out"]), SETTINGS)
    # THEN disable, delete and update, each once
    assert result.summary() == {"delete": ["gone"], "update": ["kept"], "disable": ["out"]}
    assert set(result.mappings) == {"kept", "out"} and not result.mappings["out"].enabled


def test_lambda_busy_mapping_is_retried_next_run_not_failed(lam):
    port, stubber = lam
    expect_list(stubber, [esm("gone", U2)])
    stubber.add_client_error("delete_event_source_mapping", "ResourceInUseException", http_status_code=400)
    result = sync_mappings(port, "a", "b", plan([], []), SETTINGS)
    assert result.applied == [] and result.pending == [f"delete gone ({U2})"]


def test_lambda_create_conflict_is_taken_as_already_there(lam):
    port, stubber = lam
    expect_list(stubber, [])
    stubber.add_client_error("create_event_source_mapping", "ResourceConflictException", http_status_code=409)
    result = sync_mappings(port, "a", "b", plan(["t"], ["t"]), SETTINGS)
    assert result.pending == ["create t"]


def test_lambda_other_errors_fail_the_sync_after_trying_every_change(lam):
    # GIVEN two topics to create, the first refused by Lambda
    port, stubber = lam
    expect_list(stubber, [])
    stubber.add_client_error("create_event_source_mapping", "InvalidParameterValueException", http_status_code=400)
    stubber.add_response("create_event_source_mapping", esm("u", U2, state="Creating"))
    # WHEN synced THEN the second is still created and the error names the first
    with pytest.raises(EventSourceMappingError, match="create t"):
        sync_mappings(port, "a", "b", plan(["t", "u"], ["t", "u"]), SETTINGS)


def test_lambda_window_in_whole_seconds_sets_window_and_matches_listing(lam):
    # GIVEN a 2.4 s batching window WHEN the mapping is created THEN it asks for 2 s; listed back it is in step
    port, stubber = lam
    settings = FlowSettings.model_validate({"enabled": True, "event.source.batching.window.ms": 2400})
    expect_list(stubber, [])
    stubber.add_response(
        "create_event_source_mapping",
        esm("t", U1, state="Creating", batch=10_000, window=2),
        {
            "FunctionName": FUNCTION,
            "EventSourceArn": CLUSTER,
            "Topics": ["t"],
            "StartingPosition": "TRIM_HORIZON",
            "Enabled": True,
            "BatchSize": 10_000,  # srm's default: Lambda's 100 spreads an invocation's fixed cost over few records
            "MaximumBatchingWindowInSeconds": 2,
            "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "srm-mirror.a-b.t"},
            "Tags": ANY,
        },
    )
    sync_mappings(port, "a", "b", plan(["t"], ["t"]), settings)
    expect_list(stubber, [esm("t", U1, batch=10_000, window=2)])
    assert sync_mappings(port, "a", "b", plan(["t"], ["t"]), settings).applied == []


def test_lambda_disabled_flow_pauses_every_mapping_and_creates_none(lam):
    # GIVEN a flow disabled with `srm-control flows disable` while its topics are still selected
    port, stubber = lam
    expect_list(stubber, [esm("orders", U1), esm("paused", U2, state="Disabled")])
    stubber.add_response(
        "update_event_source_mapping", esm("orders", U1, state="Disabling"), {"UUID": U1, "Enabled": False}
    )
    disabled = SETTINGS.model_copy(update={"enabled": False})
    # WHEN synced THEN the enabled mapping is disabled (not deleted: enabling resumes it), nothing is created
    result = sync_mappings(port, "a", "b", plan(["orders", "paused", "new"], ["orders", "paused", "new"]), disabled)
    assert result.summary() == {"disable": ["orders"]}


def test_lambda_create_with_scram_secret_sends_source_access_configuration():
    # GIVEN a stack deployed with SourceAuth=SASL_SCRAM_512_AUTH and the secret's ARN
    secret = "arn:aws:secretsmanager:us-west-2:111122223333:secret:AmazonMSK_srm-west-AbCdEf"
    client = boto3.client("lambda", region_name="us-west-2")
    port = LambdaEventSources(client, FUNCTION, CLUSTER, ("SASL_SCRAM_512_AUTH", secret))
    with Stubber(client) as stubber:
        expect_list(stubber, [])
        expect_create_orders(stubber, SourceAccessConfigurations=[{"Type": "SASL_SCRAM_512_AUTH", "URI": secret}])
        # WHEN a mapping is created THEN it carries the credentials MSK reads from Secrets Manager
        assert sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), SETTINGS).summary() == {"create": ["orders"]}
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize(("kind", "secret"), [("SASL_SCRAM_512_AUTH", ""), ("KERBEROS", "arn:x")])
def test_environment_mapping_auth_without_secret_or_unknown_kind_is_a_config_error(kind, secret):
    from srm.app import Environment
    from srm.errors import ConfigError

    with pytest.raises(ConfigError, match="SRM_SOURCE_AUTH"):
        Environment.from_env({"SRM_SOURCE_AUTH": kind, "SRM_SOURCE_SECRET_ARN": secret})


def test_group_ids_fit_lambdas_limit_stay_unique_and_keep_short_names() -> None:
    assert mapping_group_id("us-west", "us-east", "orders") == "srm-mirror.us-west-us-east.orders"  # unchanged
    longest = "t" * 249  # Kafka's longest topic name
    ids = {mapping_group_id("us-west", "us-east", longest[:n] + suffix) for n in (200, 249) for suffix in ("", "x")}
    assert len(ids) == 4 and all(len(i) <= 200 for i in ids)
    assert all(i.startswith("srm-mirror.us-west-us-east.ttt") for i in ids)
    exactly = "o" * (200 - len("srm-mirror.a-b."))
    assert mapping_group_id("a", "b", exactly) == f"srm-mirror.a-b.{exactly}"


def test_lambda_update_keeps_msks_default_window_as_create_does(lam):
    # GIVEN a mapping created with a sub-second window (MSK's 500 ms default) and now a new batch size
    port, stubber = lam
    expect_list(stubber, [esm("t", U1, batch=10, window=0)])
    # WHEN updated THEN the window is not sent: it stays MSK's default instead of drifting to 0
    stubber.add_response(
        "update_event_source_mapping", esm("t", U1, state="Updating"), {"UUID": U1, "Enabled": True, "BatchSize": 100}
    )
    assert sync_mappings(port, "a", "b", plan(["t"], ["t"]), SETTINGS).summary() == {"update": ["t"]}


# -- failure handling: the on-failure destination and the problems Lambda reports ----------------------------------
BUCKET = "arn:aws:s3:::srm-a-b-deadletterbucket"
DEAD_LETTER = SETTINGS.model_copy(update={"event_source_on_failure": "dead-letter", "event_source_max_retries": 3})


def with_failure(m: dict[str, Any], destination: str = BUCKET, retries: int = 3) -> dict[str, Any]:
    return {**m, "DestinationConfig": {"OnFailure": {"Destination": destination}}, "MaximumRetryAttempts": retries}


@pytest.fixture
def lam_dlq() -> Iterator[tuple[LambdaEventSources, Stubber]]:
    client = boto3.client("lambda", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield LambdaEventSources(client, FUNCTION, CLUSTER, failure_destination=BUCKET), stubber
        stubber.assert_no_pending_responses()


def test_dead_letter_flow_creates_mappings_with_the_destination_and_retry_bound(lam_dlq):
    # GIVEN event.source.on.failure = dead-letter, 3 retries, and the stack's bucket as destination
    port, stubber = lam_dlq
    expect_list(stubber, [])
    expect_create_orders(stubber, DestinationConfig={"OnFailure": {"Destination": BUCKET}}, MaximumRetryAttempts=3)
    # WHEN synced THEN the mapping is created with both; listed back with them it is in step (no write)
    sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), DEAD_LETTER)
    expect_list(stubber, [with_failure(esm("orders", U1))])
    assert sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), DEAD_LETTER).applied == []


def test_dead_letter_default_retries_leave_lambdas_bound_unsent(lam_dlq):
    port, stubber = lam_dlq
    settings = SETTINGS.model_copy(update={"event_source_on_failure": "dead-letter"})
    expect_list(stubber, [])
    expect_create_orders(stubber, DestinationConfig={"OnFailure": {"Destination": BUCKET}})
    assert sync_mappings(port, "a", "b", plan(["orders"], ["orders"]), settings).summary() == {"create": ["orders"]}


def test_drifted_destination_or_retries_are_corrected(lam_dlq):
    # GIVEN a mapping whose destination was changed by hand and one whose retry bound was
    port, stubber = lam_dlq
    other = "arn:aws:sqs:us-west-2:111122223333:elsewhere"
    expect_list(stubber, [with_failure(esm("t", U1), destination=other), with_failure(esm("u", U2), retries=7)])
    for uuid, topic in ((U1, "t"), (U2, "u")):
        stubber.add_response(
            "update_event_source_mapping",
            with_failure(esm(topic, uuid, state="Updating")),
            {
                "UUID": uuid,
                "Enabled": True,
                "BatchSize": 100,
                "DestinationConfig": {"OnFailure": {"Destination": BUCKET}},
                "MaximumRetryAttempts": 3,
            },
        )
    # WHEN synced THEN both are set back to the flow's
    assert sync_mappings(port, "a", "b", plan(["t", "u"], ["t", "u"]), DEAD_LETTER).summary() == {"update": ["t", "u"]}


def test_retry_flow_removes_a_destination_so_nothing_is_skipped(lam_dlq):
    # GIVEN a flow back to event.source.on.failure = retry whose mapping still has a destination and a bound
    port, stubber = lam_dlq
    expect_list(stubber, [with_failure(esm("t", U1))])
    # WHEN synced THEN the destination is removed (empty) and retries are unbounded again
    stubber.add_response(
        "update_event_source_mapping",
        esm("t", U1, state="Updating"),
        {
            "UUID": U1,
            "Enabled": True,
            "BatchSize": 100,
            "DestinationConfig": {"OnFailure": {"Destination": ""}},
            "MaximumRetryAttempts": -1,
        },
    )
    assert sync_mappings(port, "a", "b", plan(["t"], ["t"]), SETTINGS).summary() == {"update": ["t"]}


def test_dead_letter_without_a_destination_is_a_one_line_config_error(lam):
    from srm.errors import ConfigError

    port, _ = lam
    with pytest.raises(ConfigError, match="MappingFailureDestinationArn") as e:
        port.desired_config(DEAD_LETTER)
    assert "\n" not in str(e.value)


def test_environment_passes_the_failure_destination():
    from srm.app import Environment

    env = Environment.from_env({"SRM_SOURCE": "a", "SRM_TARGET": "b", "SRM_MAPPING_FAILURE_DESTINATION": BUCKET})
    assert env.mapping_failure_destination == BUCKET


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        pytest.param({"LastProcessingResult": "OK"}, None, id="ok"),
        pytest.param({"LastProcessingResult": "No records processed"}, None, id="idle"),
        pytest.param({"StateTransitionReason": "USER_INITIATED"}, None, id="user"),
        pytest.param(
            {"LastProcessingResult": "PROBLEM: SASL authentication failed"},
            "PROBLEM: SASL authentication failed",
            id="sasl",
        ),
        pytest.param(
            {"LastProcessingResult": "PROBLEM: Connection error. Your VPC must be able to connect to Lambda"},
            "PROBLEM: Connection error. Your VPC must be able to connect to Lambda",
            id="network",
        ),
        pytest.param(
            {"StateTransitionReason": "PROBLEM: Cluster failed to authorize Lambda."},
            "PROBLEM: Cluster failed to authorize Lambda.",
            id="authorize",
        ),
        pytest.param(
            {"State": "Disabled", "StateTransitionReason": "Function does not exist"},
            "disabled by Lambda: Function does not exist",
            id="disabled-by-lambda",
        ),
        pytest.param({"State": "Disabled", "StateTransitionReason": "USER_INITIATED"}, None, id="disabled-by-us"),
    ],
)
def test_problem_is_what_lambda_reports_not_what_we_asked(lam, fields, problem):
    port, stubber = lam
    expect_list(stubber, [{**esm("t", U1), **fields}])
    (observed,) = port.observe("a", "b")
    assert observed.problem == problem


def test_mapping_problems_are_logged_recorded_and_cleared(lam, state, caplog):
    # GIVEN a mapping Lambda cannot authenticate and one that is fine
    port, stubber = lam
    sasl = "PROBLEM: SASL authentication failed."
    expect_list(
        stubber, [{**esm("t", U1), "LastProcessingResult": sasl}, {**esm("u", U2), "LastProcessingResult": "OK"}]
    )
    # WHEN topic sync syncs the mappings
    with caplog.at_level("WARNING"):
        result = sync_mappings(port, "a", "b", plan(["t", "u"], ["t", "u"]), SETTINGS, state)
    # THEN the problem is in the result, a WARNING naming the topic and mapping, and the state table
    assert result.problems == {"t": sasl}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"a->b: event source mapping of t ({U1}): {sasl}"
    ]
    records = state.event_source_mappings("a", "b")
    assert (records["t"].problem, records["u"].problem) == (sasl, "")
    # AND once fixed, the next sync clears it
    expect_list(
        stubber, [{**esm("t", U1), "LastProcessingResult": "OK"}, {**esm("u", U2), "LastProcessingResult": "OK"}]
    )
    assert sync_mappings(port, "a", "b", plan(["t", "u"], ["t", "u"]), SETTINGS, state).problems == {}
    assert state.event_source_mappings("a", "b")["t"].problem == ""

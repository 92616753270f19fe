"""``srm check``: a configuration validated as ``srm run`` validates it before starting, and what it means — per flow
what its filters select, and each cluster's client settings per role as librdkafka gets them (secrets masked) —
without a connection; optionally (``connect``) the clusters asked for their ids and topics, side by side
(:func:`probe_clusters`, which ``srm run`` and the commands that need a cluster use too)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from srm.config.keys import HEARTBEATS_CLIENT
from srm.config.secrets import MASK, SecretResolver, default_secret_resolver, is_sensitive
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.admin import ClusterMetadata, ConnectionErrors, KafkaAccessError, KafkaUnavailableError, probe_cluster
from srm.kafka.clients import admin_config, build, consumer_config, producer_config

__all__ = [
    "CheckReport",
    "ClusterAnswer",
    "answered_topics",
    "check",
    "check_distinct",
    "exit_code",
    "offline_resolver",
    "print_report",
    "probe_clusters",
    "require_clusters",
]

_EXAMPLE_TOPIC = "orders"
_KINDS: dict[str, type] = {"producer": Producer, "consumer": Consumer, "admin": AdminClient}


def offline_resolver(resolver: SecretResolver = default_secret_resolver) -> SecretResolver:
    """Environment and file references are resolved (a missing one is an error, as in ``srm run``); Secrets Manager
    references are left as written, since reading them needs AWS."""

    def resolve(kind: str, path: str) -> str:
        if kind == "secretsmanager":
            return f"${{secretsmanager:{path}}}"
        return resolver(kind, path)

    return resolve


def client_settings(config: SrmConfig, alias: str, role: str, flow: Flow | None, resolver: SecretResolver) -> Any:
    if role == "producer":
        delivery = config.settings(*flow).mirror_delivery_timeout_ms if flow else 60_000
        return producer_config(config, alias, flow, delivery_timeout_ms=delivery, resolver=resolver)
    if role == "consumer":
        return consumer_config(config, alias, flow, group_id="srm-check", resolver=resolver)
    return admin_config(config, alias, flow, resolver)


def shown(key: str, value: Any) -> str:
    """A setting for display: secrets masked, in-memory PEM certificates summarised, the IAM signer described."""
    if callable(value):
        return repr(value) if type(value).__repr__ is not object.__repr__ else "<callback>"
    text = str(value)
    if is_sensitive(key):
        return MASK
    if key.endswith(".pem"):
        return f"<PEM, {text.count('BEGIN CERTIFICATE')} certificate(s)>"
    return text


def _validate(kind: type, conf: Mapping[str, Any], config: SrmConfig, alias: str, role: str) -> None:
    """librdkafka's own check of the settings: a client built without brokers (so nothing connects) and with a
    signer that signs nothing, then dropped."""
    offline = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    if "oauth_cb" in offline:
        offline["oauth_cb"] = lambda _config: ("offline-check", time.time() + 900)
    offline["log_level"] = "0"
    build(kind, offline, config, alias, role)


@dataclass(frozen=True)
class ClusterAnswer:
    """What a cluster said when asked for its id and topics: its metadata, or why there is none."""

    alias: str
    metadata: ClusterMetadata | None = None
    refused: str | None = None  # it answered and refused srm's credentials or certificates
    silent: str | None = None  # it did not answer: the last connection error


def probe_clusters(
    config: SrmConfig, aliases: Sequence[str], resolver: SecretResolver, timeout: float
) -> dict[str, ClusterAnswer]:
    """Each cluster asked for its id and topics, side by side: clusters that do not answer cost ``timeout`` once."""

    def probe(alias: str) -> ClusterAnswer:
        errors = ConnectionErrors()
        # librdkafka's own log lines would repeat what the answer says
        conf = {**admin_config(config, alias, None, resolver), "log_level": "0", "error_cb": errors}
        admin = build(AdminClient, conf, config, alias, "admin")
        try:
            return ClusterAnswer(alias, metadata=probe_cluster(admin, errors, timeout=timeout))
        except KafkaAccessError as e:
            return ClusterAnswer(alias, refused=str(e))
        except KafkaUnavailableError as e:
            return ClusterAnswer(alias, silent=str(e))

    # Daemon threads, not an executor's (joined at exit): a stopped srm run does not wait for the probes.
    answers: dict[str, ClusterAnswer] = {}
    failed: list[BaseException] = []

    def answer(alias: str) -> None:
        try:
            answers[alias] = probe(alias)
        except BaseException as e:  # a setting librdkafka rejects: raised below
            failed.append(e)

    threads = [threading.Thread(target=answer, args=(a,), name=f"srm-probe-{a}", daemon=True) for a in aliases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return {alias: answers[alias] for alias in aliases}


def answered_topics(
    config: SrmConfig, answers: Mapping[str, ClusterAnswer], timeout: float
) -> Callable[[str], list[str]]:
    """A cluster's topics as :func:`probe_clusters` found them, or :class:`KafkaUnavailableError` naming the cluster
    and why: one that did not answer is not asked again."""

    def topics(alias: str) -> list[str]:
        answer = answers.get(alias)
        if answer is None:
            raise KafkaUnavailableError(f"cluster {alias} was not asked for its topics")
        if answer.metadata is not None:
            return sorted(answer.metadata.topics)
        why = answer.refused and f"refuses the connection: {answer.refused}"
        why = why or f"does not answer within {timeout:g}s: {answer.silent}"
        raise KafkaUnavailableError(f"cluster {alias} ({config.bootstrap_servers(alias)}) {why}")

    return topics


def require_clusters(config: SrmConfig, aliases: Sequence[str], resolver: SecretResolver, timeout: float) -> None:
    """Ask the clusters a command needs before it starts, side by side: :class:`KafkaUnavailableError` naming the
    first that does not answer (or refuses srm), :class:`ConfigError` for two aliases of one cluster."""
    answers = probe_clusters(config, aliases, resolver, timeout)
    check_distinct(answers)
    topics_of = answered_topics(config, answers, timeout)
    for alias in answers:
        topics_of(alias)  # raises, naming the cluster, when it did not answer


def check_distinct(answers: Mapping[str, ClusterAnswer]) -> None:
    """Refuse two aliases of one cluster (:class:`ConfigError`): a flow between them would replicate the cluster into
    itself — with any policy its heartbeats come back as remote heartbeats, one level deeper each round."""
    seen: dict[str, str] = {}
    for alias, answer in sorted(answers.items()):
        cluster_id = answer.metadata.cluster_id if answer.metadata else None
        if cluster_id is None:
            continue
        if cluster_id in seen:
            raise ConfigError(
                f"{seen[cluster_id]} and {alias} are the same cluster (id {cluster_id}): give each cluster one alias "
                "(a flow between two aliases of one cluster replicates it into itself)"
            )
        seen[cluster_id] = alias


class CheckReport:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.unreachable: list[str] = []
        self.problems: list[str] = []  # one line per cluster that does not answer or refuses srm
        self.warnings: list[str] = []

    def add(self, line: str = "") -> None:
        self.lines.append(line)


def check(
    config: SrmConfig,
    *,
    resolver: SecretResolver | None = None,
    connect: bool = False,
    timeout: float = 5.0,
    settings: bool = False,
) -> CheckReport:
    """The report: the verdict first (valid; with ``connect``, which clusters answer), then each flow, then with
    ``settings`` each cluster's client settings. Raises :class:`srm.errors.ConfigError` for anything ``srm run``
    would refuse, two aliases of one cluster included."""
    resolver = resolver or offline_resolver()
    report = CheckReport()
    enabled = config.enabled_flows()
    clusters: dict[str, dict[str, Any]] = {}
    for alias in config.clusters:
        for role in _KINDS:
            conf = client_settings(config, alias, role, None, resolver)
            _validate(_KINDS[role], conf, config, alias, role)
            clusters[alias + "/" + role] = conf
    report.add(f"valid: {len(config.clusters)} cluster(s), {len(config.flows)} flow(s), {len(enabled)} enabled")
    report.warnings = list(config.warnings)
    for line in _ignored_lines(config.ignored):
        report.add(line)
    topics: dict[str, list[str]] = {}
    if connect:
        answers = probe_clusters(config, [a for a in config.clusters if config.bootstrap_servers(a)], resolver, timeout)
        check_distinct(answers)
        for alias, answer in answers.items():
            where = f"cluster {alias} ({config.bootstrap_servers(alias)})"
            if answer.metadata is not None:
                topics[alias] = sorted(answer.metadata.topics)
                report.add(f"cluster {alias} answers: {len(topics[alias])} topic(s)")
                continue
            report.unreachable.append(alias)
            problem = (
                f"refuses the connection: {answer.refused}"
                if answer.refused
                else f"does not answer within {timeout:g}s: {answer.silent}"
            )
            report.add(f"cluster {alias} {problem}")
            report.problems.append(f"{where} {problem}")
    for flow in config.flows:
        report.add()
        for line in _flow_lines(config, flow, resolver, clusters, topics.get(flow[0]) if connect else None):
            report.add(line)
    if not settings:
        report.add()
        report.add("(each cluster's client settings: srm check -v)")
        return report
    for alias in config.clusters:
        report.add()
        report.add(f"cluster {alias}: {config.bootstrap_servers(alias) or '(no bootstrap.servers)'}")
        for role in _KINDS:
            conf = clusters[alias + "/" + role]
            report.add(f"  {role}:")
            for key in sorted(k for k in conf if k != "logger"):  # where librdkafka's logs go is srm's business
                report.add(f"    {key} = {shown(key, conf[key])}")
    return report


def _ignored_lines(ignored: Sequence[tuple[str, str]], shown_keys: int = 4) -> Iterator[str]:
    """One line per reason SRM ignores MM2 or Connect settings, naming the first few keys."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in ignored:
        by_reason.setdefault(reason, []).append(key)
    for reason, keys in by_reason.items():
        more = f" and {len(keys) - shown_keys} more" if len(keys) > shown_keys else ""
        yield f"ignored: {', '.join(keys[:shown_keys])}{more}: {reason}"


def _flow_lines(
    config: SrmConfig,
    flow: Flow,
    resolver: SecretResolver,
    clusters: Mapping[str, Mapping[str, Any]],
    source_topics: list[str] | None,
) -> Iterator[str]:
    source, target = flow
    s = config.settings(source, target)
    policy = config.policy(source, target)
    yield f"flow {flow}: {'enabled' if s.enabled else 'disabled'}"
    yield f"  topics = {s.topics}"
    yield f"  topics.exclude = {s.topics_exclude}"
    yield f"  groups = {s.groups}"
    yield f"  groups.exclude = {s.groups_exclude}"
    yield (
        f"  {s.replication_policy_class.rsplit('.', 1)[-1]}: {source} topic {_EXAMPLE_TOPIC!r} → "
        f"{target} topic {policy.format_remote_topic(source, _EXAMPLE_TOPIC)!r}; checkpoints in "
        f"{policy.checkpoints_topic(source)!r} on {target}; heartbeats in {policy.heartbeats_topic()!r} on {source}"
    )
    chain = config.transforms(source, target)
    yield f"  transforms: {len(chain) or 'none'}"
    for stage in chain.describe():
        yield f"    {stage}"
    for alias in flow:  # per-flow client settings (<source>-><target>.<role>.…) that differ from the cluster's
        for role in _KINDS:
            conf = client_settings(config, alias, role, flow, resolver)
            base = clusters[alias + "/" + role]
            changed = sorted(k for k in conf if k not in base or conf[k] != base[k])
            if changed:
                _validate(_KINDS[role], conf, config, alias, role)
                yield f"  {alias} {role} in this flow: " + ", ".join(f"{k} = {shown(k, conf[k])}" for k in changed)
    # the heartbeat producer's own settings (a heartbeat connector's client overrides), above the flow's for the source
    delivery = config.settings(source, target).mirror_delivery_timeout_ms
    mine = producer_config(config, source, flow, delivery_timeout_ms=delivery, resolver=resolver)
    beats = producer_config(
        config, source, flow, delivery_timeout_ms=delivery, resolver=resolver, purpose=HEARTBEATS_CLIENT
    )
    changed = sorted(k for k in beats if k not in mine or beats[k] != mine[k])
    if changed:
        yield f"  {source} heartbeats producer: " + ", ".join(f"{k} = {shown(k, beats[k])}" for k in changed)
    if source_topics is not None:
        decision = config.replicate(source, target)
        chosen = [t for t in source_topics if decision(t)]
        yield f"  would replicate now: {len(chosen)} of {len(source_topics)} topic(s) on {source}"
        for topic in chosen:
            yield f"    {topic} → {policy.format_remote_topic(source, topic)}"


def exit_code(report: CheckReport) -> int:
    return 1 if report.unreachable else 0


Printer = Callable[[str], None]


def print_report(report: CheckReport, out: Printer, err: Printer) -> int:
    """The report to ``out``; its warnings, and each cluster that does not answer (or refuses srm), to ``err``."""
    for warning in report.warnings:
        err(f"warning: {warning}")
    for problem in report.problems:
        err(problem)
    for line in report.lines:
        out(line)
    return exit_code(report)

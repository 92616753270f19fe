"""``srm check``: a configuration validated as ``srm run`` validates it before starting, and what it means — each
cluster's client settings per role as librdkafka gets them (secrets masked), and per flow what its filters select —
without a connection; optionally (``connect``) each cluster asked for its topics."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from srm.config.secrets import MASK, SecretResolver, default_secret_resolver, is_sensitive
from srm.config.settings import SrmConfig
from srm.flow import Flow
from srm.kafka.admin import ConnectionErrors, KafkaAccessError, KafkaUnavailableError, probe_topics
from srm.kafka.clients import admin_config, build, consumer_config, producer_config

__all__ = ["CheckReport", "check", "exit_code", "offline_resolver", "print_report"]

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


class CheckReport:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.unreachable: list[str] = []

    def add(self, line: str = "") -> None:
        self.lines.append(line)


def check(
    config: SrmConfig,
    *,
    resolver: SecretResolver | None = None,
    connect: bool = False,
    timeout: float = 5.0,
) -> CheckReport:
    """The report; raises :class:`srm.errors.ConfigError` for anything ``srm run`` would refuse."""
    resolver = resolver or offline_resolver()
    report = CheckReport()
    enabled = config.enabled_flows()
    report.add(f"valid: {len(config.clusters)} cluster(s), {len(config.flows)} flow(s), {len(enabled)} enabled")
    for warning in config.warnings:
        report.add(f"warning: {warning}")
    clusters: dict[str, dict[str, Any]] = {}
    for alias in config.clusters:
        report.add()
        report.add(f"cluster {alias}: {config.bootstrap_servers(alias) or '(no bootstrap.servers)'}")
        for role in _KINDS:
            conf = client_settings(config, alias, role, None, resolver)
            _validate(_KINDS[role], conf, config, alias, role)
            clusters[alias + "/" + role] = conf
            report.add(f"  {role}:")
            for key in sorted(conf):
                report.add(f"    {key} = {shown(key, conf[key])}")
    topics: dict[str, list[str]] = {}
    if connect:
        report.add()
        for alias in config.clusters:
            if not config.bootstrap_servers(alias):
                continue
            errors = ConnectionErrors()
            conf = {**clusters[alias + "/admin"], "log_level": "0", "error_cb": errors}
            try:
                admin = build(AdminClient, conf, config, alias, "admin")
                topics[alias] = sorted(probe_topics(admin, errors, timeout=timeout))
                report.add(f"cluster {alias} answers: {len(topics[alias])} topic(s)")
            except KafkaAccessError as e:
                report.unreachable.append(alias)
                report.add(f"cluster {alias} refuses the connection: {e}")
            except KafkaUnavailableError as e:
                report.unreachable.append(alias)
                report.add(f"cluster {alias} does not answer within {timeout:g}s: {e}")
    for flow in config.flows:
        report.add()
        for line in _flow_lines(config, flow, resolver, clusters, topics.get(flow[0]) if connect else None):
            report.add(line)
    return report


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
    for alias in flow:  # per-flow client settings (<source>-><target>.<role>.…) that differ from the cluster's
        for role in _KINDS:
            conf = client_settings(config, alias, role, flow, resolver)
            base = clusters[alias + "/" + role]
            changed = sorted(k for k in conf if k not in base or conf[k] != base[k])
            if changed:
                _validate(_KINDS[role], conf, config, alias, role)
                yield f"  {alias} {role} in this flow: " + ", ".join(f"{k} = {shown(k, conf[k])}" for k in changed)
    if source_topics is not None:
        decision = config.replicate(source, target)
        chosen = [t for t in source_topics if decision(t)]
        yield f"  would replicate now: {len(chosen)} of {len(source_topics)} topic(s) on {source}"
        for topic in chosen:
            yield f"    {topic} → {policy.format_remote_topic(source, topic)}"


def exit_code(report: CheckReport) -> int:
    return 1 if report.unreachable else 0


Printer = Callable[[str], None]


def print_report(report: CheckReport, out: Printer) -> int:
    for line in report.lines:
        out(line)
    return exit_code(report)

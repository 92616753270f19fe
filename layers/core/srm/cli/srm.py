"""``srm``: run the local runtime against any clusters, or the self-contained demo."""
# ruff: noqa: E402 - the imports follow the signal handlers: they take a second on a busy machine

from __future__ import annotations

import signal
import sys
import threading


def _stopped_while_importing(signum: int, _frame: object) -> None:
    """Nothing has started yet: a stop is an exit, quiet (srm run's status for a stop is 0), not a traceback from
    whichever import the signal interrupted. :func:`main` installs the handlers for the command's life."""
    raise SystemExit(0 if sys.argv[1:2] == ["run"] else 128 + signum)


if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
    for _signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signal, _stopped_while_importing)

import argparse
import logging
import os
from collections.abc import Callable
from pathlib import Path

from srm.cli.options import add_command, add_json, add_timeout, positive_seconds
from srm.config.connectors import load_connectors
from srm.config.settings import SrmConfig, load_file
from srm.errors import ConfigError, PermanentError, SrmError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="srm", description="serverless-srm: Kafka replication, locally or on AWS")
    sub = parser.add_subparsers(dest="command", required=True)
    run = add_command(sub, "run", _run)
    _config_arguments(run)
    run.add_argument(
        "--endpoint-url",
        help="a DynamoDB endpoint (LocalStack, a DynamoDB Local you run) for the config and state tables, shared by "
        "every node given it (default: the state in compacted topics on one of the clusters, shared by every node "
        "of the cluster, kept across restarts and crashes)",
    )
    run.add_argument("--store", help=argparse.SUPPRESS)  # retired (kafka, durable, memory): said by _run
    run.add_argument(
        "--node-id",
        help="this node's id among the nodes of the cluster (default: derived from the host and this directory, the "
        "same at every restart here)",
    )
    run.add_argument("--store-port", help=argparse.SUPPRESS)  # retired with the store server: said by _run
    run.add_argument("--config-table", default="srm-config", help="with --endpoint-url: the config table")
    run.add_argument("--state-table", default="srm-state", help="with --endpoint-url: the state table")
    run.add_argument(
        "--no-metrics",
        action="store_true",
        help="no monitoring: no raw metrics, no CloudWatch metrics, no aggregation process (a JVM)",
    )
    run.add_argument("--metrics-table", default="srm-metrics", help="with --endpoint-url: the metrics table")
    run.add_argument(
        "--api-port",
        type=int,
        default=0,
        help="port of the metrics API and web view on 127.0.0.1 (default: any free port; the URL is written to "
        ".srm-local/api.url)",
    )
    run.add_argument(
        "--no-api", action="store_true", help="no metrics API and web view on this node (the other nodes' serve it)"
    )
    run.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="worker processes per enabled flow on this node (default 1): each is a member of the flow's groups, "
        "so the group protocol spreads the partitions over them as over nodes; one more process per core the "
        "brokers leave free",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="handler logs and EMF metrics too")
    check = add_command(sub, "check", _check)
    _config_arguments(check)
    check.add_argument(
        "--connect",
        action="store_true",
        help="also ask each cluster for its topics (Secrets Manager references are read): which answer, and which "
        "topics each flow would replicate now; exit 1 when a cluster does not answer (one line on stderr each), 2 "
        "when two aliases name one cluster",
    )
    check.add_argument("-v", "--verbose", action="store_true", help="also each cluster's client settings")
    add_timeout(check, 5.0)
    takeover = add_command(sub, "takeover", _takeover)
    _config_arguments(takeover, "the config file srm run will be given")
    takeover.add_argument(
        "--worker-config",
        type=Path,
        metavar="FILE",
        help="with --connectors: the Connect cluster's worker config (connect-distributed.properties, or a "
        "KafkaConnect resource), whose offset.storage.topic on the cluster of its bootstrap.servers holds the "
        "source connector's offsets (default: connect-offsets, Apache Kafka's connect-distributed.properties, or "
        "else connect-cluster-offsets, Strimzi's and CSM Operator's default, whichever is on the target)",
    )
    takeover.add_argument("--source", metavar="ALIAS", help="one flow's source (default: every enabled flow)")
    takeover.add_argument("--target", metavar="ALIAS", help="one flow's target")
    takeover.add_argument(
        "--no-dry-run", dest="dry_run", action="store_false", help="commit the start positions to the mapping groups"
    )
    add_json(takeover)
    add_timeout(takeover, 30.0)
    status = add_command(sub, "status", _status)
    status.add_argument("--config", type=Path, help="a node's config file: read the cluster's state from Kafka")
    status.add_argument("--topics", action="store_true", help="also list each flow's topics with their lag")
    add_json(status)
    add_timeout(status, 10.0)
    metrics = add_command(sub, "metrics", _metrics)
    metrics.add_argument("--url", help="the metrics API's base URL (default: .srm-local/api.url of this directory)")
    metrics.add_argument("--once", action="store_true", help="print once and exit (default: refresh until Ctrl-C)")
    metrics.add_argument("--json", action="store_true", help="JSON: one document per refresh (with --once: one)")
    metrics.add_argument("--interval", type=positive_seconds, default=5.0, help="seconds between refreshes (default 5)")
    demo = add_command(sub, "demo", _demo)
    demo.add_argument("--records", type=int, default=30_000, help="records per topic of the backlog")
    demo.add_argument("--keep-data", action="store_true", help="keep the clusters' data dirs afterwards")
    demo.add_argument(
        "--chart", type=Path, default=Path("srm-demo.png"), help="where to write the chart (default: srm-demo.png)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":  # from now on, not once its imports are done: a stop is a stop from the start
        args.stop = _stop_on_signals()
    else:  # Ctrl-C as usual
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug", "aws_lambda_powertools", "matplotlib", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except ConfigError as e:
        print(f"srm: {e}", file=sys.stderr)
        return 2
    except SrmError as e:  # one line, the rest of srm's own errors
        print(f"srm: {e}", file=sys.stderr)
        return 2 if isinstance(e, PermanentError) else 1
    except KeyboardInterrupt:
        return 0 if args.command == "metrics" else 130
    except BrokenPipeError:  # `srm check … | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit either
        return 0


def _config_arguments(command: argparse.ArgumentParser, config_help: str = "") -> None:
    given = command.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=config_help or "YAML (.yaml/.yml) or MM2 properties (.properties)",
    )
    given.add_argument(
        "--connectors",
        type=Path,
        metavar="DIR",
        help="a folder of MirrorMaker 2 connector definitions (KafkaConnector YAML or Connect REST JSON): each "
        "source->target pair's connectors become one flow",
    )


def _given_config(args: argparse.Namespace) -> SrmConfig:
    return load_file(args.config) if args.config is not None else load_connectors(args.connectors)


# The commands: each handler's docstring is its help (the first paragraph) and description (the rest).
def _run(args: argparse.Namespace) -> int:
    """run every enabled flow of a config file until stopped (Ctrl-C)"""
    from srm.local.runtime import RuntimeOptions, run

    if args.store not in (None, "kafka"):  # the state is in Kafka (the former default), or at --endpoint-url
        raise ConfigError(
            f"--store {args.store}: srm run no longer runs that store; leave --store out (the state is kept in "
            "Kafka), or give any DynamoDB (LocalStack, a DynamoDB Local you run) with --endpoint-url URL"
        )
    if args.store_port is not None:
        raise ConfigError(
            "--store-port: srm run serves no store any more (every process reads the state from Kafka itself); "
            "leave it out"
        )
    config = _given_config(args)
    for warning in config.warnings:
        logging.warning(warning)
    if args.stop.is_set():
        return 0
    options = RuntimeOptions(
        endpoint_url=args.endpoint_url,
        node_id=args.node_id,
        config_table=args.config_table,
        state_table=args.state_table,
        verbose=args.verbose,
        metrics=not args.no_metrics,
        metrics_table=args.metrics_table,
        api_port=None if args.no_api else args.api_port,
        workers=args.workers,
    )
    return run(config, options, args.stop)


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, even where SIGINT is ignored (a background job of a script), which would
    leave Python's Ctrl-C unset."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of worker processes from 1 to 64")
    return n


def _check(args: argparse.Namespace) -> int:
    """validate a config file offline and show each flow's filters (with -v each cluster's client settings, secrets
    masked)"""
    from srm.aws.secrets import secrets_manager_resolver
    from srm.control.check import check, print_report

    report = check(
        _given_config(args),
        resolver=secrets_manager_resolver(_region()) if args.connect else None,
        connect=args.connect,
        timeout=args.timeout,
        settings=args.verbose,
    )
    return print_report(report, print, lambda line: print(f"srm: {line}", file=sys.stderr))


def _takeover(args: argparse.Namespace) -> int:
    """where each partition of a flow starts after MirrorMaker 2 (commit it with --no-dry-run; `srm run` does it by
    itself)

    A partition srm never replicated starts at MirrorMaker 2's committed position (its offsets topic
    mm2-offsets.<source>.internal on the target; with --connectors, the Connect cluster's offsets topic, the records
    of the source connector's name), else after its newest offset sync, else at the log start. Prints each
    partition's start, where it was read and MM2's tail (copies it made past that position, written again). Dry run
    by default: `srm run` commits the same positions before it starts a mapping (with --connectors, from a default
    offsets topic only: give --worker-config here for any other).
    """
    import json

    from srm.aws.secrets import secrets_manager_resolver
    from srm.cli.tables import takeover_lines
    from srm.config.connect_worker import WorkerConfig, connect_offsets
    from srm.control.check import require_clusters
    from srm.flow import Flow
    from srm.replication.takeover import take_over

    if args.worker_config is not None and args.connectors is None:
        raise ConfigError(
            "takeover: --worker-config goes with --connectors (MirrorMaker 2 in dedicated mode keeps its offsets in "
            "mm2-offsets.<source>.internal, read with --config)"
        )
    config = _given_config(args)
    worker = WorkerConfig.read(args.worker_config) if args.worker_config is not None else None
    if bool(args.source) != bool(args.target):
        raise ConfigError("takeover: give both --source and --target, or neither")
    flows = [config.check_flow(args.source, args.target)] if args.source else list(config.enabled_flows())
    missing = sorted(set(flows) - set(config.flows))
    if missing:
        given = args.config or args.connectors
        raise ConfigError(f"no flow {missing[0]} in {given}: its flows are {', '.join(map(str, config.flows))}")
    connect = {f: connect_offsets(config, Flow(*f), worker) if args.connectors else None for f in flows}
    resolver = secrets_manager_resolver(_region())
    clusters = {a for f in flows for a in f} | {c.cluster for c in connect.values() if c is not None}
    require_clusters(config, sorted(clusters), resolver, args.timeout)
    reports = [
        take_over(config, Flow(*f), resolver, dry_run=args.dry_run, timeout=args.timeout, connect=connect[f])
        for f in flows
    ]
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    for report in [] if args.json else reports:
        print("\n".join(takeover_lines(report)))
    return 0


def _status(args: argparse.Namespace) -> int:
    """the nodes of the srm run cluster (who leads, who holds which partitions, the last rebalance) and its flows
    (topics, lag, heartbeats, checkpoints)

    Of the srm run in this directory, or, with --config, of the cluster of nodes that config file forms (its state is
    read from Kafka: no node needs to run here).
    """
    # srm-control status, on this directory's srm run or on the cluster of nodes a config file forms
    from srm.cli.control import main as control
    from srm.local.store import STATE_DIR

    options = [*(["--json"] if args.json else []), *(["--topics"] if args.topics else []), f"--timeout={args.timeout}"]
    if args.config is not None:
        return control(["--state-of", str(args.config), "status", *options])
    if not (STATE_DIR / "config.path").exists():
        raise ConfigError(
            f"no srm run in this directory ({STATE_DIR}/config.path not found): run `srm status` where it runs, "
            "or give --config FILE to read the cluster's state from Kafka"
        )
    return control(["--local", "status", *options])


def _metrics(args: argparse.Namespace) -> int:
    """the flows and topics of the srm run in this directory: status, records/s, latency, lag"""
    from srm.cli.metrics import watch
    from srm.local.api_client import MetricsApiClient, find_api_url

    stop = _stop_on_signals()  # as srm run is
    client = MetricsApiClient(find_api_url(args.url))
    watch(client, once=args.once, as_json=args.json, interval=args.interval, stop=stop)
    return 0


def _demo(args: argparse.Namespace) -> int:
    """start two local clusters, replicate, fail a consumer group over, report"""
    from srm.local.demo import run_demo

    return run_demo(records=args.records, keep_data=args.keep_data, chart=args.chart)


def _region() -> str:
    import botocore.session

    region: str | None = botocore.session.get_session().get_config_variable("region")
    return region or "us-east-1"


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench`` (``make bench``): start two local clusters, measure every path on the same data, print the
table, write ``bench/results.json``; the clusters and ``srm run`` are stopped by PID whatever happens (Ctrl-C too)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cold_start import measure as measure_cold_start
from bench.cold_start import table as cold_start_table
from bench.cost import lambda_cost
from bench.endtoend import Scenario, run_scenario
from bench.handler import build_events, run_handler
from bench.limit import run_limit
from bench.measure import PathResult
from bench.metrics_aggregation import measure as measure_metrics_aggregation
from bench.mm2 import MM2_EXACTLY_ONCE, MM2_TUNING
from bench.report import compare, write_json
from bench.store import measure as measure_state
from bench.summary import summary
from bench.transforms import line as transforms_line
from bench.transforms import measure as measure_transforms
from bench.workload import Workload, create_topics, end_offsets, produce_backlog, wait_for_offsets
from srm.local.kafka import kafka_version

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
PARTITIONS = 6
# The pinned runs: how production runs a replicator, on cores the brokers do not use.
BROKER_CORES, REPLICATOR_CORES = "0", "1"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__)
    parser.add_argument("--small", type=int, default=1_000_000, help="records of 200 B (default 1,000,000)")
    parser.add_argument("--large", type=int, default=100_000, help="records of 2 KB (default 100,000)")
    parser.add_argument("--live-seconds", type=float, default=20.0, help="length of the 10k records/s live stream")
    parser.add_argument(
        "--window-ms",
        type=int,
        default=None,
        help="event.source.batching.window.ms of the end-to-end srm runs (default: not set, srm's default)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="event.source.batch.size of the end-to-end srm runs (default: not set, srm's default)",
    )
    parser.add_argument(
        "--only",
        choices=["limit", "handler", "state", "coldstart", "e2e", "transforms", "metrics"],
        action="append",
        help="run only these paths",
    )
    parser.add_argument(
        "--delivery",
        choices=["at-least-once", "exactly-once"],
        action="append",
        help="end-to-end runs (srm run and MirrorMaker 2) of only this guarantee (default both)",
    )
    parser.add_argument("--no-default-batch", action="store_true", help="skip the BatchSize 100 end-to-end run")
    parser.add_argument(
        "--no-nodes", action="store_true", help="skip the runs on 2 and 3 nodes and the rebalance pause"
    )
    parser.add_argument(
        "--no-pinned",
        action="store_true",
        help="skip the runs pinned to separate cores (brokers on core 0, the copy loop or srm run on core 1)",
    )
    parser.add_argument(
        "--metrics-rows",
        type=int,
        default=1_000_000,
        help="raw metric rows of the metrics aggregation (default 1,000,000; also run at a quarter of it)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' data directory")
    return parser.parse_args()


@contextlib.contextmanager
def _pinned(clusters: list[Any], broker_cores: str, own_cores: str) -> Iterator[None]:
    """Every broker thread on ``broker_cores`` and this process (the copy loop's clients are created in it) on
    ``own_cores``; all cores again afterwards."""
    every = f"0-{(os.cpu_count() or 1) - 1}"
    brokers = [pid for cluster in clusters for pid in cluster.node_pids()]

    def pin(cores: str) -> None:
        for pid in brokers:
            subprocess.run(["taskset", "-a", "-p", "-c", cores, str(pid)], check=True, capture_output=True)

    own = os.sched_getaffinity(0)
    pin(broker_cores)
    os.sched_setaffinity(0, {int(c) for c in own_cores.split(",")})
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)
        pin(every)


def _srm_settings(batch_size: int | None, window_ms: int | None) -> str:
    """How the end-to-end srm runs are configured, as their labels say it."""
    if batch_size is None and window_ms is None:
        return "its defaults (nothing set but clusters and topics)"
    set_ = [
        f"BatchSize {batch_size:,}" if batch_size is not None else "",
        f"window {window_ms} ms" if window_ms is not None else "",
    ]
    return ", ".join(filter(None, set_))


def _terminate(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=HERE).stdout
        return head.strip() + ("+changes" if dirty.strip() else "")
    except OSError:
        return "?"


def _machine() -> dict[str, Any]:
    import confluent_kafka

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka": f"Apache Kafka {kafka_version()} (KRaft, one node per cluster)",
    }


def _flow_properties(source: str, target: str, bootstraps: tuple[str, str]) -> dict[str, str]:
    return {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": bootstraps[0],
        f"{target}.bootstrap.servers": bootstraps[1],
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": "bench\\..*",
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
    }


def _client_configs(bootstraps: tuple[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The mirror's producer settings (to the target) and the event source's consumer settings (on the source)."""
    from srm.config.parsing import Properties
    from srm.config.settings import SrmConfig
    from srm.flow import Flow
    from srm.kafka.clients import consumer_config, producer_config

    config = SrmConfig.from_properties(Properties.of(_flow_properties("src", "dst", bootstraps)))
    settings = config.settings("src", "dst")
    flow = Flow("src", "dst")
    producer = producer_config(config, "dst", flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms)
    consumer = consumer_config(config, "src", flow, group_id="srm-bench")
    return producer, consumer


def _check_replicated(bootstraps: tuple[str, str], workload: Workload, remote: str) -> None:
    want = end_offsets(bootstraps[0], workload.topic, workload.partitions)
    _, done = wait_for_offsets(bootstraps[1], {remote: want}, timeout=60)
    if done is None:
        have = end_offsets(bootstraps[1], remote, workload.partitions)
        raise RuntimeError(f"{remote} holds {have} records per partition, {workload.topic} {want}")


def _previous(path: Path) -> dict[str, Any]:
    """The last run's results ({} when there are none)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def merged(previous: dict[str, Any], partial: dict[str, Any]) -> dict[str, Any]:
    """The last whole run's results with what a run of only some paths measured put in (their sections updated,
    one level deep); the whole run's date and commit stay, the partial run's are noted beside them."""
    out = dict(previous)
    for key, value in partial.items():
        if key in ("when", "commit", "machine", "facts"):
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        elif value:
            out[key] = value
    out["partial_runs"] = [
        *previous.get("partial_runs", []),
        {
            "when": partial["when"],
            "commit": partial["commit"],
            "sections": sorted(
                k
                for k, v in partial.items()
                if v and k not in ("when", "commit", "machine", "facts", "labels", "workloads")
            ),
        },
    ]
    return out


def main() -> int:
    args = _args()
    signal.signal(signal.SIGTERM, _terminate)
    only = set(args.only or ["limit", "handler", "state", "coldstart", "e2e", "transforms", "metrics"])
    from srm.local.clusters import LocalCluster

    workloads = {
        "small": Workload("small", "bench.small", args.small, 200, PARTITIONS),
        "large": Workload("large", "bench.large", args.large, 2048, PARTITIONS),
    }
    workloads = {k: w for k, w in workloads.items() if w.records > 0}
    live = Workload("live", "bench.live", int(10_000 * args.live_seconds), 200, PARTITIONS)
    # each run its own live topic: records another run streamed earlier would be its backlog
    live_mm2 = Workload("live", "bench.mm2live", live.records, 200, PARTITIONS)
    live_eos = Workload("live", "bench.eoslive", live.records, 200, PARTITIONS)
    live_mm2_eos = Workload("live", "bench.mm2eoslive", live.records, 200, PARTITIONS)
    live_join = Workload("live", "bench.joinlive", live.records, 200, PARTITIONS)
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-"))
    clusters = [LocalCluster(alias, workdir / alias / "data") for alias in ("source", "target")]
    results: dict[str, Any] = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _commit(),
        "machine": _machine(),
        "workloads": {
            k: {"label": w.label(), "records": w.records, "value_bytes": w.value_bytes, "partitions": w.partitions}
            for k, w in workloads.items()
        },
        "labels": {},
        "paths": {},
        "live": {},
        "facts": {},
    }
    paths, labels, facts = results["paths"], results["labels"], results["facts"]
    pinned = not args.no_pinned and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    try:
        if only <= {"transforms", "metrics"}:  # pure CPU: no cluster, no backlog
            clusters = []
        print(f"starting two local clusters in {workdir} …" if clusters else "no clusters needed", flush=True)
        for cluster in clusters:
            cluster.start()
        if clusters:
            bootstraps = (clusters[0].bootstrap, clusters[1].bootstrap)
            lives = [live, live_mm2, live_eos, live_mm2_eos, live_join]
            create_topics(bootstraps[0], {w.topic: w.partitions for w in [*workloads.values(), *lives]})
            for w in workloads.values():
                seconds = produce_backlog(bootstraps[0], w)
                print(f"produced {w.label()} on {w.topic} in {seconds:.1f}s", flush=True)
            producer_conf, consumer_conf = _client_configs(bootstraps)
            # the settings, not where librdkafka's logs go (a Python logger)
            facts["producer_config"] = {
                k: v for k, v in producer_conf.items() if k not in ("bootstrap.servers", "logger")
            }
            facts["consumer_config"] = {
                k: v for k, v in consumer_conf.items() if k not in ("bootstrap.servers", "group.id", "logger")
            }

        if "limit" in only:
            create_topics(bootstraps[1], {f"limit.{w.topic}": w.partitions for w in workloads.values()})
            labels["limit"] = "limit: consume→produce copy loop"
            paths["limit"] = {}
            for name, w in workloads.items():
                result = run_limit(bootstraps[0], w, f"limit.{w.topic}", producer_conf, consumer_conf)
                _check_replicated(bootstraps, w, f"limit.{w.topic}")
                paths["limit"][name] = result.as_json()
                print(f"limit {name}: {result.records_per_s:,.0f} records/s", flush=True)
            if pinned and "small" in workloads:
                w = workloads["small"]
                create_topics(bootstraps[1], {f"limitpin.{w.topic}": w.partitions})
                labels["limit_pinned"] = (
                    f"limit, pinned: copy loop on core {REPLICATOR_CORES}, brokers on {BROKER_CORES}"
                )
                with _pinned(clusters, BROKER_CORES, REPLICATOR_CORES):
                    result = run_limit(bootstraps[0], w, f"limitpin.{w.topic}", producer_conf, consumer_conf)
                _check_replicated(bootstraps, w, f"limitpin.{w.topic}")
                paths["limit_pinned"] = {"small": result.as_json()}
                print(f"limit pinned small: {result.records_per_s:,.0f} records/s", flush=True)

        if "transforms" in only:
            # beside the copy loop: this run's, else the last run's (in --output, else in bench/results.json)
            earlier = [_previous(path).get("paths", {}).get("limit") for path in (args.output, RESULTS)]
            limit = paths.get("limit") or next(filter(None, earlier), {})
            results["transforms"] = measure_transforms(limit.get("small", {}).get("records_per_s"))
            print(transforms_line(results["transforms"]), flush=True)

        if "metrics" in only:
            # 1 × and 4 × the input: the memory must not grow with it; each size in a JVM of its own
            results["metrics_aggregation"] = {
                str(rows): measure_metrics_aggregation(rows) for rows in (args.metrics_rows // 4, args.metrics_rows)
            }

        if "handler" in only:
            labels["handler"] = "handler alone (pre-built 6 MB events)"
            labels["handler_with_decode"] = "handler + Lambda's JSON decode of the event"
            from srm.core.events import local_event_source_arn

            batches = {
                name: build_events(bootstraps[0], w, consumer_conf, local_event_source_arn("hsrc"))
                for name, w in workloads.items()
            }
            measured = run_handler(_flow_properties("hsrc", "hdst", bootstraps), "hsrc", "hdst", batches)
            paths["handler"], paths["handler_with_decode"], results["cost"] = {}, {}, {}
            for name, result in measured.items():
                w = workloads[name]
                _check_replicated(bootstraps, w, f"hsrc.{w.topic}")
                result.bytes = result.records * w.record_bytes
                paths["handler"][name] = result.as_json()
                decoded = PathResult(
                    result.records,
                    result.bytes,
                    result.wall_s + result.extra["json_decode_wall_s"],
                    result.cpu_s + result.extra["json_decode_cpu_s"],
                )
                paths["handler_with_decode"][name] = decoded.as_json()
                events_per_gb = 1e9 / (w.record_bytes * result.extra["records_per_event"])
                results["cost"][name] = lambda_cost(paths["handler_with_decode"][name], events_per_gb)
                print(
                    f"handler {name}: {result.records_per_s:,.0f} records/s "
                    f"({decoded.records_per_s:,.0f} with the JSON decode)",
                    flush=True,
                )
            # The same events through an exactly-once flow (another source alias: its own remote topics).
            labels["handler_exactly_once"] = "handler alone, exactly.once.source.support=enabled"
            eos_flow = {**_flow_properties("xsrc", "hdst", bootstraps), "exactly.once.source.support": "enabled"}
            paths["handler_exactly_once"] = {}
            for name, result in run_handler(eos_flow, "xsrc", "hdst", batches).items():
                w = workloads[name]
                _check_replicated(bootstraps, w, f"xsrc.{w.topic}")
                result.bytes = result.records * w.record_bytes
                paths["handler_exactly_once"][name] = result.as_json()
                ratio = result.records_per_s / paths["handler"][name]["records_per_s"]
                paths["handler_exactly_once"][name]["vs_at_least_once"] = round(ratio, 2)
                print(
                    f"handler exactly-once {name}: {result.records_per_s:,.0f} records/s ({ratio:.2f} x at-least-once)",
                    flush=True,
                )
            del batches
            facts["handler_state"] = "moto in-process (mock_aws): one state write per batch per partition"

        if "state" in only:
            # a batch's state writes: the state port's Kafka adapter in the process (srm run's); the DynamoDB
            # emulation over HTTP it was measured against was retired (bench/store.py has its last figures)
            label = "state topic, in-process"
            measured = measure_state("topic", workdir / "state", bootstraps[1], 300)
            facts["state_writes"] = {"topic": {"label": label, **{k: round(v, 2) for k, v in measured.items()}}}
            print(f"state writes ({label}): {measured}", flush=True)

        if "coldstart" in only:
            # each function's imports on its `sam build` output as Lambda runs it, and in the dev venv
            results["cold_start"] = measure_cold_start()
            print(cold_start_table(results["cold_start"]), flush=True)

        if "e2e" in only:
            scenarios = []
            settings = _srm_settings(args.batch_size, args.window_ms)
            for name, w in workloads.items():
                scenarios.append(
                    (
                        "e2e",
                        f"end to end: srm run, {settings}",
                        name,
                        Scenario(
                            f"e2e-{name}",
                            f"e{name[0]}src",
                            f"e{name[0]}dst",
                            args.batch_size,
                            args.window_ms,
                            (w,),
                            live=live if name == "small" else None,
                            live_seconds=args.live_seconds,
                        ),
                    )
                )
            if not args.no_default_batch and "small" in workloads:
                scenarios.append(
                    (
                        "e2e_default_batch",
                        "end to end: srm run, BatchSize 100, window 500 ms (Lambda's defaults)",
                        "small",
                        Scenario("e2e-default", "dsrc", "ddst", 100, 500, (workloads["small"],), time_box_s=20.0),
                    )
                )
            if not args.no_nodes and "small" in workloads:
                # a cluster of nodes on this one machine: what bounds it is the 2 cores they share with the brokers
                for n in (2, 3):
                    scenarios.append(
                        (
                            f"e2e_nodes_{n}",
                            f"end to end: {n} srm run nodes, {settings}",
                            "small",
                            Scenario(
                                f"e2e-nodes{n}",
                                f"n{n}src",
                                f"n{n}dst",
                                args.batch_size,
                                args.window_ms,
                                (workloads["small"],),
                                nodes=n,
                            ),
                        )
                    )
                scenarios.append(
                    (
                        "e2e_workers_2",
                        f"end to end: srm run --workers 2, {settings}",
                        "small",
                        Scenario(
                            "e2e-workers2",
                            "w2src",
                            "w2dst",
                            args.batch_size,
                            args.window_ms,
                            (workloads["small"],),
                            workers=2,
                        ),
                    )
                )
                if not args.no_default_batch:
                    # Lambda's defaults again, two worker processes: two batches in flight where one waits on acks
                    scenarios.append(
                        (
                            "e2e_default_batch_workers_2",
                            "end to end: srm run --workers 2, BatchSize 100, window 500 ms",
                            "small",
                            Scenario(
                                "e2e-default-w2",
                                "dw2src",
                                "dw2dst",
                                100,
                                500,
                                (workloads["small"],),
                                time_box_s=20.0,
                                workers=2,
                            ),
                        )
                    )
                # the rebalance pause: a second node joins 8 s into a live stream; its worst latency is the pause
                scenarios.append(
                    (
                        "e2e_join",
                        "live stream while a second node joins (the rebalance pause)",
                        "none",
                        Scenario(
                            "e2e-join",
                            "jsrc",
                            "jdst",
                            args.batch_size,
                            args.window_ms,
                            (),
                            live=live_join,
                            live_seconds=args.live_seconds,
                            nodes=1,
                            join_at_s=8.0,
                        ),
                    )
                )
            if pinned and "small" in workloads:
                scenarios.append(
                    (
                        "e2e_pinned",
                        f"end to end, pinned: srm run on core {REPLICATOR_CORES}, brokers on {BROKER_CORES}",
                        "small",
                        Scenario(
                            "e2e-pinned-small",
                            "epsrc",
                            "epdst",
                            args.batch_size,
                            args.window_ms,
                            (workloads["small"],),
                            cpus=REPLICATOR_CORES,
                        ),
                    )
                )
                # the race pinned too: MM2 on the same core, so neither replicator competes with the brokers
                scenarios.append(
                    (
                        "mm2_pinned",
                        f"MirrorMaker 2, pinned: on core {REPLICATOR_CORES}, brokers on {BROKER_CORES}",
                        "small",
                        Scenario(
                            "mm2-pinned-small",
                            "mpsrc",
                            "mpdst",
                            args.batch_size,
                            args.window_ms,
                            (workloads["small"],),
                            replicator="mm2",
                            cpus=REPLICATOR_CORES,
                        ),
                    )
                )
            # MirrorMaker 2 on the same data: its own aliases (so its own remote topics), its own live topic
            for name, w in workloads.items():
                scenarios.append(
                    (
                        "mm2",
                        f"MirrorMaker 2 {kafka_version()}, dedicated mode, tasks.max {MM2_TUNING['tasks.max']}",
                        name,
                        Scenario(
                            f"mm2-{name}",
                            f"m{name[0]}src",
                            f"m{name[0]}dst",
                            args.batch_size,
                            args.window_ms,
                            (w,),
                            live=live_mm2 if name == "small" else None,
                            live_seconds=args.live_seconds,
                            replicator="mm2",
                        ),
                    )
                )
            # The same race exactly-once: exactly.once.source.support=enabled on srm's flow and MM2's target cluster
            for name, w in workloads.items():
                scenarios.append(
                    (
                        "e2e_exactly_once",
                        f"end to end: srm run, {settings}, exactly-once",
                        name,
                        Scenario(
                            f"e2e-eos-{name}",
                            f"e{name[0]}xsrc",
                            f"e{name[0]}xdst",
                            args.batch_size,
                            args.window_ms,
                            (w,),
                            live=live_eos if name == "small" else None,
                            live_seconds=args.live_seconds,
                            exactly_once=True,
                        ),
                    )
                )
            for name, w in workloads.items():
                scenarios.append(
                    (
                        "mm2_exactly_once",
                        f"MirrorMaker 2 {kafka_version()}, dedicated mode, tasks.max {MM2_TUNING['tasks.max']}, "
                        "exactly-once",
                        name,
                        Scenario(
                            f"mm2-eos-{name}",
                            f"m{name[0]}xsrc",
                            f"m{name[0]}xdst",
                            args.batch_size,
                            args.window_ms,
                            (w,),
                            live=live_mm2_eos if name == "small" else None,
                            live_seconds=args.live_seconds,
                            replicator="mm2",
                            exactly_once=True,
                        ),
                    )
                )
            delivery = set(args.delivery or ["at-least-once", "exactly-once"])
            scenarios = [s for s in scenarios if ("exactly-once" if s[3].exactly_once else "at-least-once") in delivery]
            facts["mm2_settings"] = MM2_TUNING
            facts["mm2_exactly_once_settings"] = MM2_EXACTLY_ONCE
            for key, label, name, scenario in scenarios:
                labels[key] = label
                print(f"{label}: {name} …", flush=True)
                with _pinned(clusters, BROKER_CORES, REPLICATOR_CORES) if scenario.cpus else contextlib.nullcontext():
                    brokers = tuple(pid for cluster in clusters for pid in cluster.node_pids())
                    backlog, live_result, run_facts = run_scenario(
                        scenario, bootstraps, workdir / scenario.name, brokers
                    )
                if scenario.backlog:
                    paths.setdefault(key, {})[name] = backlog.as_json()
                facts[scenario.name] = run_facts | {
                    "batch_size": scenario.batch_size,
                    "batching_window_ms": scenario.batching_window_ms,
                }
                print(f"  {backlog.records_per_s:,.0f} records/s", flush=True)
                for remote, seen in run_facts.get("read_committed", {}).items():
                    print(f"  {remote} read read_committed: {seen}", flush=True)
                if live_result is not None:
                    results["live"][key] = live_result.as_json()
                    print(f"  live: {results['live'][key]}", flush=True)
    except KeyboardInterrupt:
        print("\nbench interrupted: stopping the clusters", file=sys.stderr)
        return 130
    finally:
        for cluster in clusters:
            cluster.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    previous = _previous(args.output) or None
    print()
    print(summary(results, PARTITIONS))
    print()
    print(compare(results, previous))
    write_json(args.output, merged(previous, results) if args.only and previous else results)
    print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    status = main()
    print(f"bench took {time.monotonic() - started:.0f}s")
    sys.exit(status)

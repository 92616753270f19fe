"""What ``python -m bench`` prints once its runs are done (``bench/results.json`` holds the same, and more)."""

from __future__ import annotations

from typing import Any

from bench.report import cost_table, table
from bench.transforms import line as transforms_line

__all__ = ["summary"]


def summary(results: dict[str, Any], partitions: int) -> str:
    """The results as text: the machine, the table of paths, srm run against MirrorMaker 2, the live streams, each
    end-to-end run's memory and CPU, and the cost."""
    m = results["machine"]
    lines = [
        f"serverless-srm bench — {results['when']}, commit {results['commit']}",
        f"{m['cpus']} cores, Python {m['python']}, confluent-kafka {m['confluent_kafka']} "
        f"(librdkafka {m['librdkafka']}), {m['kafka']}; {partitions} partitions, key + 3 headers per record; "
        "MB = keys + values",
        "",
        table(results),
        "",
        "rec/core-s: records per second of one core — CPU time of the process (every thread) or wall time, whichever "
        "is longer; on a 1769 MB (1 vCPU) Lambda function that is the billed speed.",
    ]
    lines += _race(results)
    if "handler" in results["paths"]:
        lines.append(f"handler state writes: {results['facts'].get('handler_state')} — real DynamoDB latency differs.")
    if results.get("transforms"):
        lines.append(transforms_line(results["transforms"]))
    for kind, m in results["facts"].get("state_writes", {}).items():
        lines.append(
            f"state writes, {m['label']} ({kind}): one partition's {m['write_ms']:.1f} ms, a batch of six partitions' "
            f"{m['six_writes_ms']:.1f} ms; answers after {m['ready_s']:.1f} s; CPU {m['cpu_s']:.1f} s"
        )
    for key, live in results["live"].items():
        lines.append(
            f"live stream ({results['labels'][key]}): {live['rate']:,} records/s for {live['seconds']:.0f}s: "
            f"replication latency p50 {live['p50_ms']:,.0f} ms, p99 {live['p99_ms']:,.0f} ms, max {live['max_ms']:,.0f}"
            f" ms ({live['received']:,} of {live['records']:,} received)"
        )
    for name, facts in results["facts"].items():
        if isinstance(facts, dict) and "peak_rss_mb" in facts:
            lines.append(
                f"{name}: peak RSS {facts['peak_rss_mb']} MB; batches retried {facts['retried_batches']}, "
                f"tracebacks {facts['tracebacks']}; first record replicated {facts.get('first_record_s', '?')} s "
                "after the start"
            )
            if facts.get("cpu_s"):
                total = sum(facts["cpu_s"].values()) or 1.0
                shares = ", ".join(f"{p} {s:.1f} s ({100 * s / total:.0f} %)" for p, s in facts["cpu_s"].items())
                lines.append(f"  CPU while replicating the backlog: {shares}")
    if results.get("cost"):
        lines += ["", cost_table(results)]
    return "\n".join(lines)


# (srm's path, MM2's, infix of their runs' facts, what to call them)
_RACES = (
    ("e2e", "mm2", "", ""),
    ("e2e_pinned", "mm2_pinned", "-pinned", " pinned (the replicator on a core of its own)"),
    ("e2e_exactly_once", "mm2_exactly_once", "-eos", " exactly-once"),
)


def _race(results: dict[str, Any]) -> list[str]:
    """srm run against MirrorMaker 2 on the same clusters and data, at-least-once and exactly-once side by side:
    records/s, CPU seconds and peak RSS; exactly-once also what a read_committed consumer finds on the target."""
    paths, facts = results["paths"], results["facts"]
    races = [race for race in _RACES if race[0] in paths and race[1] in paths]
    if not races:
        return []
    settings = f"MM2 settings {facts['mm2_settings']}"
    if any(race[0] == "e2e_exactly_once" for race in races):
        settings += f"; exactly-once adds {facts['mm2_exactly_once_settings']}"
    lines = ["", f"race, srm run vs MirrorMaker 2 (same brokers, data and machine; {settings}):"]
    for name in results["workloads"]:
        for srm_key, mm2_key, infix, mode in races:
            srm, mm2 = paths[srm_key].get(name), paths[mm2_key].get(name)
            if not srm or not mm2:
                continue
            srm_facts, mm2_facts = facts.get(f"e2e{infix}-{name}", {}), facts.get(f"mm2{infix}-{name}", {})
            srm_rss = sum(srm_facts.get("peak_rss_mb", {}).values())
            mm2_rss = sum(mm2_facts.get("peak_rss_mb", {}).values())
            per_million = {k: v["cpu_s"] / max(1, v["records"]) * 1e6 for k, v in (("srm", srm), ("mm2", mm2))}
            # the whole system: the replicator's processes and both brokers (what its requests cost them counts)
            system = {
                k: (v["cpu_s"] + v["brokers_cpu_s"]) / max(1, v["records"]) * 1e6
                for k, v in (("srm", srm), ("mm2", mm2))
                if "brokers_cpu_s" in v
            }
            whole = f" (whole system srm {system['srm']:.1f}, MM2 {system['mm2']:.1f})" if len(system) == 2 else ""
            lines.append(
                f"  {name}{mode}: srm {srm['records_per_s']:,.0f} rec/s, MM2 {mm2['records_per_s']:,.0f} rec/s → srm "
                f"at {srm['records_per_s'] / max(1, mm2['records_per_s']):.2f} × MM2; CPU-s per million records srm "
                f"{per_million['srm']:.1f}, MM2 {per_million['mm2']:.1f}{whole}; peak RSS srm {srm_rss:,.0f} MB (all "
                f"processes), MM2 {mm2_rss:,.0f} MB"
            )
            for who, run in (("srm", srm_facts), ("MM2", mm2_facts)):
                for remote, seen in run.get("read_committed", {}).items():
                    lines.append(
                        f"    {who} {remote} read read_committed: {seen['records']:,} records, {seen['duplicates']:,} "
                        f"duplicates, {seen['lost']:,} lost; {seen['other_offsets']:,} offsets of commit markers "
                        "(or aborted records)"
                    )
    return lines

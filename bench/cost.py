"""What replicating a GB costs in Lambda at the handler's measured speed, per memory size and architecture.

Lambda gives a function CPU in proportion to its memory: one full vCPU at 1,769 MB, that share of one below it. The
handler's CPU time was measured on one full core, so below 1,769 MB it stretches by 1,769 / memory; the rest of its
wall time (waiting for the target's acknowledgements and the state writes) is waiting, which memory does not change.
GB-seconds of CPU work are then the same at every size up to one vCPU: only the waiting gets cheaper with less memory.
Graviton cannot be measured here: arm64 is assumed as fast as the machine the bench ran on.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FULL_VCPU_MB",
    "LAMBDA_GB_S_USD",
    "LAMBDA_REQUEST_USD",
    "MEMORY_SIZES_MB",
    "billed_seconds",
    "lambda_cost",
]

FULL_VCPU_MB = 1769
MEMORY_SIZES_MB = (512, 1024, FULL_VCPU_MB)
# US East (N. Virginia), first tier; see the README's "Performance and cost" for the sources.
LAMBDA_GB_S_USD = {"x86_64": 0.0000166667, "arm64": 0.0000133334}
LAMBDA_REQUEST_USD = 0.20 / 1e6


def billed_seconds(path: dict[str, Any], memory_mb: int) -> float:
    """Seconds a ``memory_mb`` function runs for the work of ``path`` (a bench result: ``cpu_s`` on one core,
    ``wall_s``); above 1,769 MB no faster (the handler's work is one thread)."""
    waiting = max(0.0, path["wall_s"] - path["cpu_s"])
    return path["cpu_s"] * max(1.0, FULL_VCPU_MB / memory_mb) + waiting


def lambda_cost(path: dict[str, Any], events_per_gb: float) -> dict[str, Any]:
    """Lambda cost of replicating 1 GB (keys + values) at the speed of ``path``, for each of
    :data:`MEMORY_SIZES_MB` on both architectures (``by_memory``), and the cheapest of them. The top-level figures
    are the 1,769 MB (one vCPU) ones, as earlier results.json files hold them."""
    gb = path["bytes"] / 1e9
    rows = []
    for memory_mb in MEMORY_SIZES_MB:
        seconds = billed_seconds(path, memory_mb) / gb
        gb_seconds = seconds * memory_mb / 1024
        rows.append(
            {
                "memory_mb": memory_mb,
                "seconds_per_gb": round(seconds, 1),
                "gb_seconds_per_gb": round(gb_seconds, 1),
                # one invocation at a time per partition: a partition replicates no faster than this
                "partition_records_per_s": round(path["records"] / gb / seconds),
                **{
                    f"usd_per_gb_{arch}": gb_seconds * price + events_per_gb * LAMBDA_REQUEST_USD
                    for arch, price in LAMBDA_GB_S_USD.items()
                },
            }
        )
    cheapest_usd, memory_mb, arch = min(
        (row[f"usd_per_gb_{arch}"], row["memory_mb"], arch) for row in rows for arch in LAMBDA_GB_S_USD
    )
    for row in rows:
        for arch in LAMBDA_GB_S_USD:
            row[f"usd_per_gb_{arch}"] = round(row[f"usd_per_gb_{arch}"], 6)
    full = rows[-1]
    return {
        "memory_mb": full["memory_mb"],
        "seconds_per_gb": full["seconds_per_gb"],
        "gb_seconds_per_gb": full["gb_seconds_per_gb"],
        "invocations_per_gb": round(events_per_gb, 1),
        **{f"usd_per_gb_{arch}": round(full[f"usd_per_gb_{arch}"], 5) for arch in LAMBDA_GB_S_USD},
        "by_memory": rows,
        "cheapest": {"memory_mb": memory_mb, "architecture": arch, "usd_per_gb": round(cheapest_usd, 6)},
    }

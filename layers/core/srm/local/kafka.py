"""Apache Kafka for the local clusters (the demo, the tests, the benchmark): the broker's jars, resolved from Maven
Central by a small Maven project (``infra/kafka/pom.xml``) into a folder beside the Python environment, once.

``python -m srm.local.kafka install [VERSION ...]`` (run by ``make install``, which then has
:mod:`srm.local.clusters` write a broker's class-data archive beside them) fetches them. ``SRM_KAFKA_VERSION``
chooses the version the clusters run (default :data:`KAFKA_VERSION`); ``SRM_KAFKA_HOME`` points at an unpacked
Apache Kafka release instead (its ``libs/`` is used as it is).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = [
    "COMPATIBILITY_VERSIONS",
    "HOME_ENV",
    "KAFKA_VERSION",
    "KafkaInstallError",
    "install",
    "install_root",
    "kafka_version",
    "libs_dir",
]

# The newest 4.x whose broker and MirrorMaker 2 jars all resolve from Maven Central.
KAFKA_VERSION = "4.3.1"
# Also tested (the compatibility tier): the 3.x line many MSK clusters run.
COMPATIBILITY_VERSIONS = ("3.9.1",)

_VERSION_ENV = "SRM_KAFKA_VERSION"
HOME_ENV = "SRM_KAFKA_HOME"
_POM = Path(__file__).resolve().parents[4] / "infra" / "kafka" / "pom.xml"  # layers/core/srm/local → the repo
_READY_MARK = ".complete"


class KafkaInstallError(RuntimeError):
    """Apache Kafka's jars are missing or cannot be resolved; the message says what to do."""


def kafka_version() -> str:
    return os.environ.get(_VERSION_ENV) or KAFKA_VERSION


def install_root() -> Path:
    """Where the Kafka versions' jars are installed (beside Python when its prefix is writable)."""
    beside_python = Path(sys.prefix) / "share" / "serverless-srm" / "kafka"
    if os.access(sys.prefix, os.W_OK) or beside_python.exists():
        return beside_python
    return Path.home() / ".cache" / "serverless-srm" / "kafka"


def libs_dir(version: str | None = None) -> Path:
    """The folder of the broker's jars for ``version`` (default: :func:`kafka_version`); raises when not installed."""
    if os.environ.get(HOME_ENV):
        libs = Path(os.environ[HOME_ENV]) / "libs"
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise KafkaInstallError(
                f"{HOME_ENV}={os.environ[HOME_ENV]} holds no Apache Kafka release (no libs/kafka_2.13-*.jar)"
            )
        return libs
    version = version or kafka_version()
    libs = install_root() / version / "libs"
    if not (libs / _READY_MARK).exists():
        raise KafkaInstallError(
            f"Apache Kafka {version} is not installed: run `make install` (or `python -m srm.local.kafka install "
            f"{version}`), or set {HOME_ENV} to an unpacked Apache Kafka release"
        )
    return libs


def install(version: str | None = None) -> Path:
    """Resolve Apache Kafka ``version`` (broker, MirrorMaker 2, the log4j2 binding) into its libs folder unless it is
    there already. Safe to run concurrently. Returns the folder."""
    version = version or kafka_version()
    target = install_root() / version / "libs"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _READY_MARK).exists():
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaInstallError(
                "Apache Kafka for the local clusters is resolved with Maven, and mvn is not on PATH: install Maven "
                f"(and Java 17+), or set {HOME_ENV} to an unpacked Apache Kafka release"
            )
        if not _POM.exists():
            raise KafkaInstallError(f"{_POM} is missing: install from a checkout of the repository, or set {HOME_ENV}")
        staging = target.with_name("libs.partial")
        shutil.rmtree(staging, ignore_errors=True)
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(_POM),
                "dependency:copy-dependencies",
                f"-Dkafka.version={version}",
                f"-DoutputDirectory={staging}",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
            detail = errors[0].removeprefix("[ERROR] ") if errors else "no jars resolved"
            raise KafkaInstallError(f"could not resolve Apache Kafka {version} from Maven Central: {detail}")
        (staging / _READY_MARK).write_text(version + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m srm.local.kafka", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("install", help="resolve Apache Kafka's jars from Maven Central (once)")
    cmd.add_argument("versions", nargs="*", help=f"default: {KAFKA_VERSION} and {', '.join(COMPATIBILITY_VERSIONS)}")
    args = parser.parse_args(argv)
    for version in args.versions or (KAFKA_VERSION, *COMPATIBILITY_VERSIONS):
        try:
            print(f"Apache Kafka {version}: {install(version)}")
        except KafkaInstallError as e:
            print(f"srm: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

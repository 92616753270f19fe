"""MirrorMaker 2 itself, in dedicated mode, from the same Apache Kafka install as the local brokers.

``make bench`` races it; the tests read what it writes and take over from it. It runs as
``connect-mirror-maker.sh mm2.properties`` runs it: ``org.apache.kafka.connect.mirror.MirrorMaker`` on the jars of
:mod:`srm.local.kafka`, logging through the clusters' log4j2 settings into a file of its own, stopped by PID. Any
other class of that install (a Kafka Connect worker, for the tests of Connect-based replication) runs the same way
(:func:`kafka_java_command`, :class:`KafkaJavaProcess`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from srm.local.clusters import LOG4J2_PROPERTIES, extra_jvm_options
from srm.local.kafka import libs_dir

__all__ = ["KafkaJavaProcess", "MirrorMaker", "kafka_java_command", "mirror_maker_command"]


def kafka_java_command(main_class: str, properties: Path, workdir: Path, heap: str) -> list[str]:
    """The java command line of ``main_class`` of the Kafka install given its ``properties`` file, logging through
    ``workdir/log4j2.properties``."""
    (workdir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java"
    return [
        java,
        "-Xms128m",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        *extra_jvm_options(),
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        "-cp",
        str(libs_dir() / "*"),
        main_class,
        str(properties),
    ]


def mirror_maker_command(properties: Path, workdir: Path, heap: str = "2g") -> list[str]:
    """The java command line of one dedicated-mode node (``heap``: connect-mirror-maker.sh's is 2g)."""
    return kafka_java_command("org.apache.kafka.connect.mirror.MirrorMaker", properties, workdir, heap)


class KafkaJavaProcess:
    """A JVM of the Kafka install, started at once in a session of its own; its output goes to ``workdir/<log>``."""

    def __init__(self, command: list[str], workdir: Path, log: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / log
        self._log_file = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            cwd=workdir,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, graceful: bool = True, timeout: float = 30.0) -> int | None:
        """SIGTERM (Connect, MM2 included, then commits its source offsets) or, not ``graceful``, SIGKILL (a crash:
        what it wrote since its last offset flush is not recorded as replicated). Killed if it has not stopped within
        ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()
        return self.process.returncode


class MirrorMaker(KafkaJavaProcess):
    """One dedicated-mode node; its output goes to ``workdir/mm2.log``."""

    def __init__(self, properties: Path, workdir: Path, heap: str = "2g") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(mirror_maker_command(properties, workdir, heap), workdir, "mm2.log")

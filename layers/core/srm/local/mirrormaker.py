"""MirrorMaker 2 itself, in dedicated mode, from the same Apache Kafka install as the local brokers.

``make bench`` races it; the tests read what it writes and take over from it. It runs as
``connect-mirror-maker.sh mm2.properties`` runs it: ``org.apache.kafka.connect.mirror.MirrorMaker`` on the jars of
:mod:`srm.local.kafka`, logging through the clusters' log4j2 settings into a file of its own, stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from srm.local.clusters import LOG4J2_PROPERTIES, extra_jvm_options
from srm.local.kafka import libs_dir

__all__ = ["MirrorMaker", "mirror_maker_command"]


def mirror_maker_command(properties: Path, workdir: Path, heap: str = "2g") -> list[str]:
    """The java command line of one dedicated-mode node (``heap``: connect-mirror-maker.sh's is 2g)."""
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
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(properties),
    ]


class MirrorMaker:
    """One dedicated-mode node, started at once; its output goes to ``workdir/mm2.log``."""

    def __init__(self, properties: Path, workdir: Path, heap: str = "2g") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "mm2.log"
        self._log_file = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            mirror_maker_command(properties, workdir, heap),
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
        """SIGTERM (MM2 then commits its source offsets) or, not ``graceful``, SIGKILL (a crash: what it wrote since
        its last offset flush is not recorded as replicated). Killed if it has not stopped within ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()
        return self.process.returncode

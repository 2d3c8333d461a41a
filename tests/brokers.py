"""Real brokers of the tests' own (issue 35): a RabbitMQ node and a NATS JetStream server
on free ports, with their data in a temporary folder, started, killed (SIGKILL: nothing
flushed on the way out) and started again on the same data by the tests. Never the
machine's shared brokers (5672, 4222): other work uses them.

Missing binaries skip the tests outside CI and fail them under CI=true (.ci/run installs
`rabbitmq-server` and `nats-server`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.ports import free_port

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
STARTUP = 60.0


def need(binary: str) -> None:
    if not os.path.exists(binary):
        message = f"{binary} is not installed (apt-get install rabbitmq-server nats-server)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def answering(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Broker:
    """A broker process of the tests': `start`, `kill`, `start` again on the same data."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def ready(self) -> bool:
        return answering(self.port)

    def start(self) -> None:
        args, env = self.command()
        log = open(self.folder / "out.log", "ab")  # noqa: SIM115 - the process keeps it
        self.process = subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + STARTUP
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.folder / "out.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{type(self).__name__} did not start:\n{tail}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the broker's whole process group (the Erlang VM, epmd left alone)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None
        deadline = time.monotonic() + 30
        while answering(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)

    stop = kill


class NatsServer(Broker):
    """`config`: the server's configuration file's text (its users, say), read at each
    start: a test changes it and starts the server again (a password rotated)."""

    def __init__(self, folder: Path, config: str = "") -> None:
        self.folder = folder
        self.port = free_port()
        self.config = config

    def command(self) -> tuple[list[str], dict[str, str]]:
        store = self.folder / "jetstream"
        store.mkdir(parents=True, exist_ok=True)
        args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(store)]
        if self.config:
            (self.folder / "nats.conf").write_text(self.config)
            args += ["-c", str(self.folder / "nats.conf")]
        return args, dict(os.environ)


class RabbitNode(Broker):
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.name = f"hltest{uuid.uuid4().hex[:8]}@localhost"

    def command(self) -> tuple[list[str], dict[str, str]]:
        (self.folder / "enabled_plugins").write_text("[].\n")
        # Guest may connect from anywhere (the tests connect to 127.0.0.1 anyway).
        (self.folder / "rabbitmq.conf").write_text("loopback_users = none\n")
        env = {
            **os.environ,
            "HOME": str(self.folder),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.folder / "advanced.config"),
            "RABBITMQ_PID_FILE": str(self.folder / "pid"),
        }
        return [RABBITMQ_SERVER], env

    def ctl(self, *args: str) -> str:
        """rabbitmqctl on this node (its users, its connections); what it printed."""
        _args, env = self.command()
        done = subprocess.run(
            [RABBITMQCTL, "-n", self.name, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    def ready(self) -> bool:
        if not answering(self.port):
            return False
        # The port answers a moment before the node takes connections.
        import pika
        import pika.exceptions

        try:
            pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
            ).close()
            return True
        except pika.exceptions.AMQPError:
            return False


def started(broker: Broker) -> Broker:
    broker.start()
    return broker

"""The Ray executor: each batch's agent phase as a Ray task on a cluster (issue 11 §8).

The coordinator keeps everything that makes evidence: spawn and exit records, lineage, gates,
merges, stores and keys never leave it. What it ships is an :class:`~.unit.AgentUnit` (a git
bundle of the base, the argv, the scratch files, the sandbox settings); what comes back is a
:class:`~.unit.UnitResult` (exit facts, transcript, the branch as a bundle, the worker's
sandbox profile), which the coordinator checks (``gitbundle.apply_branch_bundle``) before
anything of it is recorded.

Polling, never blocking: :meth:`RayHandle.step` asks ``ray.wait`` with a timeout, so the
single-threaded tick loop can keep N batches in flight on the cluster as it does local
processes. A handle also has ``watch``/``wake_at`` like ``supervise.Supervised``, so the loop's
``wait_any`` sleeps on it: a byte written to a pipe by the completion callback of the task's
future (Ray's thread, not ours) wakes the selector. Without that the loop would spin on
``step(0)`` while only remote batches are in flight (measured: 2.8 s of coordinator CPU for four
batches, 0.6 s with the handles in ``wait_any``).

Outcomes are ``harness.orchestrate.supervise.Outcome``, as for local processes: the worker
supervises the agent itself (wall clock, lifetime, idle: ``timeout``/``lifetime``/``hung``
come back from it), :meth:`RayHandle.kill` gives ``killed:<why>``. A lost worker, a dead node,
an object that cannot be fetched, any ``ray.exceptions.RayError`` is an outcome with anomaly
``crash`` (the loop restarts the
batch as a new, recorded attempt). Ray's own retries are off (``max_retries=0``): a retried
task would run an agent a second time without a record of the first.

Per-role limits across the cluster: a unit asks for one unit of the custom resource
``harness_role_<role>`` (:func:`role_resources`), and each node declares as capacity the
role's concurrency on that node, e.g. ``ray start ... --resources='{"harness_role_coder": 8}'``;
Ray queues a task until a node has a free unit. The task asks for no CPU (``num_cpus=0`` by
default): an agent mostly waits on its model, and the role resource is the limit.

A proxied batch (runtime.md §18.7) keeps its recording proxy here, on TCP at
:meth:`RayExecutor.proxy_host` with the batch's access token; the unit names its address and
the worker relays the sandboxed agent's connections to it. The returned stdout and stderr
feed the batch's usage meter (the adapter's own report: cost; a proxied batch's tokens are
its exchanges').

``import ray`` happens only inside this module's functions: the verifier, the runtime and
``harness.orchestrate`` import and run without Ray installed (the ``ray`` extra).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from selectors import EVENT_READ
from typing import Any

from ..git import GitError
from ..model import ProcResult
from ..supervise import Outcome
from ..supervise.limits import check_why
from .gitbundle import BundleError, apply_branch_bundle
from .unit import AgentUnit, UnitResult, portable_unit, run_unit_in_tempdir

__all__ = ["Outcome", "RayExecutor", "RayHandle", "role_resources"]

NAMESPACE = "harness"
POLL_S = 1.0
"""Longest sleep of ``wait_any`` on a handle whose completion callback has not fired."""
_ROLE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def role_resources(role: str) -> dict[str, float]:
    """The custom resource a unit of ``role`` asks for: ``{"harness_role_<role>": 1}``."""
    if not _ROLE.match(role):
        raise ValueError(f"role {role!r}: not a valid Ray resource suffix ([a-z][a-z0-9_-]*)")
    return {f"harness_role_{role}": 1.0}


def _crash_result(why: str, started: float) -> ProcResult:
    return ProcResult(
        exit_code=None,
        signal=None,
        timed_out=False,
        duration_ms=int((time.monotonic() - started) * 1000),
        stdout=b"",
        stderr=f"ray executor: {why}\n".encode("utf-8", "replace"),
    )


class RayHandle:
    """One submitted unit, polled by the tick loop."""

    identity: None = None
    """No local pid/pgid: the process runs on a worker; orphan reaping is the worker's."""

    def __init__(
        self,
        ref: Any,
        unit: AgentUnit,
        land: tuple[Path, Path] | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self._ref = ref
        self._on_output = on_output
        """Fed the worker's stdout and stderr once they are back (the batch's usage meter)."""
        self.unit = unit
        self._land = land
        self._started = time.monotonic()
        self._killed: str | None = None
        self._outcome: Outcome | None = None
        self.unit_result: UnitResult | None = None
        """The worker's full result (tip, branch bundle, profile) once done without a crash."""
        # A wake-up pipe: Ray completes the ref's future on one of its own threads, whose
        # callback writes one byte, so the loop's selector (``wait_any``) wakes at once instead
        # of polling. The lock keeps a late callback from writing to a closed (reused) fd.
        self._lock = threading.Lock()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._closed = False
        future = getattr(ref, "future", None)
        if future is not None:
            future().add_done_callback(self._notify)

    @property
    def done(self) -> bool:
        return self._outcome is not None

    def _notify(self, _future: Any) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # full pipe: a wake-up is pending anyway
                    os.write(self._wfd, b"\0")

    def _close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._rfd)
                os.close(self._wfd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close()

    def watch(self) -> list[tuple[int, int]]:
        """``(fd, events)`` for ``supervise.wait_any``: readable once the task has finished."""
        return [] if self._outcome is not None or self._closed else [(self._rfd, EVENT_READ)]

    def wake_at(self, now: float) -> float:
        """When to step again without a wake-up (``wait_any``): a bounded poll, in case the
        driver loses the cluster and the future never completes."""
        return now if self._outcome is not None else now + POLL_S

    def step(self, wait_s: float) -> Outcome | None:
        """Wait up to ``wait_s`` seconds for the unit; its outcome once finished, else None."""
        if self._outcome is not None:
            return self._outcome
        import ray

        ready, _ = ray.wait([self._ref], timeout=max(0.0, wait_s))
        if not ready:
            return None
        try:
            value = ray.get(self._ref)
        except ray.exceptions.RayError as exc:
            # Cancelled by kill(), worker or node lost, object lost, the task raised (a bad
            # base bundle, git failing on the worker): the batch restarts, unless killed on
            # purpose, when the kill's reason is the anomaly.
            why = f"{type(exc).__name__}: {str(exc)[:2000]}"
            if self._killed is not None:
                why = f"killed ({self._killed}): {why}"
            anomaly = f"killed:{self._killed}" if self._killed is not None else "crash"
            self._outcome = Outcome(_crash_result(why, self._started), anomaly, 0)
        else:
            if not isinstance(value, UnitResult):
                why = f"task returned {type(value).__name__}, not UnitResult"
                self._outcome = Outcome(_crash_result(why, self._started), "crash", 0)
            else:
                self._outcome = self._landed(value)
        self._close()
        return self._outcome

    def _landed(self, value: UnitResult) -> Outcome:
        """The worker's own account (also when it finished before a kill reached it); with a
        landing target, its branch is first applied to the batch's worktree, and a refused
        bundle is a crash (the reason on stderr), never landed."""
        if self._land is not None:
            repo, worktree = self._land
            unit = self.unit
            try:
                if value.branch_bundle is not None:
                    bundle = value.branch_bundle
                    apply_branch_bundle(
                        repo, bundle, branch=unit.branch, base=unit.base, tip=value.tip,
                        worktree=worktree,
                    )  # fmt: skip
                elif value.tip != unit.base:
                    raise BundleError(f"tip {value.tip} reported without a branch bundle")
            except (BundleError, GitError) as exc:
                why = f"branch bundle refused: {exc}"
                return Outcome(_crash_result(why, self._started), "crash", value.idle_ms)
        self.unit_result = value
        if self._on_output is not None:  # what a local agent's meter reads as it runs
            self._on_output("stdout", value.result.stdout)
            self._on_output("stderr", value.result.stderr)
        return Outcome(value.result, value.anomaly, value.idle_ms)

    def kill(self, why: str) -> None:
        """Force-cancel the task (its worker process is killed, and with it the sandboxed
        agent: bubblewrap's ``--die-with-parent``); the next :meth:`step` reports
        ``"killed:<why>"``, as ``Supervised.kill`` does. A unit that already finished keeps
        its outcome. ``why``: a short lowercase token ("stop", "budget")."""
        check_why(why)
        if self._outcome is not None or self._killed is not None:
            return
        import ray

        self._killed = why
        ray.cancel(self._ref, force=True)


class RayExecutor:
    """Submits units to the Ray cluster at ``address`` (``host:port`` of its GCS)."""

    def __init__(self, address: str, *, num_cpus: float = 0.0) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self._remote: Any = None

    def connect(self) -> None:
        """Join the cluster as a driver (no local Ray is started)."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False)
        self._remote = ray.remote(run_unit_in_tempdir)

    def submit(
        self,
        unit: AgentUnit,
        resources: Mapping[str, float],
        *,
        land: tuple[Path, Path] | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> RayHandle:
        """Queue ``unit`` on the cluster with ``resources`` (see :func:`role_resources`).

        ``land``: ``(repo, worktree)`` — when the unit returns, its branch is applied to the
        batch's worktree (``apply_branch_bundle(..., worktree=)``) before the outcome is
        reported, so the caller then sees the worker's commit as if the agent had run there.
        ``on_output(stream, chunk)``: fed the returned stdout and stderr (a usage meter).
        """
        if self._remote is None:
            raise RuntimeError("RayExecutor.submit before connect()")
        ref = self._remote.options(
            max_retries=0,
            retry_exceptions=False,
            num_cpus=self.num_cpus,
            resources=dict(resources),
        ).remote(unit)
        return RayHandle(ref, unit, land, on_output)

    def start(self, run: Any, job: Any) -> RayHandle:
        """The runner's executor hook (``runner.agents.start_agent``): the unit of a batch
        job prepared as for a local agent, submitted with its role's resource, landing in the
        job's worktree. Reads the job's ``batch``, ``base``, ``branch``, ``dirs``, ``worktree``,
        ``tasks``, ``adapter``, ``request``, ``env``, ``stdin``, ``limits`` and the run's
        ``repo``, ``sandbox``, ``capabilities``, ``git_date``. A batch whose command line names
        the replay journal (the scripted agent's) is refused (ValueError): the journal is not
        shipped to workers."""
        request = job.request
        argv = job.adapter.argv(request)
        journal = request.journal_file
        if journal is not None and any(str(journal) in arg for arg in argv):
            # The scripted agent routes its model calls through the run's journal, a file of
            # the state folder: it is not shipped (nor brought back).
            raise ValueError(f"batch {job.batch.id}: the replay journal is not shipped to Ray")
        from ..sandbox.policy import batch_network

        tasks = job.tasks
        proxy = getattr(job, "proxy", None)  # the batch's recording proxy (runtime.md §18)
        unit = portable_unit(
            batch=job.batch.id,
            base=job.base,
            branch=job.branch,
            repo=run.repo,
            dirs=job.dirs,
            argv=argv,
            env=job.env,
            stdin=job.stdin,
            limits=job.limits,
            settings=run.sandbox.settings,
            network=batch_network(tasks, run.capabilities),
            message=f"{job.batch.id}: {', '.join(t.id for t in tasks)}",
            git_date=run.git_date,
            programs=[job.adapter.executable],
            proxy=proxy.address if proxy is not None else None,
            proxy_env=proxy.bridge_env if proxy is not None else None,
            proxy_direct_env=proxy.env if proxy is not None else None,
            egress=proxy.egress if proxy is not None else (),
        )
        meter = getattr(job, "meter", None)  # the adapter's usage report, read from stdout
        return self.submit(
            unit, role_resources(job.batch.role), land=(run.repo, job.worktree),
            on_output=meter.feed if meter is not None else None,
        )  # fmt: skip

    def proxy_host(self) -> str:
        """The address a proxied batch's proxy binds on the coordinator (runtime.md §18): the
        local address of the coordinator's route to the cluster's ``address`` (the host of
        ``--address`` itself when the coordinator runs on the head node; ``127.0.0.1`` for a
        local cluster, or an address that is not ``host:port``). Workers' relays connect to it;
        off loopback the proxy admits only the batch's access token."""
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            return "127.0.0.1"
        host = host.strip("[]")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((host, int(port)))  # UDP: no packet, only the route is chosen
                return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"

    def close(self) -> None:
        """Leave the cluster (the cluster itself keeps running)."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self._remote = None

"""A study's points as Dask tasks (`vmio study --dask ADDRESS`, `run_study(dask=...)`).

Dask's distributed scheduler (https://distributed.dask.org: `Client.submit`,
`distributed.as_completed`, `LocalCluster`) runs each point's simulation on a worker. A task
carries the point's inputs as text, never as paths: the edited stack, the fio job (or every
VM's workload, read on the client), their names (labels in messages and in the result's
`vmio.job_file`, never opened on the worker), the seed and the VM. The worker returns fio's
JSON text; the client stores it in the output directory (`runner._store`), so resume and the
output files are those of a local run, byte for byte: the same code on the same texts with
the same seed gives the same JSON wherever it runs.

    connect(spec, timeout):
        spec "local" or "local:N": a LocalCluster of N worker processes (default: the CPUs
            this process may use, dask.system.CPU_COUNT), one thread each, no memory limit
        else a scheduler address (tcp://host:port; host:port means tcp://): Client(address,
            timeout); unreachable within the timeout -> one line naming it and --dask-timeout
        wait up to the timeout for a worker; every worker's vmio version == ours, else one line
        local workers ignore SIGINT (a terminal's Ctrl-C reaches them too; the client stops them)
    run(client, tasks):
        submit every task (pure=False: a resubmitted point is a new task)
        for each future as it completes (as_completed):
            its result (Future.result: one lost with its worker since is computed again)
            ("ok", json)     -> yield (index, json)           # the caller stores it at once
            ("error", line)  -> VmioError(line)               # bad input, as a local run says
            KilledWorker     -> VmioError: the point and how many workers died running it
                                (the scheduler reschedules a task whose worker dies, up to
                                distributed.scheduler.allowed-failures times)
        on any exit (Ctrl-C, an error): cancel what is left

A point whose job reads files or the environment when it is simulated (fio's `include`,
`read_iolog`, `${VAR}`) runs on the client instead (`reads_this_machine`), with a note, unless
the workers are `local[:N]`'s (spawned here: same files, directory and environment). A worker
checks the version again on each task (a worker may join after `connect`). Dask is
an optional dependency (`pip install 'vmio[dask]'`), imported only here and only when asked.
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Iterator, Mapping
from concurrent.futures import CancelledError
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from vmio.sim import Limits, VmioError, native, simulate_text

INSTALL = "pip install 'vmio[dask]'"
DEFAULT_TIMEOUT = 10.0
"""Seconds `connect` waits for the scheduler, then for a first worker (--dask-timeout)."""

_LOCAL = re.compile(r"local(?::(\d{1,4}))?")
_ADDRESS = re.compile(r"(?:(tcp|tls|ws|wss|ucx)://)?([^/\s]+)")
"""Dask's network transports (distributed.comm's registry, less the in-process one)."""


@dataclass(frozen=True)
class SimTask:
    """What simulating one point needs, all of it text: sent to a worker as it is."""

    stack_text: str
    stack_path: str
    """A label (errors, `vmio.job_file`), never opened."""
    job_text: str | None
    """None: every VM runs its own workload, `jobs`."""
    job_path: str
    jobs: tuple[tuple[str, str, str], ...] | None
    """`(vm, job_text, job_path label)` of each VM's workload, read by the client."""
    seed: int
    vm: str | None
    limits: Limits = Limits()
    """The simulation's bounds (`vmio.simulate`'s `max_events`, `max_sim_time`)."""

    def run(self) -> str:
        """Simulate the point; fio's JSON output as text."""
        if self.jobs is not None:
            max_events, max_sim_time = self.limits.native_args()
            return native().simulate_many(
                self.stack_text,
                self.stack_path,
                list(self.jobs),
                self.seed,
                max_events=max_events,
                max_sim_time=max_sim_time,
            )
        assert self.job_text is not None
        return simulate_text(
            self.stack_text,
            self.stack_path,
            self.job_text,
            self.job_path,
            self.seed,
            self.vm,
            self.limits,
        )


_THIS_MACHINE = re.compile(r"^[ \t]*(?:include[ \t]|read_iolog[ \t]*=)|\$\{", re.M)
"""What makes the simulator read the machine it runs on: fio's `include FILE` and
`read_iolog=FILE` (opened relative to the job file's directory) and `${VAR}` (the process's
environment)."""


def reads_this_machine(task: SimTask) -> bool:
    """Whether simulating `task` reads files or environment variables of the machine it runs
    on (`_THIS_MACHINE` in its job or a VM's workload): such a point runs on the client
    unless the workers share it (`shares_this_machine`)."""
    texts = [task.job_text or ""] if task.jobs is None else [t for _, t, _ in task.jobs]
    return any(_THIS_MACHINE.search(t) for t in texts)


def shares_this_machine(spec: Any) -> bool:
    """Whether the workers of --dask `spec` see this process's files, working directory and
    environment: only `local[:N]`'s, processes spawned by this one."""
    if isinstance(spec, Lazy):
        spec = spec.spec
    return isinstance(spec, str) and _LOCAL.fullmatch(spec) is not None


def parse_spec(spec: str) -> tuple[str, int | str | None]:
    """`("local", N or None)` or `("remote", address)` of a --dask value; a bad one is one line."""
    if m := _LOCAL.fullmatch(spec):
        n = None if m.group(1) is None else int(m.group(1))
        if n is not None and not 1 <= n <= 1024:
            raise VmioError(f"--dask local:N: N is 1..1024 worker processes, not {n}")
        return "local", n
    m = _ADDRESS.fullmatch(spec)
    if m is None or not spec.isascii() or ":" not in m.group(2):
        raise VmioError(
            f"--dask: '{spec}' is not a scheduler address; accepted: tcp://HOST:PORT (what "
            "'dask scheduler' prints; also tls, ws, wss, ucx), HOST:PORT, local or local:N "
            "(N worker processes here)"
        )
    return "remote", spec if m.group(1) else f"tcp://{spec}"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as err:
        raise VmioError(
            f"--dask needs Dask's distributed scheduler, which is not installed ({err.msg}): "
            f"{INSTALL}"
        ) from None
    return distributed


def worker_version() -> str:
    """This process's vmio version (what a worker reports to `check_versions`)."""
    from vmio import version

    return version.__version__


def ignore_interrupts() -> None:
    """On a local worker (its main thread runs the event loop that runs this): SIGINT
    ignored, so that a Ctrl-C does not print each worker's traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def check_versions(versions: Mapping[str, Any], ours: str) -> None:
    """Refuse, in one line, workers whose vmio is not `ours` (`versions`: worker address ->
    version, or the exception raised when the worker could not run vmio at all)."""
    bad = {w: v for w, v in sorted(versions.items()) if v != ours}
    if not bad:
        return
    worker, v = next(iter(bad.items()))
    if isinstance(v, BaseException) and v.args and isinstance(v.args[0], BaseException):
        v = v.args[0]  # Dask wraps what the worker raised
    what = (
        f"cannot run vmio ({type(v).__name__}: {v})"
        if isinstance(v, BaseException)
        else f"runs vmio {v}"
    )
    more = f" (and {len(bad) - 1} more of {len(versions)} workers)" if len(bad) > 1 else ""
    raise VmioError(
        f"--dask: worker {worker} {what}, this client vmio {ours}{more}; install the same "
        "vmio version on every worker"
    )


@contextmanager
def connect(spec: Any, timeout: float = DEFAULT_TIMEOUT) -> Iterator[Any]:
    """A `distributed.Client` for --dask `spec` (see the module doc; a `Client` is used as it
    is and left open), its workers' vmio version checked; closed (and a local cluster
    stopped) on exit."""
    if isinstance(spec, Lazy):
        yield spec.client()
        return
    dist = _distributed()
    if isinstance(spec, dist.Client):
        check_versions(spec.run(worker_version, on_error="return"), worker_version())
        yield spec
        return
    kind, arg = parse_spec(str(spec))
    cluster = None
    if kind == "local":
        try:
            cluster = dist.LocalCluster(
                n_workers=arg,  # None: one per CPU (dask.system.CPU_COUNT)
                threads_per_worker=1,
                processes=True,
                # Dask's default limit (memory / N) would restart a worker running a large
                # point; the simulator checks the memory a point needs before it allocates.
                memory_limit=0,
                # The scheduler's HTTP server (dashboard, health) on a free loopback port:
                # None would still take :8787, and fall back with a warning when taken.
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            )
        except (RuntimeError, OSError, TimeoutError) as err:
            why = _reason(err.__cause__ or err)
            raise VmioError(f"--dask {spec}: cannot start the local Dask workers: {why}") from None
        address = cluster.scheduler_address
    else:
        address = arg
    try:
        try:
            client = dist.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as err:  # ValueError: an unknown scheme
            raise VmioError(
                f"--dask: cannot reach the Dask scheduler at {address} within {timeout:g} s "
                f"(--dask-timeout): {_reason(err)}"
            ) from None
        try:
            try:
                client.wait_for_workers(1, timeout=timeout)
            except (TimeoutError, OSError):
                raise VmioError(
                    f"--dask: the Dask scheduler at {address} has no worker after {timeout:g} s "
                    "(--dask-timeout); start some with 'dask worker " + address + "'"
                ) from None
            check_versions(client.run(worker_version, on_error="return"), worker_version())
            if cluster is not None:
                # Ctrl-C on a terminal reaches the local workers too: this process stops them.
                client.run(ignore_interrupts)
            yield client
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


class Lazy:
    """A --dask cluster connected on first use (`connect` given it) and kept for every later
    use, as a study of several parts needs; closed on exit. A run with every point stored
    connects to nothing."""

    def __init__(self, spec: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.spec, self.timeout = spec, timeout
        self._stack = ExitStack()
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            self._client = self._stack.enter_context(connect(self.spec, self.timeout))
        return self._client

    def __enter__(self) -> Lazy:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client = None
        self._stack.close()


def _killed(err: Exception) -> str:
    """What a `KilledWorker` means, in a line (its attributes changed across Dask versions)."""
    allowed = getattr(err, "allowed_failures", None)
    last = getattr(getattr(err, "last_worker", None), "address", None)
    if isinstance(allowed, int) and last:
        n = allowed + 1
        died = (
            f"{n} Dask worker{'s' if n > 1 else ''} running it died (the scheduler's "
            f"distributed.scheduler.allowed-failures is {allowed}; the last was {last})"
        )
    else:
        died = f"the Dask workers running it died ({_reason(err)})"
    return f"{died}; the points finished so far are saved: run the same command again to resume"


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 160 else text[:159] + "…"


def simulate_on_worker(task: SimTask, version: str) -> tuple[str, str]:
    """A task's body on a worker: `("ok", fio's JSON text)` or `("error", one line)` (vmio's
    errors are returned, not raised: the native `VmioError` does not pickle)."""
    ours = worker_version()
    if ours != version:
        return "error", (
            f"--dask: a worker runs vmio {ours}, this client vmio {version}; install the same "
            "vmio version on every worker"
        )
    try:
        return "ok", task.run()
    except VmioError as err:
        return "error", str(err)


def run(
    client: Any, tasks: Mapping[int, SimTask], labels: Mapping[int, str]
) -> Iterator[tuple[int, str]]:
    """Run `tasks` (grid index -> task) on the cluster; yields `(index, JSON text)` as each
    point completes (see the module doc). `labels` name the points in errors."""
    dist = _distributed()
    version = worker_version()
    futures = {}
    for i, task in tasks.items():
        fut = client.submit(simulate_on_worker, task, version, pure=False)
        futures[fut] = i
    try:
        for fut in dist.as_completed(list(futures), loop=client.loop):
            i = futures[fut]
            try:
                # A result lost with its worker since is computed again: this waits for it.
                status, text = fut.result()
            except dist.KilledWorker as err:
                raise VmioError(f"point {labels[i]}: {_killed(err)}") from None
            except CancelledError:
                raise VmioError(
                    f"point {labels[i]}: its Dask task was cancelled (the scheduler restarted, "
                    "or another client cancelled it); run the same command again to resume"
                ) from None
            except Exception as err:  # noqa: BLE001 - anything a worker raised is one line
                raise VmioError(
                    f"point {labels[i]}: on a Dask worker: {type(err).__name__}: {_reason(err)}"
                ) from None
            fut.release()
            if status != "ok":
                raise VmioError(text)
            yield i, text
    finally:
        left = [f for f in futures if not f.done()]
        if left:
            client.cancel(left)

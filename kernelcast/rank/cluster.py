"""Where measurements run: this machine's GPU, or a Dask cluster with one worker per GPU.

Each Dask worker (one thread, resource GPU=1, CUDA_VISIBLE_DEVICES naming its GPU) runs
`measure_job`, which hands the pair to kernelcast's persistent measurement worker for that
GPU (kernels_runtime/measure.py): a kernel that crashes its process costs that one result,
and the measurement worker is restarted for the next. A Dask worker that dies has its jobs
moved to the others by the scheduler; one that raised is retried (RETRIES).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

GPU_RESOURCE = "GPU"
RETRIES = 2
CONNECT_TIMEOUT_S = 5.0
WORKER_WAIT_S = 30.0
WORKER_HELP = (
    "start one worker per GPU: CUDA_VISIBLE_DEVICES=i dask worker tcp://SCHEDULER:8786 --nthreads 1 --resources GPU=1 (see README)"
)

JobFunction = Callable[[dict[str, Any]], dict[str, Any]]
ResultCallback = Callable[[dict[str, Any]], None]


class ClusterError(Exception):
    """The cluster cannot be started or reached; the message says why and what to do."""


def where_this_runs() -> str:
    """The host and GPU a job ran on, for the per-GPU counts."""
    return f"{socket.gethostname()} GPU {os.environ.get('CUDA_VISIBLE_DEVICES') or '0'}"


def measure_job(job: dict[str, Any]) -> dict[str, Any]:
    """Check and time one variant against its reference on this process's GPU (the first visible one)."""
    from kernelcast.kernels_runtime.measure import Timeouts, measure_pair
    from kernelcast.wire import Measurement

    started = time.perf_counter()
    outcome = measure_pair(job["candidate"], job["reference"], gpu_index=0, timeouts=Timeouts(kernel_s=job["kernel_timeout_s"]))
    return {
        "index": job["index"],
        "outcome": outcome.to_json(),
        "measured": isinstance(outcome, Measurement),
        "seconds": time.perf_counter() - started,
        "where": where_this_runs(),
    }


def lost_job(job: dict[str, Any], error: BaseException) -> dict[str, Any]:
    """The result of a job whose worker kept dying or that raised on every try."""
    name = type(error).__name__
    why = "it killed its Dask worker every time it ran" if name == "KilledWorker" else f"{name}: {error}"
    return {
        "index": job["index"],
        "outcome": {"kind": "crashed", "message": f"no result: {why}"},
        "measured": False,
        "seconds": 0.0,
        "where": "?",
    }


class LocalMeasurer:
    """Measures on this machine's first visible GPU, one variant at a time."""

    width = 1

    def __init__(self, job_function: JobFunction = measure_job) -> None:
        self.job_function = job_function

    def run(self, jobs: list[dict[str, Any]], on_result: ResultCallback) -> None:
        for job in jobs:
            on_result(self.job_function(job))

    def close(self) -> None:
        pass


class DaskMeasurer:
    """Measures on the GPU workers of a Dask cluster, as many variants at once as there are workers."""

    def __init__(self, client: Any, cluster: Any = None, job_function: JobFunction = measure_job, retries: int = RETRIES) -> None:
        self.client, self.cluster, self.job_function, self.retries = client, cluster, job_function, retries

    @property
    def width(self) -> int:
        return max(1, len(gpu_workers(self.client)))

    def run(self, jobs: list[dict[str, Any]], on_result: ResultCallback) -> None:
        from distributed import as_completed

        run_id = uuid.uuid4().hex[:8]
        futures = {
            self.client.submit(
                self.job_function,
                job,
                key=f"kernelcast-measure-{run_id}-{job['index']}",
                resources={GPU_RESOURCE: 1},
                retries=self.retries,
                pure=False,
            ): job
            for job in jobs
        }
        for future in as_completed(list(futures)):
            try:
                result = future.result()
            except Exception as error:  # KilledWorker, or the job raised on every retry
                result = lost_job(futures[future], error)
            on_result(result)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def gpu_workers(client: Any) -> list[str]:
    """Addresses of the workers that offer a GPU resource."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return [address for address, info in workers.items() if info.get("resources", {}).get(GPU_RESOURCE, 0) >= 1]


def visible_gpus() -> list[str]:
    """The GPUs this machine lets kernelcast use: CUDA_VISIBLE_DEVICES when set, else all that NVML sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [device.strip() for device in listed.split(",") if device.strip() and device.strip() != "-1"]
    from kernelcast.kernels_runtime.hardware import detect_local_gpus

    return [str(index) for index in range(len(detect_local_gpus()))]


def start_local_cluster(devices: list[str]) -> Any:
    """A local Dask cluster of one single-threaded worker process per device, each seeing only its GPU."""
    import dask.config
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu{device}": {
            "cls": Nanny,
            "options": {
                "nthreads": 1,
                "resources": {GPU_RESOURCE: 1},
                "env": {"CUDA_VISIBLE_DEVICES": device},
                "name": f"gpu{device}",
                "silence_logs": logging.ERROR,
            },
        }
        for device in devices
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None}}
    # Each Nanny hands the configuration of its creation to its worker. Dask's own GPU monitoring
    # (for its dashboard) would fail a worker whose device NVML cannot map; kernelcast needs none of it.
    with dask.config.set({"distributed.diagnostics.nvml": False}):
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR)


def connect(address: str, devices: list[str] | None = None, job_function: JobFunction = measure_job) -> DaskMeasurer:
    """`auto`: a local cluster over `devices` (default: the visible GPUs); else join the scheduler at `address`."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("--cluster needs Dask distributed: pip install 'kernelcast[cluster]'") from None
    if address == "auto":
        devices = visible_gpus() if devices is None else devices
        if not devices:
            raise ClusterError("--cluster auto found no GPU (CUDA_VISIBLE_DEVICES is empty or NVML sees none)")
        cluster = start_local_cluster(devices)
        return DaskMeasurer(Client(cluster), cluster, job_function)
    if not address.startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        raise ClusterError(f"--cluster {address}: expected auto or a scheduler address such as tcp://host:8786")
    try:
        client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError) as error:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} within {CONNECT_TIMEOUT_S:g} s ({error})") from None
    deadline = time.monotonic() + WORKER_WAIT_S
    while not gpu_workers(client):
        if time.monotonic() > deadline:
            client.close()
            raise ClusterError(
                f"the scheduler at {address} has no worker with resource {GPU_RESOURCE}=1 after {WORKER_WAIT_S:g} s; {WORKER_HELP}"
            )
        time.sleep(0.5)
    return DaskMeasurer(client, None, job_function)

"""The `nccl-tests` engine: `all_reduce_perf` from nccl-tests, one process, all GPUs (-g N).

Judged, like the worker, on its largest size; its NCCL log gives the transport. It has
no localisation and cannot select GPUs itself (CUDA_VISIBLE_DEVICES does).
"""

from __future__ import annotations

import dataclasses
import time

from netdoctor.errors import ParseError
from netdoctor.host.trust import UntrustedProgram, resolve_program
from netdoctor.parsers.nccl_tests import parse_nccl_tests
from netdoctor.probe import engine
from netdoctor.probe.result import ProbeRequest, ProbeResult, SizeRow

PROGRAM = "all_reduce_perf"


class NcclTestsEngine:
    name = "nccl-tests"
    starts_early = False     # it needs discovery's GPU list before it starts (`missing` below)

    def run(self, request: ProbeRequest) -> ProbeResult:
        started = time.monotonic()
        environment = engine.worker_environment(request.env)
        every_gpu = list(request.gpu_links)
        known = {link.index for link in every_gpu}
        missing = [index for index in request.gpus or () if index not in known]
        if every_gpu and missing:
            return engine.skipped(f"GPU index {missing} does not exist: {len(every_gpu)} GPU(s) visible", "bad-gpus",
                                  status="error", engine=self.name, gpus=request.gpus or (),
                                  gpu_count=len(request.gpus or ()))
        links = tuple(every_gpu if request.gpus is None else [link for index in request.gpus for link in every_gpu
                                                              if link.index == index])
        try:
            binary = resolve_program(PROGRAM, environment.get("PATH"))
        except FileNotFoundError:
            return engine.skipped(f"{PROGRAM} (nccl-tests) is not installed", "no-nccl-tests", engine=self.name,
                                  gpu_links=links)
        except UntrustedProgram as error:
            return engine.skipped(str(error), "untrusted-program", status="error", engine=self.name, gpu_links=links)
        if request.gpus is None and not links:
            # Without NVML the GPUs cannot be counted for `-g N`; 0 would read as a GPU-less node.
            return engine.skipped(f"NVML gives no GPU count for {PROGRAM} -g N: pass --gpus, or use --engine nccl",
                                  "no-gpu-count", status="error", engine=self.name, gpu_links=links)
        gpus = request.gpus if request.gpus is not None else tuple(link.index for link in links)
        if len(gpus) < 2:
            return engine.skipped(f"{len(gpus)} GPU(s) selected: an all-reduce needs at least 2", "single-gpu",
                                  engine=self.name, gpu_count=len(gpus), gpu_links=links)
        if request.gpus is not None:
            environment["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in gpus)
        argv = [binary, "-b", str(request.sizes[0]), "-e", str(request.sizes[-1]), "-f", "4", "-g", str(len(gpus)),
                "-w", "5", "-n", "20", "-c", "1"]
        run = engine.run_worker(argv, environment, request.budget_s - (time.monotonic() - started))
        facts = {"gpus": list(gpus), "gpu_count": len(gpus)}
        if run.state != "ok":
            return dataclasses.replace(engine.assemble(run, request.budget_s, **facts), gpu_links=links)
        try:
            table = parse_nccl_tests(run.log)[-1]
        except ParseError as error:
            return dataclasses.replace(engine.assemble(run, request.budget_s, **facts), gpu_links=links,
                                       status="error", reason=f"nccl-tests output not understood: {error}")
        if table.wrong:
            outcome = {"status": "wrong-result", "reason": f"nccl-tests reported {table.wrong} wrong value(s)"}
        elif run.returncode != 0:
            outcome = {"status": "error", "reason": f"{PROGRAM} exited with status {run.returncode}"}
        else:
            outcome = {"status": "ok", "reason": ""}
        result = engine.assemble(run, request.budget_s, **facts, **outcome)
        rows = tuple(SizeRow(bytes=row.size, time_us=row.out_of_place.time_us, algbw_gbps=row.out_of_place.algbw_gbps,
                             busbw_gbps=row.out_of_place.busbw_gbps, verified=not row.out_of_place.wrong)
                     for row in table.rows)
        return dataclasses.replace(result, sizes=rows, gpu_links=links,
                                   busbw_gbps=table.largest.out_of_place.busbw_gbps if table.largest else None)

"""`vmio advise --verify N --target FILE`: the top N configurations run for real on this
machine by the real engine (vmio.real.engine, as `vmio study --engine real` runs a point),
fio on FILE, with the real figures beside the predicted ones.

    FILE: a regular file (a block device is refused); created when absent (--target-size,
        written through once as the real engine's images are: vmio.real.engine.image) and
        removed afterwards; an existing file is used as it is (a job that writes overwrites
        its contents) and kept
    native stack (host mode): the first device's `path` is FILE (others: FILE.<device>;
        the real engine runs a volume of one device only and skips the rest with its reason)
    VM stack (serve mode: vmio serve of the stack, fio's nbd engine): the images are in a
        temporary directory beside FILE, the first device's image a symbolic link to FILE,
        the others files of FILE's size; the directory is removed afterwards
    for each of the top N, in rank order:
        real = Engine.run(stack, job)                       fio's JSON, vmio.replaced: the
                                                            options the engine set
        as_run = the job with the options the engine changed that change the prediction
                 (AS_RUN_OPTIONS), simulated again (the prediction of the job that ran)
        error(figure) = predicted(as_run) / real - 1        vmio.real.compare.relative_error
    a configuration the real engine cannot run (`Skipped`: an HDD device on a flash disk
        without --substitute, a volume of several devices in host mode...) keeps its reason
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmio import stackfile
from vmio.advise.rank import FIGURES, figures, measured_jobs
from vmio.real import engine as realengine
from vmio.sim import VmioError, parse_toml, simulate_text
from vmio.study.runner import set_job_option

AS_RUN_OPTIONS = {"host": ("size", "direct", "iodepth"), "serve": ("size", "iodepth")}
"""Per real-engine mode, the options it may change in a job that change what the simulator
predicts: in host mode a size cut to the file, direct=0 on tmpfs (the host's page cache is
then real); in serve mode a size cut to the export and a synchronous engine's iodepth=1
(its direct=0 is fio's nbd engine's, whose export's cache mode decides O_DIRECT: the guest
still reads the disk, so the prediction keeps the job's direct)."""


@dataclass(frozen=True)
class Target:
    path: Path
    size: int
    created: bool


def check_target(path: Path) -> None:
    """FILE refused unless a non-empty regular file or absent in a directory (module doc);
    checked before anything is simulated."""
    if path.exists() and not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file (a block device is refused)"
        raise VmioError(f"--target '{path}': {what}")
    if path.is_file() and path.stat().st_size <= 0:
        raise VmioError(f"--target '{path}' is empty; remove it or give another file")
    if not path.exists() and not path.parent.is_dir():
        raise VmioError(f"--target '{path}': no directory '{path.parent}'")


def prepare_target(path: Path, size: int) -> Target:
    """FILE checked, and created (written through) when absent (module doc)."""
    check_target(path)
    if path.is_file():
        return Target(path, path.stat().st_size, False)
    realengine.image(path, size)
    return Target(path, size, True)


def _stack_on(stack_text: str, stack_path: str, target: Path, images: Path | None) -> str:
    """The stack with its devices on FILE (module doc); `images`: serve mode's directory."""
    doc = parse_toml(stack_text, stack_path)
    devices = doc.get("device", [])
    if images is None:
        for i, dev in enumerate(devices):
            dev["path"] = str(
                target if i == 0 else target.with_name(f"{target.name}.{dev['name']}")
            )
    elif devices:
        link = images / f"{devices[0]['name']}.img"
        if not link.exists():
            link.symlink_to(target.resolve())
    return stackfile.render(doc)


def run(
    configs: Sequence[tuple[Any, str, str]],
    *,
    target: Target,
    stack_path: str,
    job_path: str,
    vm: str,
    measure: str | None,
    seed: int,
    substitute: bool,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Run each (key, stack text, job text) for real (module doc); one record each:
    {real, predicted_as_run, error, skipped, replaced, notes}."""
    native = stackfile.loads(configs[0][1], stack_path).native if configs else True
    images = (
        None if native else Path(tempfile.mkdtemp(prefix=".vmio-advise-", dir=target.path.parent))
    )
    try:
        opts = realengine.Options(
            images if images is not None else target.path.parent, target.size, substitute
        )
        eng = realengine.Engine(opts)
        out = []
        for key, stack_text, job_text in configs:
            run_stack = _stack_on(stack_text, stack_path, target.path, images)
            log(f"verify {key}: fio on {target.path}")
            try:
                text = eng.run(run_stack, stack_path, [(vm, job_text, job_path)], seed)
            except realengine.Skipped as why:
                log(f"verify {key}: skipped: {why}")
                out.append({"skipped": str(why)})
                continue
            doc = json.loads(text)
            info = doc.get("vmio") or {}
            replaced = {k: str(v) for k, v in (info.get("replaced") or {}).items()}
            as_run = job_text
            for option in AS_RUN_OPTIONS.get(str(info.get("mode")), ()):
                if option in replaced:
                    as_run = set_job_option(as_run, option, replaced[option], job_path)
            pred = figures(
                measured_jobs(
                    json.loads(simulate_text(stack_text, stack_path, as_run, job_path, seed, vm)),
                    measure,
                )
            )
            real = figures(measured_jobs(doc, measure))
            out.append(
                {
                    "mode": info.get("mode"),
                    "replaced": replaced,
                    "real": real,
                    "predicted_as_run": pred,
                    "error": {f: (pred[f] / real[f] - 1 if real[f] else None) for f in FIGURES},
                    "notes": list(info.get("notes") or []),
                }
            )
        return out
    finally:
        if images is not None:
            shutil.rmtree(images, ignore_errors=True)
        if target.created:
            target.path.unlink(missing_ok=True)

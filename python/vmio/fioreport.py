"""Human-readable reports: fio's "normal" text output and the study tables.

`fio_text` renders a fio JSON result the way fio prints it (same line shapes, same unit
choices: fio's `num2str` with 4 significant digits, latencies shown in nsec/usec/msec by
fio's thresholds), so people who read fio output read vmio's without a key. Lines fio would
fill from the live system (pid, date, CPU usage) are printed only when the JSON has them.

`fio_terse` is fio 3.33's terse format version 3 (stat.c `show_thread_status_terse_all`,
`show_ddir_status_terse`; disk_util as diskutil.c `print_disk_util` in terse mode): one line
per `jobs` entry,

    3;fio version;jobname;groupid;error
    read, then write: ;KiB;KiB/s;IOPS;runtime ms ; slat, clat: ;min;max;mean;stddev (usec)
        ;p%=clat usec x 20 (missing ones `0%=0`) ;lat min;max;mean;stddev
        ;bw min;max;agg%;mean;stddev
    ;usr%;sys%;ctx;majf;minf ;7 iodepth levels (%3.1f%%) ;10 usec latency buckets (the nsec
    ones added to the first) ;12 msec buckets (%3.2f%%) ;name;8 disk_util figures per disk

`fio_report` joins several formats as fio does for `--output-format=a,b`: the normal
header lines, then terse, then JSON, then the normal report (stat.c `__show_run_stats`
fills one buffer per format and flushes them in the order terse, json, normal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vmio.fiojson import DIRECTIONS, job_options
from vmio.sim import MAX_PATH_CHARS, VmioError, bounded_text, parse_size

_SI = ("", "k", "M", "G", "T", "P")
_IEC = ("", "Ki", "Mi", "Gi", "Ti", "Pi")


def num2str(num: float, maxlen: int = 4, pow2: bool = False, unit: str = "") -> str:
    """fio's `num2str`: at most `maxlen` digits, divided by 1000 (or 1024) until it fits,
    then as many decimals as the remaining digits allow (`12345` -> `12.3k`)."""
    num = int(num)
    thousand = 1024 if pow2 else 1000
    prefixes = _IEC if pow2 else _SI
    index = 0
    modulo = None
    while index < len(prefixes) - 1 and len(str(num)) > maxlen:
        modulo = num % thousand
        num //= thousand
        index += 1
    if modulo is None:
        return f"{num}{prefixes[index]}{unit}"
    room = maxlen - len(str(num)) - 1
    if room <= 0:
        if modulo >= thousand / 2:
            num += 1
        return f"{num}{prefixes[index]}{unit}"
    frac = round(modulo / thousand, room)
    if frac >= 1.0:  # rounding carried into the integer part
        return f"{num + 1}{prefixes[index]}{unit}"
    return f"{num}.{f'{frac:.{room}f}'[2:]}{prefixes[index]}{unit}"


def _lat_scale(
    lo: float, hi: float, mean: float, dev: float
) -> tuple[str, float, float, float, float]:
    """fio's nsec -> usec -> msec choice for a latency line (`display_lat`)."""
    if lo > 2_000_000 and hi > 99_999_999 and dev > 1_000_000.0:
        return "msec", lo // 1_000_000, hi // 1_000_000, mean / 1e6, dev / 1e6
    if lo > 2000 and hi > 99_999 and dev > 1000.0:
        return "usec", lo // 1000, hi // 1000, mean / 1e3, dev / 1e3
    return "nsec", lo, hi, mean, dev


def _lat_line(name: str, stats: Mapping[str, Any]) -> str | None:
    if not stats or not stats.get("N"):
        return None
    base, lo, hi, mean, dev = _lat_scale(
        int(stats["min"]), int(stats["max"]), float(stats["mean"]), float(stats["stddev"])
    )
    return (
        f"    {name} ({base}): min={num2str(lo, 6)}, max={num2str(hi, 6)}, "
        f"avg={mean:5.2f}, stdev={dev:5.2f}"
    )


def _percentile_lines(name: str, stats: Mapping[str, Any]) -> list[str]:
    pct = stats.get("percentile") or {}
    if not pct:
        return []
    items = sorted((float(k), int(v)) for k, v in pct.items())
    lo, hi = items[0][1], items[-1][1]
    if lo > 2_000_000 and hi > 99_999_999:
        base, steps = "msec", 2
    elif lo > 2000 and hi > 99_999:
        base, steps = "usec", 1
    else:
        base, steps = "nsec", 0
    cells = []
    for p, value in items:
        for _ in range(steps):
            value = (value + 999) // 1000
        cells.append(f"{p:5.2f}th=[{value:5d}]")
    lines = [f"    {name} percentiles ({base}):"]
    for i in range(0, len(cells), 4):
        last = i + 4 >= len(cells)
        lines.append("     | " + ", ".join(cells[i : i + 4]) + ("" if last else ","))
    return lines


def _bs_text(opts: Mapping[str, str]) -> str:
    parts = opts.get("bs", opts.get("blocksize", "4k")).split(",")
    try:
        sizes = [parse_size(p) if p else parse_size(parts[0]) for p in parts]
    except VmioError:
        return ", ".join(parts)
    sizes += [sizes[-1]] * (3 - len(sizes))
    return ", ".join(
        f"({d}) {num2str(s, pow2=True, unit='B')}-{num2str(s, pow2=True, unit='B')}"
        for d, s in zip("RWT", sizes, strict=False)
    )


def _percent_map(level: Mapping[str, Any], fmt: str = "{:.1f}") -> str:
    return ", ".join(f"{k}={fmt.format(float(v))}%" for k, v in level.items())


def _job_lines(result: Mapping[str, Any], index: int) -> list[str]:
    job = result["jobs"][index]
    seed = result.get("vmio", {}).get("seed")
    # One entry is one job, or a group_reporting group of `vmio_group_jobs`.
    jobs_in_job = int(job.get("vmio_group_jobs", 1))
    out = [
        f"{job['jobname']}: (groupid={job.get('groupid', 0)}, jobs={jobs_in_job}): "
        f"err={int(job.get('error', 0)):2d}: simulated by vmio, seed={seed}"
    ]
    for d in DIRECTIONS:
        st = job.get(d) or {}
        if not st.get("total_ios"):
            continue
        out.append(
            f"  {d}: IOPS={num2str(st.get('iops', 0))}, "
            f"BW={num2str(st['bw_bytes'], pow2=True, unit='B/s')} "
            f"({num2str(st['bw_bytes'], unit='B/s')})"
            f"({num2str(st['io_bytes'], pow2=True, unit='B')}/{int(st.get('runtime', 0))}msec)"
        )
        for name, key in (("slat", "slat_ns"), ("clat", "clat_ns"), (" lat", "lat_ns")):
            line = _lat_line(name, st.get(key) or {})
            if line:
                out.append(line)
        out += _percentile_lines("clat", st.get("clat_ns") or {})
        if st.get("bw_samples"):
            out.append(
                f"   bw (  KiB/s): min={int(st['bw_min']):5d}, max={int(st['bw_max']):5d}, "
                f"per={float(st.get('bw_agg', 100.0)):3.2f}%, avg={float(st['bw_mean']):5.2f}, "
                f"stdev={float(st['bw_dev']):5.2f}, samples={int(st['bw_samples'])}"
            )
        if st.get("iops_samples"):
            out.append(
                f"   iops        : min={int(st['iops_min']):5d}, max={int(st['iops_max']):5d}, "
                f"avg={float(st['iops_mean']):5.2f}, stdev={float(st['iops_stddev']):5.2f}, "
                f"samples={int(st['iops_samples'])}"
            )
    for unit in ("nsec", "usec", "msec"):
        dist = job.get(f"latency_{unit[0]}s") or {}
        shown = {k: v for k, v in dist.items() if float(v) >= 0.01}
        if shown:
            out.append(f"  lat ({unit})   : " + _percent_map(shown, "{:.2f}"))
    if "usr_cpu" in job:
        out.append(
            f"  cpu          : usr={float(job['usr_cpu']):.2f}%, sys={float(job['sys_cpu']):.2f}%, "
            f"ctx={int(job.get('ctx', 0))}, majf={int(job.get('majf', 0))}, "
            f"minf={int(job.get('minf', 0))}"
        )
    if job.get("iodepth_level"):
        out.append("  IO depths    : " + _percent_map(job["iodepth_level"]))
    if job.get("iodepth_submit"):
        out.append("     submit    : " + _percent_map(job["iodepth_submit"]))
    if job.get("iodepth_complete"):
        out.append("     complete  : " + _percent_map(job["iodepth_complete"]))
    totals = ",".join(str(int((job.get(d) or {}).get("total_ios", 0))) for d in DIRECTIONS)
    out.append(f"     issued rwts: total={totals},0 short=0,0,0,0 dropped=0,0,0,0")
    if "latency_depth" in job:
        out.append(
            f"     latency   : target={int(job['latency_target'])}, "
            f"window={int(job['latency_window'])}, "
            f"percentile={float(job['latency_percentile']):.2f}%, "
            f"depth={int(job['latency_depth'])}"
        )
    iozone = job.get("vmio_iozone")
    if iozone:
        out.append("  iozone (KB/s):")
        out += iozone["table"].rstrip("\n").split("\n")
    return out


def _group_lines(result: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    groups = sorted({int(j.get("groupid", 0)) for j in result["jobs"]})
    labels = {"read": "   READ", "write": "  WRITE", "trim": "   TRIM"}
    for g in groups:
        jobs = [j for j in result["jobs"] if int(j.get("groupid", 0)) == g]
        out.append(f"Run status group {g} (all jobs):")
        for d in DIRECTIONS:
            stats = [j.get(d) or {} for j in jobs]
            stats = [s for s in stats if s.get("total_ios")]
            if not stats:
                continue
            bws = [int(s["bw_bytes"]) for s in stats]
            io = sum(int(s["io_bytes"]) for s in stats)
            runs = [int(s.get("runtime", 0)) for s in stats]
            total = sum(bws)

            def both(v: int) -> tuple[str, str]:
                return num2str(v, pow2=True, unit="B/s"), num2str(v, unit="B/s")

            p, palt = both(total)
            lo, loalt = both(min(bws))
            hi, hialt = both(max(bws))
            out.append(
                f"{labels[d]}: bw={p} ({palt}), {lo}-{hi} ({loalt}-{hialt}), "
                f"io={num2str(io, pow2=True, unit='B')} ({num2str(io, unit='B')}), "
                f"run={min(runs)}-{max(runs)}msec"
            )
    return out


def fio_text(result: Mapping[str, Any]) -> str:
    """fio's normal (human) output for a fio JSON result, as one string ending in a newline."""
    return _header_text(result) + _body_text(result)


def _header_text(result: Mapping[str, Any]) -> str:
    """The lines fio's normal output prints before the run: each job, version, process count."""
    lines: list[str] = []
    for i, job in enumerate(result["jobs"]):
        opts = job_options(result, i)
        lines.append(
            f"{job['jobname']}: (g={job.get('groupid', 0)}): rw={opts.get('rw', 'read')}, "
            f"bs={_bs_text(opts)}, ioengine={opts.get('ioengine', 'psync')}, "
            f"iodepth={opts.get('iodepth', '1')}"
        )
    lines.append(str(result.get("fio version", "vmio")))
    n = len(result["jobs"])
    lines.append(f"Starting {n} process{'es' if n != 1 else ''} (simulated)")
    return "\n".join(lines) + "\n"


def _body_text(result: Mapping[str, Any]) -> str:
    """fio's normal output after the run: per job, per group, disks (and vmio's lines)."""
    lines = [""]
    for i in range(len(result["jobs"])):
        lines += _job_lines(result, i)
        lines.append("")
    lines += _group_lines(result)
    disks = result.get("disk_util") or []
    if disks:
        lines.append("")
        lines.append("Disk stats (read/write):")
        for d in disks:
            lines.append(
                f"  {d['name']}: ios={int(d.get('read_ios', 0))}/{int(d.get('write_ios', 0))}, "
                f"merge={int(d.get('read_merges', 0))}/{int(d.get('write_merges', 0))}, "
                f"ticks={int(d.get('read_ticks', 0))}/{int(d.get('write_ticks', 0))}, "
                f"in_queue={int(d.get('in_queue', 0))}, util={float(d.get('util', 0.0)):.2f}%"
            )
    vmio = result.get("vmio") or {}
    if vmio:
        devices = ", ".join(
            f"{d.get('name')} ({d.get('model')})" for d in vmio.get("devices") or []
        )
        lines.append("")
        lines.append(
            f"vmio: seed={vmio.get('seed')}, virtual time="
            f"{int(vmio.get('virtual_time_ns', 0)) / 1e9:.3f}s, "
            f"events={vmio.get('events')}, devices: {devices or '-'}"
        )
        for d in vmio.get("devices") or []:
            st = d.get("stats") or {}
            if st.get("flash_write_bytes"):
                host = int(st.get("write_bytes", 0))
                flash = int(st["flash_write_bytes"])
                waf = f"{flash / host:.2f}" if host else "-"
                lines.append(
                    f"vmio: {d.get('name')}: flash writes {flash / 2**20:.0f} MiB for host "
                    f"writes {host / 2**20:.0f} MiB (WAF {waf}), GC {int(st.get('gc_count', 0))} "
                    f"collections, {int(st.get('gc_ns', 0)) / 1e9:.1f} s of die time"
                )
        pc = vmio.get("page_cache") or {}
        if int(pc.get("hit_pages", 0)) + int(pc.get("miss_pages", 0)) > 0:
            lines.append(
                f"vmio: host page cache: hit ratio {float(pc.get('hit_ratio', 0.0)):.3f}, "
                f"written back {int(pc.get('written_back_pages', 0)) * 4096 / 2**20:.0f} MiB"
            )
        lines += _pdc_lines(vmio.get("pdc") or [])
        if vmio.get("cpu"):
            lines += _cpu_lines(vmio["cpu"], int(vmio.get("virtual_time_ns") or 0))
        lines += _guest_lines(vmio.get("guests") or [])
        vms = vmio.get("vms") or []
        if len(vms) > 1:
            share = vmio.get("share") or {}
            parts = ", ".join(
                f"{v['name']} (weight {v['weight']}) {v['bw_bytes'] / 1e6:.1f} MB/s" for v in vms
            )
            err, jain = share.get("error_rate_pct"), share.get("jain_index")
            lines.append(
                f"vmio: shares: {parts}; error rate "
                f"{'-' if err is None else f'{err:.1f} %'}, Jain's index "
                f"{'-' if jain is None else f'{jain:.3f}'}"
            )
        lines += _breakdown_lines(vmio.get("breakdown") or [])
    return "\n".join(lines) + "\n"


def _ns_text(ns: float) -> str:
    """A duration in fio's units: ns below 1 us, us below 1 ms, else ms."""
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} us"
    return f"{ns / 1e6:.2f} ms"


def _breakdown_lines(jobs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the time went (`vmio.breakdown`, sim/breakdown.rs): per job, each layer that
    took any time, its mean, share of the mean latency and percentiles."""
    lines: list[str] = []
    for job in jobs:
        layers = [x for x in job.get("layers") or [] if float(x.get("mean_ns", 0)) > 0]
        if not layers:
            continue
        total = sum(float(x["mean_ns"]) for x in layers)
        lines.append(
            f"vmio: where the time went, job '{job.get('job')}' (mean lat {_ns_text(total)}):"
        )
        rows = [["layer", "mean", "share", "p50", "p99", "p99.9"]]
        rows += [
            [
                str(x["layer"]),
                _ns_text(float(x["mean_ns"])),
                f"{100 * float(x.get('share', 0)):.1f} %",
                _ns_text(int(x.get("p50_ns", 0))),
                _ns_text(int(x.get("p99_ns", 0))),
                _ns_text(int(x.get("p99.9_ns", 0))),
            ]
            for x in layers
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            cells = [r[0].ljust(widths[0])]
            cells += [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
            lines.append("vmio:   " + "  ".join(cells))
    return lines


#: The formats of `--output-format` (fio's `output-format`; a comma list joins several).
OUTPUT_FORMATS = ("normal", "json", "json+", "terse")


def output_formats(text: str) -> list[str]:
    """fio's comma list of output formats, each once, or one error line naming the accepted."""
    names = [n.strip() for n in text.split(",")]
    bad = [n for n in names if n not in OUTPUT_FORMATS]
    if bad or not names:
        raise VmioError(
            f"--output-format: '{bad[0] if bad else text}' is not a format; accepted: "
            f"{', '.join(OUTPUT_FORMATS)} or a comma list of them"
        )
    return list(dict.fromkeys(names))


def fio_report(result: Mapping[str, Any], json_text: str, formats: Sequence[str]) -> str:
    """The report of `formats` (see the module doc) for a result and its JSON text. vmio's
    JSON carries json+'s clat `bins` in both `json` and `json+` (a superset of fio's json)."""
    out = _header_text(result) if "normal" in formats else ""
    if "terse" in formats:
        out += fio_terse(result)
    if "json" in formats or "json+" in formats:
        out += json_text if json_text.endswith("\n") else json_text + "\n"
    if "normal" in formats:
        out += _body_text(result)
    return out


def _terse_lat(stats: Mapping[str, Any]) -> str:
    if not stats.get("N"):
        return ";0;0;0.000000;0.000000"
    return (
        f";{int(stats['min']) // 1000};{int(stats['max']) // 1000}"
        f";{float(stats['mean']) / 1000:f};{float(stats['stddev']) / 1000:f}"
    )


def _terse_dir(st: Mapping[str, Any]) -> str:
    runtime = int(st.get("runtime", 0))
    io_bytes, ios = int(st.get("io_bytes", 0)), int(st.get("total_ios", 0))
    bw = 1000 * io_bytes // runtime // 1024 if runtime else 0
    iops = 1000 * ios // runtime if runtime else 0
    out = f";{io_bytes >> 10};{bw};{iops};{runtime}"
    out += _terse_lat(st.get("slat_ns") or {}) + _terse_lat(st.get("clat_ns") or {})
    percentiles = (st.get("clat_ns") or {}).get("percentile") or {}
    pct = sorted((float(k), int(v)) for k, v in percentiles.items())
    cells = [f";{p:f}%={v // 1000}" for p, v in pct[:20]]
    out += "".join(cells) + ";0%=0" * (20 - len(cells))
    out += _terse_lat(st.get("lat_ns") or {})
    if st.get("bw_samples"):
        out += (
            f";{int(st['bw_min'])};{int(st['bw_max'])};{float(st['bw_agg']):f}%"
            f";{float(st['bw_mean']):f};{float(st['bw_dev']):f}"
        )
    else:
        out += ";0;0;0.000000%;0.000000;0.000000"
    return out


def fio_terse(result: Mapping[str, Any]) -> str:
    """fio's terse output, version 3 (see the module doc), one line per `jobs` entry."""
    version = str(result.get("fio version", "vmio"))
    disks = "".join(
        f";{d['name']};{int(d.get('read_ios', 0))};{int(d.get('write_ios', 0))}"
        f";{int(d.get('read_merges', 0))};{int(d.get('write_merges', 0))}"
        f";{int(d.get('read_ticks', 0))};{int(d.get('write_ticks', 0))}"
        f";{int(d.get('in_queue', 0))};{float(d.get('util', 0.0)):3.2f}%"
        for d in result.get("disk_util") or []
    )
    lines = []
    for job in result["jobs"]:
        line = f"3;{version};{job['jobname']};{int(job.get('groupid', 0))}"
        line += f";{int(job.get('error', 0))}"
        line += _terse_dir(job.get("read") or {}) + _terse_dir(job.get("write") or {})
        line += (
            f";{float(job.get('usr_cpu', 0.0)):f}%;{float(job.get('sys_cpu', 0.0)):f}%"
            f";{int(job.get('ctx', 0))};{int(job.get('majf', 0))};{int(job.get('minf', 0))}"
        )
        line += "".join(f";{float(v):3.1f}%" for v in (job.get("iodepth_level") or {}).values())
        lat_ns = sum(float(v) for v in (job.get("latency_ns") or {}).values())
        lat_us = [float(v) for v in (job.get("latency_us") or {}).values()]
        if lat_us:
            lat_us[0] += lat_ns
        line += "".join(f";{v:3.2f}%" for v in lat_us)
        line += "".join(f";{float(v):3.2f}%" for v in (job.get("latency_ms") or {}).values())
        lines.append(line + disks)
    return "".join(line + "\n" for line in lines)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def _pdc_lines(disks: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per `cache = "pdc"` disk: the journal ranges its detector predicts at the end, when it
    first detected one, the writes it sent around the host page cache, and its accuracy
    against the guest's true journal."""
    mib = 2**20
    lines = []
    for d in disks:
        ranges = ", ".join(
            f"[{lo / mib:.1f}, {hi / mib:.1f}) MiB" for lo, hi in d.get("ranges") or []
        )
        first = next((e for e in d.get("events") or [] if e.get("kind") == "detected"), None)
        when = f" (first at {int(first['at_ns']) / 1e9:.3f} s)" if first else ""
        precision, recall = d.get("precision"), d.get("recall")
        accuracy = (
            ""
            if recall is None
            else f"; precision {'-' if precision is None else f'{precision:.3f}'}, "
            f"recall {recall:.3f}"
        )
        lines.append(
            f"vmio: pdc {d.get('vm')} {d.get('disk')}: journal {ranges or 'not detected'}{when}; "
            f"{int(d.get('bypassed_writes', 0))} of {int(d.get('writes', 0))} writes "
            f"({int(d.get('bypassed_bytes', 0)) / mib:.1f} MiB) around the host cache{accuracy}"
        )
    return lines


def _cpu_lines(cpu: Mapping[str, Any], virtual_ns: int) -> list[str]:
    """The CPU layer (a stack with `[cpu]`): each core's busy share of the run's
    `virtual_ns`, and per kind of host thread its CPU time, its time waiting for a core and
    its migrations."""
    busy = [int(b) for b in cpu.get("core_busy_ns") or []]
    threads = cpu.get("threads") or []
    span = max(virtual_ns, 1)
    cores = ", ".join(f"{100 * b / span:.0f} %" for b in busy) or "not tracked (dedicated)"
    lines = [
        f"vmio: cpu {cpu.get('model')} on {cpu.get('cores')} cores ({cpu.get('hypervisor')}): "
        f"cores busy {cores}"
    ]
    kinds: dict[str, list[int]] = {}
    for t in threads:
        k = kinds.setdefault(str(t.get("kind")), [0, 0, 0, 0])
        k[0] += 1
        k[1] += int(t.get("cpu_ns", 0))
        k[2] += int(t.get("wait_ns", 0))
        k[3] += int(t.get("migrations", 0))
    for kind, (n, used, waited, moved) in kinds.items():
        lines.append(
            f"vmio: cpu {n} {kind} thread{'s' if n > 1 else ''}: {used / 1e6:.1f} ms on a core, "
            f"{waited / 1e6:.1f} ms waiting for one, {moved} migrations"
        )
    return lines


def _guest_lines(guests: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per VM with a guest kernel: its page cache, and per disk its traffic and journal."""
    mib = 2**20
    lines = []
    for g in guests:
        vm = g.get("vm")
        pc = g.get("page_cache") or {}
        dirty = int(pc.get("dirty_bytes", 0)) / mib
        back = int(pc.get("written_back_bytes", 0)) / mib
        lines.append(
            f"vmio: guest {vm}: page cache hit ratio {float(pc.get('hit_ratio', 0.0)):.3f}, "
            f"dirty {dirty:.1f} MiB at the end, written back {back:.0f} MiB"
        )
        for d in g.get("disks") or []:
            read, written = int(d.get("read_bytes", 0)), int(d.get("write_bytes", 0))
            if read + written == 0:
                continue
            fsyncs, flushes = int(d.get("fsyncs", 0)), int(d.get("flushes", 0))
            line = (
                f"vmio: guest {vm} {d.get('disk')}: read {read / mib:.1f} MiB, wrote "
                f"{written / mib:.1f} MiB, {flushes} flushes, {fsyncs} fsyncs"
            )
            j = d.get("journal")
            if j:
                share = 100 * float(d.get("journal_share", 0.0))
                mean = float(j.get("mean_commit_blocks", 0.0))
                jblocks = int(d.get("journal_written_blocks", 0))
                line += (
                    f"; journal: {share:.1f} % of bytes written, {int(j.get('commits', 0))} "
                    f"commits of {mean:.1f} blocks (max {int(j.get('max_commit_blocks', 0))}), "
                    f"{_pct(int(d.get('journal_flushes', 0)), flushes)} of flushes, "
                    f"{_pct(int(d.get('fsyncs_committing', 0)), fsyncs)} of fsyncs committing, "
                    f"{_pct(jblocks, int(d.get('written_blocks', 0)))} of distinct blocks written"
                )
            lines.append(line)
    return lines


def result_notes(result: Mapping[str, Any], job_path: str) -> list[str]:
    """The `vmio: note:` lines of a result: each fio option the simulator does not model,
    then the simulator's own notes (what it approximated), then an interruption; a line
    repeated is given once with its count (`collapse_repeats`)."""
    vmio = result.get("vmio") or {}
    lines = [
        f"vmio: note: fio option '{bounded_text(str(opt['name']))}' "
        f"({bounded_text(str(opt.get('file', job_path)), MAX_PATH_CHARS)}:{opt['line']}) "
        "is not modelled; ignored"
        for opt in vmio.get("ignored_options") or []
    ]
    lines += [f"vmio: note: {note}" for note in vmio.get("notes") or []]
    if (stop := vmio.get("interrupted")) is not None:
        lines.append(
            f"vmio: note: interrupted at simulated time {stop['virtual_time_ns'] / 1e9:.3f} s; "
            "the report covers what ran so far"
        )
    return collapse_repeats(lines)


def collapse_repeats(lines: Sequence[str]) -> list[str]:
    """Each distinct line once, in first-seen order, with ` (xN)` when it came N > 1 times
    (a note of every clone of a `numjobs` job)."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [line if n == 1 else f"{line} (x{n})" for line, n in counts.items()]


# --- plain-text tables -------------------------------------------------------------------


def format_mb_s(value: float | None) -> str:
    """A bandwidth in MB/s for a table cell: 1 decimal below 1000, none above, `-` if absent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None
) -> str:
    """A plain table with a rule under the header; `align` per column: `l` or `r`."""
    align = align or "l" + "r" * (len(header) - 1)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        cells = [
            str(c).ljust(w) if a == "l" else str(c).rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(r) for r in rows)])

"""DEV-ONLY fake of vmio._native (never committed). Crude numbers, right shapes."""
import json
import random
import re
import tomllib

class VmioError(Exception):
    pass

def version():
    return "0.0.0-fake"

_LAYOUTS = {"single", "linear", "stripe", "raid0"}
_RW = {"read", "write", "randread", "randwrite", "rw", "readwrite", "randrw", "trim", "randtrim"}

def _size(s):
    m = re.fullmatch(r"(\d+)([kmgt]?)(i?b?)", str(s).strip().lower())
    if not m:
        raise ValueError(s)
    return int(m.group(1)) * 1024 ** ("_kmgt".index(m.group(2)) if m.group(2) else 0)

def _parse_job(text, path):
    sections, cur, glob, ignored = [], None, {}, []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            name = line[1:-1]
            if name == "global":
                cur = glob
            else:
                cur = {}
                sections.append((name, cur))
            continue
        k, _, v = line.partition("=")
        k, v = k.strip(), v.strip()
        if k == "rw" and v not in _RW:
            raise VmioError(f"{path}:{n}: fio option 'rw': unknown value '{v}'; accepted: " + ", ".join(sorted(_RW)))
        if k in ("group_reporting", "numa_cpu_nodes"):
            ignored.append({"name": k, "line": n})
        cur[k] = v
    return glob, sections, ignored

def simulate(stack_text, stack_path, job_text, job_path, seed, vm=None):
    try:
        stack = tomllib.loads(stack_text)
    except tomllib.TOMLDecodeError as e:
        raise VmioError(f"{stack_path}: {e}")
    devs = {d["name"] for d in stack.get("device", [])}
    for i, v in enumerate(stack.get("volume", [])):
        if v.get("layout") not in _LAYOUTS:
            raise VmioError(f"{stack_path}: volume[{i}].layout: unknown layout '{v.get('layout')}'; accepted: single, linear, stripe, raid0")
        for d in v.get("devices", []):
            if d not in devs:
                raise VmioError(f"{stack_path}: volume[{i}].devices: no [[device]] named '{d}'")
    glob, sections, ignored = _parse_job(job_text, job_path)
    layout = stack["volume"][0]["layout"]
    cache = stack["vm"][0]["disk"][0]["cache"]
    rng = random.Random(seed)
    jobs = []
    for name, opts in sections:
        eff = {**glob, **opts}
        rw = eff.get("rw", "read")
        bs = _size(eff.get("bs", "4k"))
        runtime = int(eff.get("runtime", "20")) * 1000
        seq = {"linear": 211e6, "stripe": min(368e6, 151e6 * (bs / 32768) ** 0.3), "raid0": 233e6 if bs <= 32768 else 355e6, "single": 211e6}[layout]
        base = seq if not rw.startswith("rand") else 68e6 * (bs / 32768) ** 0.5
        if rw == "randrw":
            base = 35e6 * (bs / 32768) ** 0.5
        if cache == "writeback":
            base *= 80 if rw == "read" else (12 if rw == "randread" else 1.3)
        if rw.startswith("rand"):
            base *= 1 + rng.uniform(-0.02, 0.02)
        dirs = {"read": ["read"], "randread": ["read"], "randrw": ["read", "write"], "rw": ["read", "write"], "write": ["write"], "randwrite": ["write"]}.get(rw, ["read"])
        job = {"jobname": name, "groupid": 0, "error": 0, "job options": opts, "job_runtime": runtime}
        for d in ("read", "write", "trim"):
            bw = base / len(dirs) if d in dirs else 0
            ios = int(bw * runtime / 1000 / bs)
            mean = 1e9 * bs / bw if bw else 0
            job[d] = {"io_bytes": ios * bs, "io_kbytes": ios * bs // 1024, "bw_bytes": int(bw), "bw": int(bw / 1024), "iops": bw / bs if bw else 0, "runtime": runtime if bw else 0, "total_ios": ios,
                      "slat_ns": {"min": 1000, "max": 5000, "mean": 2000.0, "stddev": 300.0, "N": ios},
                      "clat_ns": {"min": int(mean * 0.5), "max": int(mean * 4), "mean": mean, "stddev": mean * 0.3, "N": ios, "percentile": {k: int(mean * f) for k, f in [("1.000000", .6), ("5.000000", .7), ("10.000000", .8), ("20.000000", .85), ("30.000000", .9), ("40.000000", .95), ("50.000000", 1.0), ("60.000000", 1.05), ("70.000000", 1.1), ("80.000000", 1.2), ("90.000000", 1.4), ("95.000000", 1.6), ("99.000000", 2.0), ("99.500000", 2.5), ("99.900000", 3.0), ("99.950000", 3.5), ("99.990000", 3.9)]} if bw else {}},
                      "lat_ns": {"min": int(mean * 0.5) + 1000, "max": int(mean * 4) + 5000, "mean": mean + 2000, "stddev": mean * 0.3, "N": ios}}
        jobs.append(job)
    out = {"fio version": "vmio-0.0.0-fake", "timestamp": 0, "time": "", "global options": glob, "jobs": jobs,
           "disk_util": [{"name": "sdb", "read_ios": 10, "write_ios": 0, "read_merges": 0, "write_merges": 0, "read_ticks": 100, "write_ticks": 0, "in_queue": 100, "util": 99.5}],
           "vmio": {"seed": seed, "stack": stack, "job_file": job_path, "ignored_options": ignored, "devices": [{"name": d, "model": "hdd", "stats": {}, "params": {}} for d in sorted(devs)], "virtual_time_ns": 20_000_000_000, "events": 12345}}
    return json.dumps(out, indent=2) + "\n"

def bench(case):
    if case not in ("hdd-raid0-randread-qd32", "pagecache-hit-randread-4k"):
        raise VmioError(f"unknown bench case '{case}'")
    return {"case": case, "simulated_ios": 1000000, "wall_s": 0.5, "ios_per_s": 2e6, "peak_rss_bytes": 50 * 2**20}

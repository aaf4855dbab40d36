"""What a report shows, read from an output directory with a bound on every input.

```text
kind = the first of KINDS whose marker files DIR holds (advise.json; compare.csv with real/
       and sim/; results.csv with points.csv; compare.csv), else one error line listing them
walk DIR and its subdirectories up to MAX_DEPTH, at most MAX_FILES entries, in name order,
never into json/ real/ sim/ .vmio-partial/ nor through a symbolic link:
    *.csv            -> a table (every cell as the CSV has it), at most MAX_ROWS rows
    *.png *.svg      -> a figure (the file's bytes, checked by their magic), at most MAX_FIGURES
    *.toml *.fio     -> an input file (stack, job, experiment), shown as text
    *.txt            -> a text report (tables.txt, compare.txt, fit.txt)
    calibration/measurements.json -> the calibration table and the machine it ran on
    advise.json      -> its scalars as facts, its lists of objects as tables (ranked)
point JSONs (json/*.json, sim/*.json; at most MAX_POINT_JSONS): each one's
    vmio.breakdown (per job, per layer: mean, p50, p99, p99.9, share), the vmio version
    ("fio version"), the seed, and for validate the fio job that ran (its options)
```

Every file is read by a bounded reader (a regular file, not a link, at most its kind's
size); one that cannot be read, or that exceeds a bound, becomes a note in the report,
never a traceback, so a report of a half-written directory still shows what is there.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio import boundedjson, sim
from vmio.sim import VmioError

MAX_DEPTH = 2
"""Subdirectories below DIR that are walked (calibration/, raid0/, raid0/...)."""
MAX_FILES = 400
"""Directory entries looked at, in all: a directory of more is cut, with a note."""
MAX_TEXT_BYTES = 4 << 20
"""The largest CSV, TOML, fio or text file read (4 MiB)."""
MAX_FIGURE_BYTES = 8 << 20
"""The largest figure embedded (8 MiB)."""
MAX_FIGURES = 40
MAX_ROWS = 5000
"""Rows of one table shown; the rest are counted in a note."""
MAX_TABLES = 40
MAX_POINT_JSONS = 2000
MAX_JSON_BYTES = 16 << 20
MAX_BREAKDOWN_LAYERS = 64
SKIPPED_DIRS = frozenset({"json", "real", "sim", ".vmio-partial"})
"""Directories of per-point JSON (read for the breakdown only) and a study's resume state."""

KINDS = (
    ("advise", "advise.json"),
    ("validate", "compare.csv with real/ and sim/"),
    ("study", "results.csv with points.csv"),
    ("compare", "compare.csv"),
)
"""Each kind and what marks its directory, in the order they are tried."""

MEASUREMENTS = "calibration/measurements.json"
"""vmio calibrate's measurements in a validate directory: the calibration table."""
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TABLE_ORDER = ("results.csv", "advise", "compare.csv", "calibration.csv", "points.csv")


@dataclass
class Table:
    title: str
    source: str
    """The file (relative to DIR) the table comes from; the test compares them."""
    columns: list[str]
    rows: list[list[str]]
    total_rows: int
    note: str = ""


@dataclass
class Figure:
    title: str
    source: str
    mime: str
    data: bytes


@dataclass
class TextFile:
    title: str
    source: str
    text: str


@dataclass
class Breakdown:
    point: str
    source: str
    jobs: list[tuple[str, list[dict[str, Any]]]]
    """(job name, its layers: layer, mean_ns, p50_ns, p99_ns, p99.9_ns, share)."""


@dataclass
class Report:
    kind: str
    directory: Path
    title: str
    command: str = ""
    command_note: str = ""
    environment: list[tuple[str, str]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    inputs: list[TextFile] = field(default_factory=list)
    texts: list[TextFile] = field(default_factory=list)
    breakdowns: list[Breakdown] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def detect_kind(d: Path) -> str:
    """The kind of output directory `d` is; a `VmioError` listing what was looked for when it
    is none."""
    if not d.is_dir():
        raise VmioError(f"report: '{d}' is not a directory")
    if (d / "advise.json").is_file():
        return "advise"
    if (d / "compare.csv").is_file() and (d / "real").is_dir() and (d / "sim").is_dir():
        return "validate"
    if (d / "results.csv").is_file() and (d / "points.csv").is_file():
        return "study"
    if (d / "compare.csv").is_file():
        return "compare"
    looked = "; ".join(f"{marker} ({kind})" for kind, marker in KINDS)
    raise VmioError(f"report: '{d}' is not a vmio output directory: looked for {looked}")


def read_bytes(path: Path, limit: int) -> bytes:
    """A regular file's bytes (not through a symbolic link, at most `limit`), else a
    `VmioError` naming it."""
    return sim.read_bytes(path, "report input", limit, follow_links=False)


def read_text(path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise VmioError(f"report input '{path}' is not UTF-8 (byte {err.start})") from None


def cell(value: Any) -> str:
    """A JSON value as a table cell: a string as it is, null as empty, anything else as JSON
    writes it (so 1.50 stays 1.5 and 7 stays 7, as the file has it)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def parse_csv(text: str, title: str, source: str) -> Table:
    """A CSV file's table: the header, then at most `MAX_ROWS` rows, each cell unchanged."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        columns = next(reader, [])
        rows = []
        total = 0
        for row in reader:
            total += 1
            if total <= MAX_ROWS:
                rows.append(row)
    except csv.Error as err:
        raise VmioError(f"not a CSV table ({err})") from None
    note = f"{MAX_ROWS} of {total} rows shown (the report's bound)" if total > MAX_ROWS else ""
    return Table(title, source, columns, rows, total, note)


def _walk(d: Path, rep: Report) -> list[Path]:
    """The files under `d` a report reads, in name order, within the bounds."""
    out: list[Path] = []
    seen = 0
    stack = [(d, 0)]
    while stack:
        here, depth = stack.pop(0)
        try:
            entries = sorted(here.iterdir(), key=lambda p: p.name)
        except OSError as err:
            rep.notes.append(f"{_rel(here, d)}/: not read ({err.strerror})")
            continue
        for p in entries:
            seen += 1
            if seen > MAX_FILES:
                rep.notes.append(f"more than {MAX_FILES} entries: the rest were not read")
                return out
            if p.is_symlink():
                rep.notes.append(f"{_rel(p, d)}: a symbolic link, not followed")
            elif p.is_dir():
                if depth < MAX_DEPTH and p.name not in SKIPPED_DIRS:
                    stack.append((p, depth + 1))
            elif p.is_file():
                out.append(p)
    return out


def _rel(p: Path, d: Path) -> str:
    return str(p.relative_to(d)) if p != d else "."


def _add_table(rep: Report, title: str, path: Path, d: Path) -> None:
    rel = _rel(path, d)
    if len(rep.tables) >= MAX_TABLES:
        rep.notes.append(f"{rel}: not shown (more than {MAX_TABLES} tables)")
        return
    try:
        rep.tables.append(parse_csv(read_text(path), title, rel))
    except VmioError as err:
        rep.notes.append(f"{rel}: not shown: {err}")


def _figure_mime(data: bytes) -> str | None:
    if data.startswith(PNG_MAGIC):
        return "image/png"
    head = data[:512].lstrip()
    if head.startswith(b"<?xml") or head.startswith(b"<svg") or b"<svg" in head:
        return "image/svg+xml"
    return None


def collect(d: Path) -> Report:
    """Everything the report of output directory `d` shows."""
    kind = detect_kind(d)
    rep = Report(kind, d, f"vmio {kind}: {d.resolve().name}")
    files = _walk(d, rep)
    csvs = [p for p in files if p.suffix == ".csv"]
    csvs.sort(key=lambda p: (p.parent != d, _order(p.name), str(p)))
    for p in csvs:
        _add_table(rep, _rel(p, d), p, d)
    for p in files:
        rel = _rel(p, d)
        if p.suffix in (".png", ".svg"):
            if len(rep.figures) >= MAX_FIGURES:
                rep.notes.append(f"{rel}: not shown (more than {MAX_FIGURES} figures)")
                continue
            try:
                data = read_bytes(p, MAX_FIGURE_BYTES)
            except VmioError as err:
                rep.notes.append(f"{rel}: not shown: {err}")
                continue
            mime = _figure_mime(data)
            if mime is None:
                rep.notes.append(f"{rel}: not shown: neither a PNG nor an SVG image")
                continue
            rep.figures.append(Figure(rel, rel, mime, data))
        elif p.suffix in (".toml", ".fio", ".txt"):
            try:
                tf = TextFile(rel, rel, read_text(p))
            except VmioError as err:
                rep.notes.append(f"{rel}: not shown: {err}")
                continue
            (rep.texts if p.suffix == ".txt" else rep.inputs).append(tf)
    if kind == "study":
        _study(rep, d)
    elif kind == "validate":
        _validate(rep, d)
    elif kind == "compare":
        _compare(rep, d)
    else:
        _advise(rep, d)
    return rep


def _order(name: str) -> int:
    for i, prefix in enumerate(TABLE_ORDER):
        if name.startswith(prefix):
            return i
    return len(TABLE_ORDER)


# --- point JSONs: the breakdown, the version and seed ---------------------------------------


@dataclass
class PointFacts:
    versions: set[str] = field(default_factory=set)
    seeds: set[str] = field(default_factory=set)
    jobs: dict[str, str] = field(default_factory=dict)
    """Point name -> its fio job text, rebuilt from the JSON's options."""


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def breakdown_of(doc: Any) -> list[tuple[str, list[dict[str, Any]]]] | None:
    """The `vmio.breakdown` of a point's JSON, checked: a list of {job, layers: [{layer,
    mean_ns, ...}]}; None when absent or malformed."""
    vm = doc.get("vmio") if isinstance(doc, dict) else None
    bd = vm.get("breakdown") if isinstance(vm, dict) else None
    if not isinstance(bd, list):
        return None
    out = []
    for entry in bd:
        if not isinstance(entry, dict) or not isinstance(entry.get("layers"), list):
            return None
        layers = []
        for layer in entry["layers"][:MAX_BREAKDOWN_LAYERS]:
            if not isinstance(layer, dict) or not isinstance(layer.get("layer"), str):
                return None
            if not _number(layer.get("mean_ns")):
                return None
            layers.append(layer)
        out.append((cell(entry.get("job")), layers))
    return out


def _job_text(doc: dict[str, Any]) -> str | None:
    """The fio job a point ran, rebuilt from its JSON: `[global]` from "global options", a
    section per job from its "job options"."""
    lines = []
    glob = doc.get("global options")
    if isinstance(glob, dict) and glob:
        lines.append("[global]")
        lines += [f"{k}={cell(v)}" for k, v in glob.items()]
    for job in doc.get("jobs") or []:
        if not isinstance(job, dict):
            continue
        opts = job.get("job options")
        lines.append(f"\n[{cell(job.get('jobname'))}]")
        if isinstance(opts, dict):
            lines += [f"{k}={cell(v)}" for k, v in opts.items()]
    return "\n".join(lines).strip() + "\n" if lines else None


def _points(rep: Report, d: Path, sub: str, *, jobs: bool = False) -> PointFacts:
    facts = PointFacts()
    jdir = d / sub
    if not jdir.is_dir() or jdir.is_symlink():
        return facts
    try:
        paths = sorted(p for p in jdir.iterdir() if p.suffix == ".json")
    except OSError as err:
        rep.notes.append(f"{sub}/: not read ({err.strerror})")
        return facts
    if len(paths) > MAX_POINT_JSONS:
        rep.notes.append(f"{sub}/: {len(paths)} point files, the first {MAX_POINT_JSONS} read")
        paths = paths[:MAX_POINT_JSONS]
    for p in paths:
        rel = _rel(p, d)
        try:
            doc = boundedjson.loads(read_text(p, MAX_JSON_BYTES), rel)
        except VmioError as err:  # its message begins with `rel`
            rep.notes.append(f"not read: {err}")
            continue
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("fio version"), str):
            facts.versions.add(doc["fio version"])
        vm = doc.get("vmio")
        if isinstance(vm, dict) and vm.get("seed") is not None:
            facts.seeds.add(cell(vm["seed"]))
        if jobs and (text := _job_text(doc)) is not None:
            facts.jobs[p.stem] = text
        if "vmio" in doc and isinstance(vm, dict) and "breakdown" in vm:
            bd = breakdown_of(doc)
            if bd is None:
                rep.notes.append(f"{rel}: vmio.breakdown not in the expected form: not shown")
            else:
                rep.breakdowns.append(Breakdown(p.stem, rel, bd))
    return facts


def _env_versions(rep: Report, facts: PointFacts) -> None:
    if facts.versions:
        versions = ", ".join(sorted(facts.versions))
        rep.environment.append(("simulator version (point JSON)", versions))
    if facts.seeds:
        rep.environment.append(("seed (point JSON)", ", ".join(sorted(facts.seeds))))


def _column(rep: Report, source: str, name: str) -> list[str]:
    for t in rep.tables:
        if t.source == source and name in t.columns:
            i = t.columns.index(name)
            return [r[i] for r in t.rows if i < len(r)]
    return []


# --- the kinds -------------------------------------------------------------------------------


def _study(rep: Report, d: Path) -> None:
    names = sorted(set(_column(rep, "points.csv", "study")))
    seeds = sorted(set(_column(rep, "points.csv", "seed")))
    engines = sorted(set(_column(rep, "points.csv", "engine")))
    machines = sorted(set(_column(rep, "points.csv", "machine_json")) - {"", "{}"})
    if names:
        rep.title = f"vmio study {', '.join(names)}"
    rep.environment += [
        ("study", ", ".join(names)),
        ("seed (points.csv)", ", ".join(seeds)),
        ("engine", ", ".join(engines)),
        ("points", str(len(_column(rep, "points.csv", "point")))),
    ]
    for i, m in enumerate(machines[:8]):
        rep.environment.append((f"machine{f' {i + 1}' if len(machines) > 1 else ''}", m))
    facts = _points(rep, d, "json")
    _env_versions(rep, facts)
    exp = _bundled_experiment(names[0]) if len(names) == 1 else None
    quick = ""
    if exp is not None:
        slugs = set(_column(rep, "points.csv", "point"))
        try:
            if {p.slug for p in exp.points(quick=True)} == slugs and exp.grid_size(
                True
            ) != exp.grid_size(False):
                quick = " --quick"
        except VmioError:
            pass
        if not any(t.source.endswith(".toml") or t.source.endswith(".fio") for t in rep.inputs):
            for path in (exp.path, exp.stack_path, exp.job_path):
                if path is None:
                    continue
                try:
                    text = read_text(path)
                except VmioError as err:
                    rep.notes.append(f"{path.name}: not shown: {err}")
                    continue
                title = f"{path.name} (as shipped with vmio: study {exp.name})"
                rep.inputs.append(TextFile(title, path.name, text))
    seed = f" --seed {seeds[0]}" if exp is not None and seeds and seeds[0] != str(exp.seed) else ""
    name = names[0] if len(names) == 1 else "NAME"
    rep.command = f"vmio study {name}{quick}{seed} --out {d}"
    rep.command_note = (
        "the bundled study of that name"
        if exp is not None
        else "the study's experiment file is not in the directory: give its path as NAME"
    )


def _bundled_experiment(name: str) -> Any:
    """The experiment shipped with vmio whose [experiment] name is `name`, or None."""
    from vmio.study import experiment

    for study in experiment.builtin_studies():
        try:
            for exp in experiment.load_study(study).parts:
                if exp.name == name:
                    return exp
        except VmioError:
            continue
    return None


def _validate(rep: Report, d: Path) -> None:
    facts = _points(rep, d, "sim", jobs=True)
    _points(rep, d, "raid0/sim")
    _env_versions(rep, facts)
    meas = d / "calibration" / "measurements.json"
    target = "TARGET"
    if meas.is_file() and not meas.is_symlink():
        try:
            doc = boundedjson.loads(read_text(meas, MAX_JSON_BYTES), MEASUREMENTS)
        except VmioError as err:
            rep.notes.append(f"{MEASUREMENTS}: not read: {err}")
            doc = None
        if isinstance(doc, dict):
            head = doc.get("vmio_calibrate")
            if isinstance(head, dict):
                target = cell(head.get("target")) or target
                for k in ("version", "date", "target", "direct", "quick", "elapsed_s"):
                    if k in head:
                        rep.environment.append((f"calibration {k}", cell(head[k])))
            if isinstance(doc.get("machine"), dict):
                for k, v in doc["machine"].items():
                    rep.environment.append((f"machine {k}", cell(v)))
            if isinstance(doc.get("points"), list):
                table = _records_table("calibration measurements", MEASUREMENTS, doc["points"])
                rep.tables.insert(0, table)
    reps = set()
    for p in (d / "real").glob("*.rep*.json") if (d / "real").is_dir() else []:
        m = re.fullmatch(r".*\.rep(\d+)\.json", p.name)
        if m:
            reps.add(int(m.group(1)))
    runtime = ""
    for text in facts.jobs.values():
        m = re.search(r"^runtime=([0-9.]+)s?$", text, re.M)  # validate writes "3s"
        if m:
            runtime = f" --runtime {m.group(1)}"
            break
    seed = f" --seed {min(facts.seeds)}" if len(facts.seeds) == 1 else ""
    points = f" --points {len(facts.jobs)}" if facts.jobs else ""
    repeat = f" --repeat {max(reps)}" if reps else ""
    raid0 = ""
    if (d / "raid0" / "sim").is_dir():
        raid0 = f" --raid0 {sum(1 for p in (d / 'raid0' / 'sim').glob('*.json'))}"
    rep.command = f"vmio validate {target}{points}{repeat}{runtime}{seed}{raid0} -o {d}"
    rep.command_note = "rebuilt from the directory (the target, the points, repetitions and seed)"
    for name, text in sorted(facts.jobs.items()):
        rep.inputs.append(TextFile(f"sim/{name}.json: the fio job (from its options)", name, text))


def _records_table(title: str, source: str, records: list[Any]) -> Table:
    """A table of JSON objects: one column per key (nested objects flattened as a.b)."""
    flat = [_flatten(r) for r in records[:MAX_ROWS] if isinstance(r, dict)]
    columns: list[str] = []
    for r in flat:
        columns += [k for k in r if k not in columns]
    rows = [[r.get(c, "") for c in columns] for r in flat]
    note = f"{MAX_ROWS} of {len(records)} rows shown" if len(records) > MAX_ROWS else ""
    return Table(title, source, columns, rows, len(records), note)


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in obj.items():
        if isinstance(v, dict) and len(prefix) < 200:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = cell(v)
    return out


def _compare(rep: Report, d: Path) -> None:
    rep.command = f"vmio compare REAL SIM --csv {d / 'compare.csv'} --plot {d / 'compare.png'}"
    rep.command_note = "REAL and SIM (the measured and the simulated results) are not recorded"


def _json_parts(rep: Report, obj: dict[str, Any], prefix: str, depth: int = 0) -> None:
    """A JSON object's parts: each list of objects a table (`advise.json#a.b`), each nested
    object walked (up to 4 levels), every other value an environment row."""
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            if len(rep.tables) < MAX_TABLES:
                rep.tables.append(_records_table(f"advise.json: {key}", f"advise.json#{key}", v))
            else:
                rep.notes.append(f"advise.json: {key}: not shown (more than {MAX_TABLES} tables)")
        elif isinstance(v, dict) and depth < 4:
            _json_parts(rep, v, f"{key}.", depth + 1)
        else:
            rep.environment.append((key, cell(v)))


def _advise(rep: Report, d: Path) -> None:
    try:
        doc = boundedjson.loads(read_text(d / "advise.json", MAX_JSON_BYTES), "advise.json")
    except VmioError as err:
        rep.notes.append(f"advise.json: not read: {err}")
        doc = {}
    if not isinstance(doc, dict):
        doc = {"advise": doc}
    _json_parts(rep, doc, "")  # its tables after results.csv, the ranked configurations
    facts = _points(rep, d, "json")
    _env_versions(rep, facts)
    recorded = [t for t in rep.texts if t.source == "command.txt"]
    cmd = doc.get("command")
    if recorded and recorded[0].text.strip():
        rep.command = recorded[0].text.strip()
        rep.command_note = "as command.txt records it"
        rep.texts.remove(recorded[0])
    elif isinstance(cmd, str):
        rep.command = cmd
        rep.command_note = "as advise.json records it"
    elif isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        rep.command = " ".join(cmd)
        rep.command_note = "as advise.json records it"
    else:
        goal = doc.get("goal")
        goal = goal.get("name") if isinstance(goal, dict) else goal
        goal_opt = f" --goal {cell(goal)}" if isinstance(goal, str) else ""
        rep.command = f"vmio advise --stack {d / 'stack.toml'} --workload {d / 'job.fio'}{goal_opt}"
        rep.command_note = "rebuilt from the directory (it records no command)"

"""The report as one HTML file: inline CSS, a small inline script that sorts tables, figures
as `data:` URIs and the per-layer breakdown as inline SVG drawn here.

Every piece of text that comes from a file (a cell, a file name, a figure title, a stack
file) passes through `html.escape` with quotes; nothing from a file is ever placed in a
script, a style, a tag name, an attribute name or a URL other than a base64 `data:` URI of
bytes checked to be a PNG or an SVG (an SVG shown through `<img>` runs no script). The page's
Content-Security-Policy allows no network at all and only this file's own script and style,
by their SHA-256: an injected `<script>` would not run even if escaping failed.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable

from vmio.htmlreport.contents import Breakdown, Report, Table, cell

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1.05em}
code,pre{font:12px/1.4 ui-monospace,monospace}
pre{background:#f6f6f6;padding:.6em;overflow:auto;max-height:32em;white-space:pre}
.wrap{overflow:auto;max-height:40em;border:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#eee;position:sticky;top:0;cursor:pointer;user-select:none}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.long div{max-width:36em;max-height:5em;overflow:auto;white-space:pre-wrap;word-break:break-all}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption,.note{color:#555;font-size:12px}
nav a{margin-right:1em}
"""

SCRIPT = """
(function(){
  function num(s){var t=s.trim();if(t==='')return null;var v=Number(t);return isNaN(v)?undefined:v;}
  function txt(r,col){return r.cells[col]?r.cells[col].textContent:'';}
  document.querySelectorAll('table.sortable').forEach(function(tab){
    var heads=tab.tHead?tab.tHead.rows[0].cells:[];
    Array.prototype.forEach.call(heads,function(th,col){
      th.addEventListener('click',function(){
        var body=tab.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        var dir=th.classList.contains('asc')?-1:1;
        Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});
        th.classList.add(dir>0?'asc':'desc');
        var numeric=rows.every(function(r){return num(txt(r,col))!==undefined;});
        rows.sort(function(a,b){
          var x=txt(a,col),y=txt(b,col);
          if(!numeric)return dir*x.localeCompare(y);
          x=num(x);y=num(y);
          if(x===null)return y===null?0:1;
          if(y===null)return -1;
          return dir*(x-y);
        });
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
})();
"""

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
BREAKDOWN_COLUMNS = ("layer", "mean_ns", "p50_ns", "p99_ns", "p99.9_ns", "share")
LONG_CELL = 120
"""Cells longer than this (a point's stack as JSON) scroll inside a bounded box."""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _sha(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _td(value: str) -> str:
    if len(value) > LONG_CELL:
        return f'<td class="long"><div>{esc(value)}</div></td>'
    if _is_number(value):
        return f'<td class="num">{esc(value)}</td>'
    return f"<td>{esc(value)}</td>"


def table_html(t: Table, anchor: str) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in t.columns)
    body = "\n".join("<tr>" + "".join(_td(v) for v in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (
        f'<h3 id="{anchor}">{esc(t.title)}</h3>{note}'
        f'<div class="wrap"><table class="sortable data" data-source="{esc(t.source)}">'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>"
    )


def _kv_table(rows: Iterable[tuple[str, str]], cls: str) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th>{_td(v)}</tr>" for k, v in rows)
    return f'<table class="{cls}"><tbody>{body}</tbody></table>'


def breakdown_svg(bd: Breakdown, layer_colors: dict[str, str]) -> str:
    """One horizontal bar per job: its layers' mean times stacked, on one scale for the
    point's jobs (the longest job's total fills the width), each with a tooltip, its total
    at its end; a legend below."""
    width, label_w, bar_h, gap = 720, 160, 22, 8
    plot_w = width - label_w - 10
    names = [layer["layer"] for _, layers in bd.jobs for layer in layers]
    legend = list(dict.fromkeys(names))
    height = len(bd.jobs) * (bar_h + gap) + 10 + 18 * ((len(legend) + 3) // 4)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="breakdown" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    y = 5
    totals = [sum(float(layer["mean_ns"]) for layer in layers) for _, layers in bd.jobs]
    longest = max(totals, default=0.0)
    for (job, layers), total in zip(bd.jobs, totals, strict=True):
        parts.append(
            f'<text x="{label_w - 6}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" '
            f'font-size="12">{esc(job)}</text>'
        )
        x = float(label_w)
        for layer in layers:
            w = (plot_w - 90) * float(layer["mean_ns"]) / longest if longest > 0 else 0.0
            color = layer_colors.setdefault(
                layer["layer"], PALETTE[len(layer_colors) % len(PALETTE)]
            )
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{color}">'
                f"<title>{esc(layer['layer'])}: mean {esc(layer['mean_ns'])} ns</title></rect>"
            )
            x += w
        parts.append(
            f'<text x="{x + 4:.2f}" y="{y + bar_h * 0.7:.1f}" font-size="11">'
            f"{total / 1000:.4g} us</text>"
        )
        y += bar_h + gap
    for i, name in enumerate(legend):
        lx, ly = label_w + (i % 4) * (plot_w // 4), y + 5 + 18 * (i // 4)
        color = layer_colors.setdefault(name, PALETTE[len(layer_colors) % len(PALETTE)])
        parts.append(
            f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{color}"></rect>'
            f'<text x="{lx + 14}" y="{ly + 9}" font-size="11">{esc(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _breakdown_html(bd: Breakdown, layer_colors: dict[str, str]) -> str:
    rows = []
    for job, layers in bd.jobs:
        for layer in layers:
            rows.append([job] + [cell(layer.get(c)) for c in BREAKDOWN_COLUMNS])
    t = Table(f"{bd.point}", bd.source, ["job", *BREAKDOWN_COLUMNS], rows, len(rows))
    head = "".join(f"<th>{esc(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(_td(v) for v in r) + "</tr>" for r in rows)
    return (
        f"<details><summary>{esc(bd.point)}</summary>"
        f'<figure class="bd">{breakdown_svg(bd, layer_colors)}'
        f"<figcaption>mean time per layer, stacked ({esc(bd.source)})</figcaption></figure>"
        f'<table class="sortable breakdown" data-source="{esc(bd.source)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details>"
    )


def render(rep: Report, version: str) -> str:
    """The whole page."""
    csp = (
        "default-src 'none'; img-src data:; "
        f"style-src 'sha256-{_sha(STYLE)}'; script-src 'sha256-{_sha(SCRIPT)}'; "
        "base-uri 'none'; form-action 'none'"
    )
    sections: list[tuple[str, str, str]] = []  # (anchor, heading, body)
    cmd = f"<pre><code>{esc(rep.command)}</code></pre>"
    if rep.command_note:
        cmd += f'<p class="note">{esc(rep.command_note)}</p>'
    sections.append(("reproduce", "Command to reproduce", cmd))
    env = [("kind of directory", rep.kind), ("directory", str(rep.directory))]
    env += rep.environment + [("report written by", f"vmio {version}")]
    sections.append(("environment", "Environment", _kv_table(env, "env")))
    if rep.tables:
        body = "\n".join(table_html(t, f"table-{i}") for i, t in enumerate(rep.tables))
        sections.append(("tables", "Tables", body))
    if rep.figures:
        figs = []
        for f in rep.figures:
            uri = f"data:{f.mime};base64,{base64.b64encode(f.data).decode('ascii')}"
            figs.append(
                f'<figure><img class="figure" alt="{esc(f.title)}" src="{uri}">'
                f"<figcaption>{esc(f.source)}</figcaption></figure>"
            )
        sections.append(("figures", "Figures", "\n".join(figs)))
    if rep.breakdowns:
        colors: dict[str, str] = {}
        body = (
            "<p class=\"note\">Where a request's time goes, per point and job: each layer's "
            "mean, p50, p99 and p99.9 and its share of the total (vmio.breakdown).</p>"
            + "\n".join(_breakdown_html(b, colors) for b in rep.breakdowns)
        )
        sections.append(("breakdown", "Latency breakdown per layer", body))
    for files, cls, anchor, heading in (
        (rep.inputs, "input", "inputs", "Stack, job and experiment files"),
        (rep.texts, "text", "texts", "Text reports"),
    ):
        if files:
            body = "\n".join(
                f'<h3>{esc(t.title)}</h3><pre class="{cls}" data-source="{esc(t.source)}">'
                f"{esc(t.text)}</pre>"
                for t in files
            )
            sections.append((anchor, heading, body))
    if rep.notes:
        body = "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in rep.notes) + "</ul>"
        sections.append(("notes", "Notes (files not shown)", body))
    nav = "".join(f'<a href="#{a}">{esc(h)}</a>' for a, h, _ in sections)
    main = "\n".join(f'<h2 id="{a}">{esc(h)}</h2>\n{b}' for a, h, b in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(rep.title)}</title>\n<style>{STYLE}</style></head>\n"
        f"<body><h1>{esc(rep.title)}</h1><nav>{nav}</nav>\n{main}\n"
        f"<script>{SCRIPT}</script></body></html>\n"
    )

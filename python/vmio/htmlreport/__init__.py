"""`vmio report DIR`: one self-contained HTML file of a study, compare, validate or advise
output directory (docs/report.md).

```text
report(DIR):
    kind   = detect_kind(DIR)            (contents: advise.json / compare.csv + real/ sim/ /
                                          results.csv + points.csv / compare.csv, else refused)
    report = collect(DIR)                (every table, figure, stack/job/experiment file, text
                                          report, per-layer breakdown, the environment and the
                                          command to reproduce; every input bounded)
    html   = render(report)              (page: inline CSS and script, figures as data: URIs,
                                          the breakdown as inline SVG; everything escaped)
```

The page needs no network: it loads nothing (its Content-Security-Policy forbids it) and
works from a file, a mail attachment or an archive. The fio text report of `vmio fio` is
`vmio.fioreport`, not this.
"""

from __future__ import annotations

from pathlib import Path

from vmio.htmlreport.contents import KINDS, Report, collect, detect_kind
from vmio.htmlreport.page import render

DEFAULT_NAME = "report.html"
"""The file written in DIR when no -o is given."""

__all__ = ["DEFAULT_NAME", "KINDS", "Report", "collect", "detect_kind", "render", "report_html"]


def report_html(directory: Path) -> str:
    """The HTML report of output directory `directory`."""
    from vmio.version import __version__

    return render(collect(directory), __version__)

"""The status page of ``gitray sync`` (``GET /status`` on its HTTP port). Rendering is pure.

Server-rendered HTML, no external assets, no JavaScript (it refreshes itself every few
seconds): the workloads with state, health and revision; each workload's recent steps; for an
incremental upgrade, its traffic share on the new cluster and its analyses over time as an
inline SVG chart; a link to the commit when the repository is an http(s) remote, and to the
plan gitray made of it (``/status/plan/<sha>``, plain text) when this replica planned it.
Everything that comes from Git or the cluster is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from urllib.parse import urlsplit, urlunsplit

from gitray.core.model import ObjectKey
from gitray.daemon.metrics import WorkloadView

__all__ = ["PLAN_PREFIX", "Entry", "PageData", "commit_url", "plan_path", "render"]

REFRESH_S = 3
PLAN_PREFIX = "/status/plan/"  # + a commit SHA: the plan of that commit, as text
CHART_W, CHART_H = 560, 140


@dataclass(frozen=True)
class Entry:
    """One line of a workload's recent history."""

    time: float
    revision: str
    text: str
    tone: str = ""  # "", "ok", "bad"


@dataclass(frozen=True)
class PageData:
    now: float
    repo: str  # redacted remote URL
    synced: str
    fetched: str
    leader: bool
    views: Mapping[ObjectKey, WorkloadView]
    history: Mapping[ObjectKey, Sequence[Entry]]
    traffic: Mapping[ObjectKey, Sequence[tuple[float, int]]]
    analyses: Mapping[ObjectKey, Sequence[tuple[float, str]]]  # (time, "passed" | "failed")
    plans: frozenset[str] = frozenset()  # the commits whose plans are served


def commit_url(repo: str, sha: str) -> str | None:
    """A web link to ``sha`` for an http(s) remote (GitHub, Gitea and GitLab all answer
    ``<repo>/commit/<sha>``), without credentials; None for other remotes."""
    parts = urlsplit(repo)
    if parts.scheme not in ("http", "https") or not sha or not parts.hostname:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    path = parts.path.removesuffix("/").removesuffix(".git")
    return urlunsplit((parts.scheme, host, f"{path}/commit/{sha}", "", ""))


def _t(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%H:%M:%S")


def plan_path(sha: str) -> str:
    return f"{PLAN_PREFIX}{sha}"


def _sha(page: PageData, sha: str) -> str:
    if not sha:
        return "-"
    url = commit_url(page.repo, sha)
    text = f"<code>{escape(sha[:7])}</code>"
    link = f'<a href="{escape(url, quote=True)}">{text}</a>' if url else text
    if sha in page.plans:
        link += f' <a href="{escape(plan_path(sha), quote=True)}"><small>plan</small></a>'
    return link


def _chart(points: Sequence[tuple[float, int]], analyses: Sequence[tuple[float, str]]) -> str:
    """Traffic share (0-100 %) over time as a step line, analyses as dots on it."""
    if not points:
        return ""
    t0 = min([p[0] for p in points] + [a[0] for a in analyses])
    t1 = max([p[0] for p in points] + [a[0] for a in analyses])
    span = max(t1 - t0, 1.0)

    def x(t: float) -> float:
        return 30 + (CHART_W - 40) * (t - t0) / span

    def y(percent: float) -> float:
        return 10 + (CHART_H - 30) * (1 - percent / 100)

    path, last = [], None
    for when, percent in points:
        if last is not None:
            path.append(f"{x(when):.1f},{y(last):.1f}")
        path.append(f"{x(when):.1f},{y(percent):.1f}")
        last = percent
    if last is not None:  # the share holds until the last analysis seen
        path.append(f"{x(t1):.1f},{y(last):.1f}")
    share = {when: percent for when, percent in points}
    dots = []
    for when, result in analyses:
        at = max((w for w in share if w <= when), default=None)
        level = share[at] if at is not None else 0
        colour = "#2da44e" if result == "passed" else "#d93f0b"
        dots.append(f'<circle cx="{x(when):.1f}" cy="{y(level):.1f}" r="4" fill="{colour}">'
                    f"<title>analysis {escape(result)} at {_t(when)}</title></circle>")
    grid = "".join(f'<line x1="30" x2="{CHART_W - 10}" y1="{y(p):.1f}" y2="{y(p):.1f}" '
                   f'class="grid"/><text x="2" y="{y(p) + 4:.1f}">{p}%</text>'
                   for p in (0, 25, 50, 75, 100))
    return (f'<svg class="chart" width="{CHART_W}" height="{CHART_H}" role="img" '
            f'aria-label="traffic share on the new cluster">{grid}'
            f'<polyline points="{" ".join(path)}" class="share"/>{"".join(dots)}'
            f'<text x="30" y="{CHART_H - 4}">{_t(t0)}</text>'
            f'<text x="{CHART_W - 70}" y="{CHART_H - 4}">{_t(t1)}</text></svg>')


_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#1f2328}
table{border-collapse:collapse;margin-bottom:1em}td,th{padding:.3em .8em;text-align:left;
border-bottom:1px solid #d0d7de}.ok{color:#1a7f37}.bad{color:#cf222e}.progressing{color:#9a6700}
section{border:1px solid #d0d7de;border-radius:6px;padding:.5em 1em;margin:.8em 0}
svg .grid{stroke:#eee}svg .share{fill:none;stroke:#0969da;stroke-width:2}svg text{font-size:10px;
fill:#57606a}ol{margin:.3em 0;padding-left:1.5em}small{color:#57606a}code{font-size:13px}
"""


def _state(view: WorkloadView) -> str:
    tone = {"in-sync": "ok", "failed": "bad", "progressing": "progressing"}.get(view.state, "")
    text = view.state or "-"
    if view.state == "progressing" and view.step:
        text += f" (step {view.step}/{view.steps})"
    return f'<span class="{tone}">{escape(text)}</span>'


def _health(view: WorkloadView) -> str:
    if view.healthy is None:
        return "-"
    return '<span class="ok">healthy</span>' if view.healthy else \
        '<span class="bad">unhealthy</span>'


def _traffic(view: WorkloadView) -> str:
    return "-" if view.traffic_percent is None else f"{view.traffic_percent} %"


def render(page: PageData) -> str:
    """The whole page (UTF-8 HTML)."""
    keys = sorted(set(page.views) | set(page.history), key=str)
    rows = "".join(
        f"<tr><td><a href=\"#{escape(str(k), quote=True)}\">{escape(str(k))}</a></td>"
        f"<td>{_state(page.views.get(k, WorkloadView()))}</td>"
        f"<td>{_health(page.views.get(k, WorkloadView()))}</td>"
        f"<td>{_traffic(page.views.get(k, WorkloadView()))}</td>"
        f"<td>{_sha(page, page.views.get(k, WorkloadView()).revision)}</td></tr>"
        for k in keys)
    sections = []
    for k in keys:
        entries = page.history.get(k, ())
        items = "".join(f'<li class="{escape(e.tone)}"><small>{_t(e.time)}</small> '
                        f"{escape(e.text)} <small>{escape(e.revision[:7])}</small></li>"
                        for e in entries)
        chart = _chart(page.traffic.get(k, ()), page.analyses.get(k, ()))
        sections.append(f'<section id="{escape(str(k), quote=True)}"><h2>{escape(str(k))}</h2>'
                        + (f"<h3>Traffic on the new cluster</h3>{chart}" if chart else "")
                        + (f"<h3>Recent steps</h3><ol>{items}</ol>" if items else "")
                        + "</section>")
    leader = "leader" if page.leader else "standby (this replica does not sync)"
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        f"<title>gitray status</title><style>{_STYLE}</style></head><body>"
        f"<h1>gitray</h1><p>{escape(page.repo)} · {escape(leader)} · in sync at "
        f"{_sha(page, page.synced)} · newest {_sha(page, page.fetched)} · "
        f"<small>{_t(page.now)} UTC</small></p>"
        "<table><thead><tr><th>workload</th><th>state</th><th>health</th>"
        f"<th>traffic on new</th><th>revision</th></tr></thead><tbody>{rows}</tbody></table>"
        f"{''.join(sections)}</body></html>\n")

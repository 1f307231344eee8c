"""``scaling history FILE`` (each curve's trend over the runs of a history, and the changes a
later run confirmed) and ``scaling history add FILE DIR...`` (runs added to it)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from scaling.cli.output import console
from scaling.report import history

SHOWN_SERIES = 20
"""The most series the terminal shows (those with a change or a pending one first)."""
SHOWN_POINTS = 6
"""The latest points of each series the terminal shows; --json and --html have them all."""


class DefaultToShow(click.Group):
    """``scaling history FILE`` shows; ``scaling history add FILE DIR...`` adds."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(name="history", cls=DefaultToShow)
def history_group():
    """A history of runs in one DuckDB file: `scaling history FILE` prints each curve's trend,
    `scaling history add FILE DIR...` adds earlier runs (a sweep or run adds its own with
    --history FILE).

    A change is reported only where a point's interval and the level before it separate, by
    at least --min-change, and only once the next run separates the same way; until then it
    is unconfirmed, and a point the next run does not follow is a one-off."""


@history_group.command(name="add")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("out_dirs", nargs=-1, required=True, metavar="DIR...",
                type=click.Path(file_okay=False, exists=True))
def add_command(path, out_dirs):
    """Add the runs in DIR... to the history FILE (made if missing); a run added again
    replaces its points."""
    count = history.add_runs(path, out_dirs)
    console.print(f"added {count} points of {len(out_dirs)} run(s) to {path}")


@history_group.command(name="show")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--min-change", type=click.FloatRange(0, 1, max_open=True),
              default=history.MIN_CHANGE, show_default=True,
              help="The smallest relative change reported, beside separate intervals.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write every series, point and verdict to this JSON file.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Also write a page with one trend plot per curve, changes marked.")
def show_command(path, min_change, json_path, html_path):
    """Each curve's trend: images/sec and efficiency with their intervals, by date, node,
    framework version and driver, with the changes found. Exits 0."""
    trends = history.trends(history.read_points(path), min_change)
    for key in sorted(trends, key=lambda k: (not history.pending(trends[k]), k))[:SHOWN_SERIES]:
        console.print(series_table(key, trends[key]))
    if json_path:
        Path(json_path).write_text(history.to_json(trends))
        console.print(f"wrote {json_path}")
    summary = summary_line(trends)
    if html_path:
        from scaling.report.history_page import write_history_page

        console.print(f"wrote {write_history_page(trends, summary, path, html_path)}")
    console.print(summary)


def series_table(key, points) -> Table:
    curve, devices, node = key
    table = Table(title=f"{curve}, {devices} device(s), on {node}")
    for header in ("started", "framework", "driver / CUDA", "images/sec", "efficiency",
                   "verdict"):
        table.add_column(header)
    for point in points[-SHOWN_POINTS:]:
        table.add_row(point["started_at"][:16], point["framework_version"], point["driver"],
                      figure(point["images_per_sec"], point["low"], point["high"], "{:,.1f}"),
                      figure(point["efficiency"], point["efficiency_low"],
                             point["efficiency_high"], "{:.0%}"), verdict_text(point))
    return table


def figure(value, low, high, form: str) -> str:
    if value is None:
        return "-"
    return form.format(value) + (f" [{form.format(low)}, {form.format(high)}]"
                                 if low is not None else "")


def verdict_text(point) -> str:
    if "ratio" not in point:
        return point["verdict"]
    return f"{point['verdict']}: {point['ratio'] - 1:+.0%}"


def summary_line(trends) -> str:
    changed = history.changes(trends)
    waiting = sum(point["verdict"] == "unconfirmed" for points in trends.values()
                  for point in points)
    runs = len({point["run"] for points in trends.values() for point in points})
    text = f"{len(trends)} series over {runs} run(s): "
    text += f"{len(changed)} confirmed change(s)" if changed else "no confirmed change"
    if waiting:
        text += f", {waiting} unconfirmed (the next run will tell)"
    for change in changed:
        curve, devices, node = change["series"]
        text += (f"\n{curve}, {devices} device(s) on {node}: {change['ratio'] - 1:+.0%} from "
                 f"{change['started_at'][:16]}")
    return text

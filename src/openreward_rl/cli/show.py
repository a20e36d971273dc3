"""`openreward-rl show FILE [--index I] [--html OUT.html | --serve] [--no-color] [--tokenizer NAME]`.

Without `--index`: every episode (a terminal listing, or with `--html` / `--serve` the report with
its index, groups and episodes). With `--index I`: that one episode (terminal, or one HTML page).
Token text is decoded with `--tokenizer`, else with the tokenizer the file records (`eval` writes it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openreward_rl.cli.interrupts import Interrupts
from openreward_rl.errors import ConfigError
from openreward_rl.observe.dumps import DumpError, read_records, record_to_trajectory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a trajectory dump (JSON lines, e.g. what `openreward-rl eval` writes)")
    parser.add_argument(
        "--index",
        type=int,
        default=None,
        help="show this one record (0-based; negative counts from the end); default: list them all",
    )
    parser.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a self-contained HTML report (with --index: one episode's page) instead of printing",
    )
    parser.add_argument("--serve", action="store_true", help="serve the HTML report on 127.0.0.1 until interrupted")
    parser.add_argument("--port", type=int, default=0, help="port for --serve (default: any free one)")
    parser.add_argument("--no-color", action="store_true", help="plain terminal output")
    parser.add_argument(
        "--tokenizer",
        help="decode token spans with this tokenizer (a path, a hub name in the cache, or offline:qwen3); "
        "default: the one the file records",
    )


def _fail(message: str) -> int:
    print(f"openreward-rl show: {message}", file=sys.stderr)
    return 2


def recorded_tokenizer(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The tokenizer name `eval` wrote beside the trajectories, if any."""
    for record in records:
        run = record.get("eval")
        if isinstance(run, Mapping) and run.get("tokenizer"):
            return str(run["tokenizer"])
    return None


def _tokenizer(args: argparse.Namespace, records: Sequence[Mapping[str, Any]]) -> tuple[Any, str]:
    """(tokenizer or None, a note for the reader). An explicit --tokenizer that fails is a `ConfigError`."""
    from openreward_rl.assets import load_tokenizer

    if args.tokenizer:
        try:
            return load_tokenizer(args.tokenizer), f"tokens decoded with {args.tokenizer} (--tokenizer)"
        except Exception as error:
            raise ConfigError(f"cannot load tokenizer {args.tokenizer!r}: {error}") from None
    name = recorded_tokenizer(records)
    if name is None:
        return None, "the file records no tokenizer: token spans are shown as counts (pass --tokenizer)"
    try:
        return load_tokenizer(name), f"tokens decoded with {name} (recorded in the file)"
    except Exception as error:
        return (
            None,
            f"the recorded tokenizer {name!r} could not be loaded ({type(error).__name__}); token spans are shown as counts (pass --tokenizer)",
        )


def _skipped(message: str) -> None:
    print(f"openreward-rl show: {message}: skipped", file=sys.stderr)


def _episodes(file: str) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """(records, their trajectories): every good record, the latest of each `eval_key` (an `eval`
    rerun appends before it rewrites); a line that is not a trajectory is skipped with a warning."""
    from openreward_rl.cli.evaluation import latest_records

    records: list[Mapping[str, Any]] = []
    trajectories: list[Any] = []
    for record in latest_records(read_records(file, on_bad_line=_skipped)):
        try:
            trajectories.append(record_to_trajectory(record, f"{file} record {len(records)}"))
        except DumpError as error:
            _skipped(str(error))
            continue
        records.append(record)
    return records, trajectories


def run(args: argparse.Namespace) -> int:
    import openreward_rl.show as show

    if args.serve and (args.html or args.index is not None):
        return _fail("--serve serves the whole report; drop --html and --index")
    try:
        records, trajectories = _episodes(args.file)
        if not records:
            raise DumpError(f"{args.file}: no records")
        if args.index is not None and not -len(records) <= args.index < len(records):
            raise DumpError(
                f"{args.file}: --index {args.index} is out of range; the file has {len(records)} records (0–{len(records) - 1})"
            )
        if args.index is not None:
            trajectories = [trajectories[args.index]]
    except DumpError as error:
        return _fail(str(error))
    listing_only = args.index is None and not args.html and not args.serve
    tokenizer, note = None, ""
    if not listing_only:
        try:
            tokenizer, note = _tokenizer(args, records)
        except ConfigError as error:
            return _fail(str(error))
    if args.index is None and not listing_only:
        page = show.render_report(records, trajectories, tokenizer, source=Path(args.file).name, tokenizer_note=note)
        if args.serve:
            return _serve(page, args.port)
        Path(args.html).write_text(page, encoding="utf-8")
        print(f"wrote {args.html} ({len(records)} episodes); open it in a browser: works offline, nothing is fetched")
        return 0
    if args.html:
        Path(args.html).write_text(show.render_html(trajectories[0], tokenizer), encoding="utf-8")
        print(f"wrote {args.html}")
        return 0
    from rich.console import Console

    console = Console(
        no_color=args.no_color,
        highlight=False,
        soft_wrap=args.index is not None,
        force_terminal=None if not args.no_color else False,
    )
    if listing_only:
        if not console.is_terminal:
            console.width = 200  # a file or pipe: one line per episode rather than folded cells
        rows = show.episode_rows(records, trajectories)
        show.render_listing(
            rows, console, title=f"{args.file} · {len(rows)} episodes · {len(show.groups(rows))} groups"
        )
        console.print(
            "[dim]advantage: GRPO (r - mean) / (std + 1e-6) within each task's samples; infrastructure failures take no part. "
            "One episode: --index N; everything in a browser: --html report.html[/]"
        )
        return 0
    console.print(f"[dim]{args.file} · record {args.index % len(records)} of {len(records)}[/]")
    if note and tokenizer is not None:
        console.print(f"[dim]{note}[/]")
    show.render_terminal(trajectories[0], console, tokenizer)
    return 0


def _serve(page: str, port: int, interrupts: Interrupts | None = None) -> int:
    """Serve `page` at / on 127.0.0.1 until Ctrl-C (`interrupts`: the command's, remembered across a dropped one)."""
    import http.server

    body = page.encode("utf-8")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path.split("#")[0] not in ("/", "/index.html"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass

    stop_requests = interrupts or Interrupts()

    class Server(http.server.ThreadingHTTPServer):
        def service_actions(self) -> None:  # between two polls: a Ctrl-C Python dropped inside a finalizer ends it here
            stop_requests.raise_if_requested()

    with stop_requests.installed(), Server(("127.0.0.1", port), Handler) as server:
        print(f"serving the report on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0

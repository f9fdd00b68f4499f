"""`oc-repl protocols list | show | sync`: where each protocol's assets come from, the exact first request it
sends, and fetching the upstream assets. Only click is imported up front, so `oc-repl --version` stays fast."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from oc_repl.protocols.kinds import SYNC_SOURCES
from oc_repl.training import SAMPLING_PRESETS

SAMPLING_NAMES = tuple(SAMPLING_PRESETS)
DEFAULT_TASK = "List the files in the working directory."
# What tmux shows of a fresh 160x40 pane: the prompt line (trailing spaces trimmed), then the empty rows.
PLACEHOLDER_PROMPT = "root@sandbox:/app#"
PLACEHOLDER_SCREEN = "Current Terminal Screen:\n" + PLACEHOLDER_PROMPT + "\n" * 40


@click.group()
def protocols() -> None:
    """What each protocol sends and where its assets come from; fetch the exact upstream assets."""


def _dumps(value: Any, **options: Any) -> str:
    import json  # here, not at the top: every start of the CLI imports this module

    return json.dumps(value, **options)


def _fail(exc: Any) -> NoReturn:
    from oc_repl.cli.exits import report_error

    sys.exit(report_error(exc))


# --- what the assets are and where they come from ------------------------------------------------------------------


def registry_upstream_sha256(protocol: str, filename: str) -> str:
    from oc_repl.protocols import upstream_sha256

    return upstream_sha256(protocol, filename)


def verdict(digest: str, upstream: str) -> str:
    if not upstream:
        return "unknown"
    return "match" if digest == upstream else "differs"


def _asset_names(name: str) -> list[str]:
    """A user folder reusing a kind lists no assets of its own: it takes its base protocol's."""
    from oc_repl.protocols import manifests

    found = manifests()
    manifest = found[name]
    listed = manifest.data.get("assets") or []
    if not listed and manifest.base in found and manifest.base != name:
        listed = found[manifest.base].data.get("assets") or []
    return [entry["name"] for entry in listed if isinstance(entry, dict) and entry.get("name")]


def resolve_asset(protocol: str, filename: str) -> dict[str, Any]:
    """Where the asset would be loaded from now, as `load_asset` decides, without loading the protocol."""
    from oc_repl.protocols import asset_candidates
    from oc_repl.protocols.sync import sha256

    upstream = registry_upstream_sha256(protocol, filename)
    for source, path in asset_candidates(protocol, filename):
        if path.is_file():
            digest = sha256(path.read_bytes())
            return {
                "name": filename,
                "source": source,
                "path": str(path),
                "sha256": digest,
                "upstream_sha256": upstream,
                "upstream": verdict(digest, upstream),
            }
    return {
        "name": filename,
        "source": "missing",
        "path": "",
        "sha256": "",
        "upstream_sha256": upstream,
        "upstream": "unknown",
    }


def describe_protocols() -> list[dict[str, Any]]:
    from oc_repl import protocols as registry

    found = registry.manifests()
    described = []
    for name in registry.names():
        manifest = found.get(name)
        if manifest is None:  # registered by a plugin: code only, no data folder
            described.append({"name": name, "kind": "plugin", "origin": "entry point", "assets": []})
            continue
        described.append(
            {
                "name": name,
                "kind": manifest.kind,
                "origin": "built-in" if manifest.builtin else f"user folder {manifest.folder}",
                "base": manifest.base,
                "description": manifest.data.get("description", ""),
                "assets": [resolve_asset(name, filename) for filename in _asset_names(name)],
            }
        )
    return described


# --- list ----------------------------------------------------------------------------------------------------------

HEADER = ("PROTOCOL", "KIND", "ASSET", "SOURCE", "SHA256", "UPSTREAM")
LEGEND = (
    "SOURCE: where the asset loads from now (user > upstream > built-in). UPSTREAM: whether its sha256 is upstream's "
    "own: match, differs (a different text is in use), unknown (upstream has no such text to compare with). "
    "`oc-repl protocols sync` fetches upstream's texts."
)


def _rows(described: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for entry in described:
        assets = entry["assets"] or [{"name": "-", "source": "-", "sha256": "", "upstream": "-"}]
        for number, asset in enumerate(assets):
            first = (entry["name"], entry["kind"]) if number == 0 else ("", "")
            rows.append((*first, asset["name"], asset["source"], asset["sha256"][:12] or "-", asset["upstream"]))
    return rows


def plain_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in (header, *rows)
    )


def _rich_table(rows: list[tuple[str, ...]]) -> None:
    from rich.table import Table

    table = Table(*HEADER, title="protocols (assets: user > upstream > built-in)")
    styles = {"match": "green", "differs": "yellow", "unknown": "dim"}
    for row in rows:
        if row[0] and table.row_count:
            table.add_section()
        table.add_row(*row[:5], f"[{styles.get(row[5], '')}]{row[5]}[/]" if row[5] in styles else row[5])
    from oc_repl.render.human import make_console

    console = make_console(stderr=False)
    console.print(table)
    console.print(LEGEND, style="dim", soft_wrap=True)


@protocols.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for machines.")
def list_protocols(as_json: bool) -> None:
    """Every protocol, and for each asset: where it loads from now, its sha256, and whether it is upstream's."""
    from oc_repl.errors import OcReplError

    try:
        described = describe_protocols()
    except OcReplError as exc:
        _fail(exc)
    if as_json:
        click.echo(_dumps({"protocols": described}, indent=2, ensure_ascii=False))
    elif sys.stdout.isatty():
        _rich_table(_rows(described))
    else:
        click.echo(plain_table(HEADER, _rows(described)))
        click.echo("\n" + LEGEND)


# --- show ----------------------------------------------------------------------------------------------------------


def first_request(name: str, task: Any, system: str | None) -> tuple[list[dict], dict[str, Any], list[dict], bool]:
    """The first messages, the request options and the assets; no server, sandbox or terminal is touched."""
    from oc_repl import protocols as registry
    from oc_repl.errors import UsageError

    protocol = registry.create(name, system=system)
    try:
        first_message = protocol.first_message(task, PLACEHOLDER_SCREEN)
        if first_message is not None:  # the message embeds the terminal screen: a stand-in takes its place
            messages = [first_message]
        else:
            protocol.start(task, None)
            messages = protocol.request().messages
        options = protocol.request().options
        assets = [vars(asset) | _upstream_of(name, asset.name, asset.sha256) for asset in protocol.assets()]
    except (KeyError, IndexError, ValueError) as exc:  # say, a template with a placeholder the protocol never fills
        raise UsageError(f"protocol {name!r} cannot build its first message: {exc!r}") from exc
    finally:
        protocol.close()
    return messages, options, assets, first_message is not None


def _upstream_of(protocol: str, filename: str, digest: str) -> dict[str, str]:
    upstream = registry_upstream_sha256(protocol, filename)
    return {"upstream_sha256": upstream, "upstream": verdict(digest, upstream)}


def request_body(model: str | None, messages: list[dict], options: dict, sampling: dict) -> dict[str, Any]:
    """The chat request as the client builds it: sampling, then the protocol's options; no tools, no tool_choice."""
    body: dict[str, Any] = {"model": model} if model else {}
    body.update(messages=messages, **sampling, **options)
    if not body.get("tools"):
        body.pop("tools", None)
        body.pop("tool_choice", None)
    else:
        body.setdefault("tool_choice", "auto")
    return body


def _sampling(preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    from oc_repl.training import SAMPLING_PRESETS

    chosen = dict(SAMPLING_PRESETS[preset])
    chosen.update({key: value for key, value in overrides.items() if value is not None})
    return chosen


def _print_request(
    name: str, kind: str, body: dict[str, Any], assets: list[dict], placeholder: bool, preset: str
) -> None:
    click.echo(f"protocol: {name} (kind {kind})")
    click.echo("assets:")
    for asset in assets:
        click.echo(f"  {asset['name']}: {asset['source']} sha256 {asset['sha256']} (upstream: {asset['upstream']})")
        if asset.get("path"):
            click.echo(f"    {asset['path']}")
    if not assets:
        click.echo("  none")
    sampling = {k: v for k, v in body.items() if k not in ("model", "messages", "tools", "tool_choice")}
    click.echo(
        f"sampling ({preset} preset, flags applied): " + " ".join(f"{k}={_dumps(v)}" for k, v in sampling.items())
    )
    click.echo(f"model: {body.get('model') or '(the first id the server lists)'}; streamed unless --no-stream")
    if placeholder:
        click.echo(
            f"note: the terminal screen below is a PLACEHOLDER ({PLACEHOLDER_PROMPT!r} on an empty 160x40 "
            "pane); a run shows the sandbox's real terminal"
        )
    for number, message in enumerate(body["messages"], 1):
        click.echo(f"\n===== message {number}: {message['role']} =====")
        click.echo(message.get("content") or "")
    if body.get("tools"):
        click.echo(f"\n===== tools ({len(body['tools'])}), tool_choice={_dumps(body['tool_choice'])} =====")
        for tool in body["tools"]:
            click.echo(_dumps(tool))
    else:
        click.echo("\n===== no tools =====")


@protocols.command()
@click.argument("name")
@click.option("--task", "instruction", default=DEFAULT_TASK, show_default=True, help="The task text to show.")
@click.option("--task-name", help="Task name shown to the model (default: derived from the task text).")
@click.option("--system", help="raw: a system message, as TEXT or @FILE.")
@click.option("--model", help="Model id to put in the request (default: chosen at run time).")
@click.option("--sampling", type=click.Choice(SAMPLING_NAMES), default="default", show_default=True)
@click.option("--temperature", type=float, help="Overrides the preset's temperature.")
@click.option("--top-p", type=float, help="Overrides the preset's top-p.")
@click.option("--max-tokens", type=int, help="Overrides the preset's max new tokens.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for machines.")
def show(
    name: str,
    instruction: str,
    task_name: str | None,
    system: str | None,
    model: str | None,
    sampling: str,
    as_json: bool,
    **overrides: Any,
) -> None:
    """Print the exact first request protocol NAME would send, without contacting a server."""
    from oc_repl import protocols as registry
    from oc_repl.errors import OcReplError
    from oc_repl.plan import task_name_for
    from oc_repl.types import Task

    task = Task(name=task_name or task_name_for(instruction), instruction=instruction)
    try:
        messages, options, assets, placeholder = first_request(name, task, system)
        manifest = registry.manifests().get(name)
    except OcReplError as exc:
        _fail(exc)
    kind = manifest.kind if manifest else "plugin"
    body = request_body(model, messages, options, _sampling(sampling, overrides))
    if as_json:
        document = {
            "protocol": name,
            "kind": kind,
            "task": vars(task),
            "placeholder_screen": placeholder,
            "assets": assets,
            "request": body,
        }
        click.echo(_dumps(document, indent=2, ensure_ascii=False))
    else:
        _print_request(name, kind, body, assets, placeholder, sampling)


# --- sync ----------------------------------------------------------------------------------------------------------


@protocols.command()
@click.option(
    "--only",
    type=click.Choice(SYNC_SOURCES),
    multiple=True,
    help="Fetch only these (repeatable): terminus templates, camel tool schemas, OpenClaw-RL prompt.",
)
@click.option(
    "--openclaw-rl",
    metavar="PATH|URL",
    help="An OpenClaw-RL checkout, its terminal-rl/agent/prompts.py, or a URL; that file is run to render the prompt.",
)
@click.option(
    "--openclaw-rl-mirror",
    metavar="URL",
    help="Fetch OpenClaw-RL's pinned files from URL/terminal-rl/... instead of the repository host (checked alike).",
)
@click.option("--force", is_flag=True, help="Store assets whose sha256 differs from the known upstream hash.")
@click.option(
    "--camel-rich",
    type=click.Choice(("14", "15")),
    default="14",
    show_default=True,
    help="The release line of rich camel's toolkit runs with to check oc-repl's conversion (as `run --camel-rich`).",
)
def sync(
    only: tuple[str, ...], openclaw_rl: str | None, openclaw_rl_mirror: str | None, force: bool, camel_rich: str
) -> None:
    """Fetch the exact upstream assets, check their sha256, and use them from then on.

    With no --openclaw-rl, OpenClaw-RL's files are fetched at the commit oc-repl pins, each checked against its
    sha256 before it is run; --openclaw-rl PATH reads a checkout instead, offline."""
    from oc_repl import paths
    from oc_repl.protocols.sync import sync as run_sync

    if openclaw_rl and openclaw_rl_mirror:
        from oc_repl.errors import UsageError

        _fail(UsageError("--openclaw-rl and --openclaw-rl-mirror name two sources of the same files: give one"))
    click.echo(f"storing in {paths.upstream_dir()}", err=True)
    failed = 0
    for outcome in run_sync(only, openclaw_rl, force, say=_say, mirror=openclaw_rl_mirror, camel_rich=camel_rich):
        failed += not outcome.ok
        click.echo(f"{'ok' if outcome.ok else 'FAILED'}  {outcome.asset}: {outcome.message}")
    sys.exit(1 if failed else 0)


def _say(line: str) -> None:
    click.echo(line, err=True)

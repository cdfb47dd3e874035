"""``render``: a snapshot as text for a terminal: the summary, the task tree (each task under
the task whose nursery runs it) with each wait's line and details, then the sections a harness
adds (its turn, its open tool calls with their process trees, its transcript's last entries)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

INDENT = "  "


def render(snapshot: dict[str, Any]) -> str:
    """The whole snapshot as lines of text."""
    tasks: list[dict[str, Any]] = snapshot.get("tasks", [])
    head = f"{snapshot.get('task_count', len(tasks))} tasks"
    if snapshot.get("omitted"):
        why = "" if snapshot.get("complete", True) else ": the time to read them ran out"
        head += f" ({snapshot['omitted']} not shown{why})"
    took = snapshot.get("took")
    if isinstance(took, int | float):
        head += f", read in {took * 1000:.1f} ms"
    lines = [f"{snapshot.get('summary', '')}", "", head]
    lines += _tree(tasks)
    sections = snapshot.get("sections") or {}
    for name, value in sections.items():
        if isinstance(value, dict) and "error" in value:
            lines += ["", f"{name}: could not be read: {value['error']}"]
        elif name in SECTION_RENDERERS:
            lines += ["", *SECTION_RENDERERS[name](value)]
        else:
            lines += ["", f"{name}:", INDENT + json.dumps(value)[:400]]
    return "\n".join(lines) + "\n"


def line_of(entry: dict[str, Any]) -> str:
    """``at file:line in function: source`` of an entry (``somewhere unknown``: no frame)."""
    where = entry.get("where")
    if not where:
        return "somewhere unknown"
    return f"at {where['file']}:{where['line']} in {where['function']}: {where['source']}"


def _tree(tasks: list[dict[str, Any]]) -> list[str]:
    children: dict[Any, list[dict[str, Any]]] = {}
    for task in tasks:
        children.setdefault(task["parent"], []).append(task)
    out: list[str] = []
    stack = [(task, 1) for task in reversed(children.get(None, []))]
    while stack:
        task, depth = stack.pop()
        out += _task(task, INDENT * depth)
        stack.extend((child, depth + 1) for child in reversed(children.get(task["id"], [])))
    return out


def _task(task: dict[str, Any], pad: str) -> list[str]:
    count = task.get("count", 1)
    if count > 1:
        more = count - len(task["names"])
        who = f"{count} tasks ({', '.join(repr(n) for n in task['names'])}" + (
            f" and {more} more)" if more > 0 else ")"
        )
    else:
        who = repr(task["name"])
    wait = task["wait"]
    if wait["kind"] == "running":
        return [f"{pad}{who} is running (it is taking this snapshot)"]
    if not task.get("where"):
        return [f"{pad}{who}: {wait['on']}"]
    verb = "wait" if count > 1 else "waits"
    lines = [f"{pad}{who} {verb} {line_of(task)}", f"{pad}{INDENT}on {_wait(wait)}"]
    for holder in wait.get("holders", []):
        made = f" by task {holder['task']!r}" if holder.get("task") else ""
        lines.append(f"{pad}{INDENT * 2}held open by {holder['name']!r} made at "
                     f"{holder['site']}{made}")  # fmt: skip
    return lines


def _wait(wait: dict[str, Any]) -> str:
    text = str(wait["on"])
    figures = []
    if "queued" in wait:
        capacity = wait.get("capacity")
        bound = "unbounded" if capacity is None else f"{capacity:g}"
        figures.append(f"{wait['queued']} queued of {bound}")
    if "senders" in wait:
        senders = wait["senders"]
        figures.append(f"{senders} open sender" + ("" if senders == 1 else "s"))
    if wait.get("owner"):
        figures.append(f"owned by task {wait['owner']!r}")
    if "children" in wait:
        children = wait["children"]
        figures.append(f"{children} child" if children == 1 else f"{children} children")
    if "deadline_in" in wait:
        figures.append(f"deadline in {wait['deadline_in']:.1f} s")
    return text + (f" ({', '.join(figures)})" if figures else "")


def _turn(turn: dict[str, Any]) -> list[str]:
    if turn.get("kind", "idle") == "idle":
        return ["turn: none (the engine waits for a prompt)"]
    what = "tool " + turn.get("name", "") if turn["kind"] == "tool" else "turn"
    if turn["kind"] == "turn" and turn.get("name"):
        what += f" on {turn['name']}"
    limit = turn.get("threshold") or 0
    allowed = f" of {limit:g} s allowed ({turn.get('source', '')})" if limit else ""
    return [f"turn: {what}, running {turn.get('age', 0):.1f} s, silent "
            f"{turn.get('silence', 0):.1f} s{allowed}"]  # fmt: skip


def _tools(tools: list[dict[str, Any]]) -> list[str]:
    if not tools:
        return ["open tool calls: none"]
    out = ["open tool calls:"]
    for tool in tools:
        limit = tool.get("threshold")
        allowed = f" of {limit:g} s allowed ({tool.get('source', '')})" if limit else ""
        out.append(f"{INDENT}{tool['name']} (call {tool['call_id']}), running "
                   f"{tool.get('age', 0):.1f} s, silent {tool.get('silence', 0):.1f} s"
                   f"{allowed}")  # fmt: skip
        for process in tool.get("processes", []):
            reading = f" {process['reading']}" if process.get("reading") else ""
            out.append(f"{INDENT * 2}pid={process['pid']} ppid={process['ppid']} "
                       f"state={process['state']} wchan={process['wchan']}{reading} "
                       f"cmd={process['cmd']}")  # fmt: skip
    return out


def _transcript(entries: list[dict[str, Any]]) -> list[str]:
    out = [f"transcript, last {len(entries)} entries:"]
    out += [f"{INDENT}{entry['line']}" for entry in entries]
    return out


SECTION_RENDERERS: dict[str, Callable[[Any], list[str]]] = {
    "turn": _turn, "tools": _tools, "transcript": _transcript,
}  # fmt: skip

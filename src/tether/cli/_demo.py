"""``tether demo``: what is built so far, shown on live objects, and what is not built yet.

Each scene replays the core of an incident from ``shared/seeds`` with the layers that exist:
a stray sender clone that keeps an engine waiting (004), a SIGTERM mid tool call whose sender
nobody knew, whose escaped children survived and whose transcript dangled (000), a phantom
from an older epoch (004), a real harness process that is superseded and really exits,
even when its engine keeps a stray sender clone (004), and a daemon that reattaches to a healthy
harness, replaces a phantom and fails a crash loop instead of retrying forever (004).
"""

from __future__ import annotations

from typing import TextIO

from ._scene_agentd import replay_phantom
from ._scene_channels import replay_drop, replay_move, replay_stray_clone
from ._scene_epochs import replay_superseded
from ._scene_harness import replay_superseded_harness
from ._scene_process import replay_sigterm_tree
from ._timeline import Timeline, Verdict

_NOT_BUILT = (
    ("incident replays", "000, 003 and 004 end to end with a daemon; `tether run`", "issue 9"),
)

_SCENES = (
    ("1. (004) main keeps a stray clone of the command sender", replay_stray_clone),
    ("2. (004) the fix: hand the sender over with move()", replay_move),
    ("3. (004) a sender dropped without close()", replay_drop),
    ("4. (000) SIGTERM while a tool's escaped processes run", replay_sigterm_tree),
    ("5. (004) a reclaimed session fences out its old harness", replay_superseded),
    ("6. (004) a Superseded harness really exits", replay_superseded_harness),
    ("7. (004) agentd reattaches, replaces a phantom, and never loops", replay_phantom),
)


async def demo(out: TextIO) -> int:
    """Run every scene, print its timeline and a verdict table; 0 when every row passes."""
    print("tether demo: the incidents in miniature, on the layers built so far\n", file=out)
    verdicts: list[Verdict] = []
    for title, replay in _SCENES:
        print(title, file=out)
        verdicts += await replay(Timeline(out))
        print(file=out)
    print("| guarantee | verdict | measured |\n| --- | --- | --- |", file=out)
    for v in verdicts:
        print(f"| {v.guarantee} | {'PASS' if v.passed else 'FAIL'} | {v.figure} |", file=out)
    print("\nNot built yet (the demo grows with each layer):", file=out)
    for module, what, issue in _NOT_BUILT:
        print(f"  - {module}: {what} ({issue})", file=out)
    return 0 if all(v.passed for v in verdicts) else 1

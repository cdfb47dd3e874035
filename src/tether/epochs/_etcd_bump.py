"""``EtcdBumps``: the etcd store's epochs, issued in groups of up to ``GROUP`` sessions.

A bump reads a session's epoch and owner keys and swaps both in one transaction that compares
their ``mod_revision``. Bumps made while another is in flight are grouped (``GroupCommit``):
one transaction compares, writes and, on a conflict, reads back every session of a chunk, so
claiming 1,000 sessions costs tens of round trips, not thousands. A conflict on any session
fails the chunk's comparison; the answer carries every session's keys as they are, and the
chunk is tried again on them, so no session is ever written from a stale read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from .._batch import GroupCommit
from ._etcd_client import EtcdClient, Keys, b64, first_kv, get, put, revision, same_revision, unb64
from ._etcd_lease import HostLease
from ._store import OwnedElsewhere

GROUP = 64
"""Sessions per transaction: two comparisons, two writes and two reads each, within etcd's
default limit of 128 operations per transaction (``--max-txn-ops``)."""
_WIDTH = 20
"""Epochs are stored zero-padded so that etcd's byte-wise value comparison is numeric."""

_Kvs = tuple[dict[str, Any] | None, dict[str, Any] | None]
"""A session's epoch and owner keys, as last read or written (``None``: absent)."""


class EtcdBumps:
    """Issues epochs and makes this host the owner of each session bumped."""

    def __init__(self, client: EtcdClient, keys: Keys, lease: HostLease, host_id: str) -> None:
        self.client = client
        self.keys = keys
        self.lease = lease
        self.host_id = host_id
        self._last: dict[str, _Kvs] = {}
        """What this store wrote last for each session: the likely state, so a bump can try
        its swap at once (a stale guess fails the comparison and the answer has the truth)."""
        self._group: GroupCommit[str, int | OwnedElsewhere] = GroupCommit(self._bump_all)

    async def bump(self, session: str) -> int:
        """The next epoch of ``session``, now owned by this host.

        Raises:
            OwnedElsewhere: another host owns the session and its lease is alive.
        """
        result = await self._group.submit(session)
        if isinstance(result, OwnedElsewhere):
            raise result
        return result

    async def _bump_all(self, sessions: Sequence[str]) -> list[int | OwnedElsewhere]:
        """Bump every session of ``sessions`` in order (one named twice is bumped twice)."""
        results: dict[int, int | OwnedElsewhere] = {}
        waiting = list(range(len(sessions)))
        while waiting:  # each wave names a session once; its chunks run at once
            wave: list[int] = []
            later: list[int] = []
            named: set[str] = set()
            for index in waiting:
                (later if sessions[index] in named else wave).append(index)
                named.add(sessions[index])
            waiting = later
            chunks = [wave[i : i + GROUP] for i in range(0, len(wave), GROUP)]

            async def run(chunk: list[int]) -> None:
                done = await self._bump_chunk([sessions[i] for i in chunk])
                results.update(zip(chunk, done, strict=True))

            if len(chunks) == 1:
                await run(chunks[0])
            else:
                async with trio.open_nursery() as nursery:
                    for chunk in chunks:
                        nursery.start_soon(run, chunk)
        return [results[index] for index in range(len(sessions))]

    async def _bump_chunk(self, names: list[str]) -> list[int | OwnedElsewhere]:
        keys = {
            name: (self.keys.key("epoch", name), self.keys.key("owner", name)) for name in names
        }
        seen = {name: self._last[name] for name in names if name in self._last}
        unknown = [name for name in names if name not in seen]
        if unknown:
            flat = await self.client.read(*(key for name in unknown for key in keys[name]))
            seen.update({name: (flat[2 * i], flat[2 * i + 1]) for i, name in enumerate(unknown)})
        out: dict[str, int | OwnedElsewhere] = {}
        trying = names
        while trying:
            lease = await self.lease.ensure()
            live = []
            for name in trying:
                owner_kv = seen[name][1]
                if owner_kv is not None and (host := unb64(owner_kv["value"])) != self.host_id:
                    self._last.pop(name, None)
                    out[name] = OwnedElsewhere(name, host)
                else:
                    live.append(name)
            if not live:
                break
            epochs = {name: 1 + _epoch(seen[name][0]) for name in live}
            values = {name: f"{epoch:0{_WIDTH}d}" for name, epoch in epochs.items()}
            compare, success, failure = [], [], []
            for name in live:
                (epoch_key, owner_key), (epoch_kv, owner_kv) = keys[name], seen[name]
                compare += [
                    same_revision(epoch_key, revision(epoch_kv)),
                    same_revision(owner_key, revision(owner_kv)),
                ]
                success += [put(epoch_key, values[name]), put(owner_key, self.host_id, lease)]
                failure += [get(epoch_key), get(owner_key)]
            answer = await self.client.txn(compare, success, failure)
            if answer.get("succeeded"):
                rev = answer["header"]["revision"]
                for name in live:
                    self._last[name] = (
                        {"value": b64(values[name]), "mod_revision": rev},
                        {"value": b64(self.host_id), "mod_revision": rev},
                    )
                    self.lease.own(name, epochs[name])
                    out[name] = epochs[name]
                break
            kvs = [first_kv(response) for response in answer.get("responses", [])]
            seen.update({name: (kvs[2 * i], kvs[2 * i + 1]) for i, name in enumerate(live)})
            trying = live
        return [out[name] for name in names]


def _epoch(kv: dict[str, Any] | None) -> int:
    return 0 if kv is None else int(unb64(kv["value"]))

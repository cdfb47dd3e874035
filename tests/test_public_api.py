"""tether re-exports exactly the public names of DESIGN.md that exist so far."""

from __future__ import annotations

import tether
import tether.channels

CHANNELS = {
    "ChannelClosed",
    "ChannelStatistics",
    "Holder",
    "OneshotReceiver",
    "OneshotSender",
    "Receiver",
    "SendError",
    "Sender",
    "WatchReceiver",
    "WatchSender",
    "WeakSender",
    "channel",
    "oneshot",
    "watch",
}


def test_top_level_reexports_every_public_name() -> None:
    assert set(tether.__all__) == CHANNELS
    for name in tether.__all__:
        assert getattr(tether, name) is getattr(tether.channels, name)


def test_public_names_say_where_they_live() -> None:
    for name in tether.channels.__all__:
        assert getattr(tether.channels, name).__module__ == "tether.channels", name


def test_errors_are_one_family() -> None:
    assert issubclass(tether.SendError, tether.ChannelClosed)
    assert issubclass(tether.ChannelClosed, Exception)


def test_the_package_is_typed() -> None:
    from importlib.resources import files

    assert files("tether").joinpath("py.typed").is_file()

"""The harness's reconnect budget counts the host's time at a runnable process's CPU share
(issue 40, row 5: harnesses gave up on a daemon that was slow to restart only because the
host was loaded)."""

from __future__ import annotations

import trio
import trio.testing

from tether.harness._budget import FairBudget, cpu_share


def test_the_share_is_a_fraction_of_one_cpu() -> None:
    assert 0.0 < cpu_share() <= 1.0


async def test_on_an_idle_host_the_budget_is_wall_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = FairBudget(8.0, share=lambda: 1.0)
    await trio.sleep(7.9)
    assert not budget.exhausted()
    await trio.sleep(0.2)
    assert budget.exhausted()


async def test_under_a_load_of_30_on_2_cpus_a_slow_restart_is_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = FairBudget(8.0, share=lambda: 2 / 30)
    for _ in range(40):  # 40 s of wall time: 2.7 s of fair share
        await trio.sleep(1.0)
        assert not budget.exhausted()
    budget.restart()  # the daemon answered: the next outage has the whole budget again
    await trio.sleep(47.0)
    assert not budget.exhausted()
    assert budget.waited() == 47.0


async def test_a_daemon_truly_gone_is_given_up_on_under_any_load(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = FairBudget(8.0, stretch=6.0, share=lambda: 0.001)
    await trio.sleep(47.9)
    assert not budget.exhausted()
    await trio.sleep(0.2)
    assert budget.exhausted()

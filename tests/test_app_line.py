"""The run line: one run holds the model, the rest wait in arrival order and learn their place."""

from __future__ import annotations

import asyncio

import pytest

from app.line import LineFull, RunLine


async def hold(line: RunLine, name: str, log: list, release: asyncio.Event) -> None:
    async def on_position(position: int) -> None:
        log.append((name, "waiting", position))

    async with line.turn(on_position):
        log.append((name, "running"))
        await release.wait()


def test_runs_take_turns_in_arrival_order_and_waiting_ones_hear_their_place_move():
    async def scenario() -> list:
        line, log = RunLine(), []
        releases = {name: asyncio.Event() for name in "abc"}
        tasks = []
        for name in "abc":
            tasks.append(asyncio.create_task(hold(line, name, log, releases[name])))
            await asyncio.sleep(0)
        for name in "abc":
            await asyncio.sleep(0.01)
            releases[name].set()
        await asyncio.gather(*tasks)
        return log

    log = asyncio.run(scenario())
    assert [entry for entry in log if entry[1] == "running"] == [("a", "running"), ("b", "running"), ("c", "running")]
    assert ("b", "waiting", 1) in log and ("c", "waiting", 2) in log and ("c", "waiting", 1) in log


def test_a_waiting_run_that_is_cancelled_leaves_the_line_and_the_next_moves_up():
    async def scenario() -> list:
        line, log = RunLine(), []
        release = asyncio.Event()
        first = asyncio.create_task(hold(line, "a", log, release))
        await asyncio.sleep(0)
        leaving = asyncio.create_task(hold(line, "b", log, asyncio.Event()))
        await asyncio.sleep(0)
        staying = asyncio.create_task(hold(line, "c", log, release))
        await asyncio.sleep(0.01)
        leaving.cancel()
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(first, staying)
        assert line.waiting == 0 and not line.busy
        return log

    log = asyncio.run(scenario())
    assert ("c", "waiting", 1) in log
    assert ("b", "running") not in log and ("c", "running") in log


def test_a_full_line_refuses_new_runs():
    async def scenario() -> None:
        line = RunLine(max_waiting=1)
        release = asyncio.Event()
        tasks = [asyncio.create_task(hold(line, name, [], release)) for name in "ab"]
        await asyncio.sleep(0.01)
        with pytest.raises(LineFull):
            async with line.turn(lambda position: asyncio.sleep(0)):
                pass
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())


def test_a_move_while_the_waiter_is_told_its_place_is_not_lost():
    """The holder leaves while the waiter's `on_position` is still sending: the waiter must still get the model."""

    async def scenario() -> list:
        line, log = RunLine(), []
        release = asyncio.Event()
        holder = asyncio.create_task(hold(line, "a", log, release))
        await asyncio.sleep(0)

        async def slow_on_position(position: int) -> None:
            log.append(("b", "waiting", position))
            release.set()  # the line moves while this message is on its way
            for _ in range(5):
                await asyncio.sleep(0)

        async def wait_then_run() -> None:
            async with line.turn(slow_on_position):
                log.append(("b", "running"))

        await asyncio.wait_for(asyncio.gather(holder, wait_then_run()), timeout=2)
        return log

    log = asyncio.run(scenario())
    assert log[-1] == ("b", "running")


def test_one_client_address_cannot_take_more_than_its_places_in_line():
    async def scenario() -> None:
        line = RunLine(max_waiting=16, max_per_client=2)
        release = asyncio.Event()

        async def hold_as(client: str) -> None:
            async with line.turn(lambda position: asyncio.sleep(0), client=client):
                await release.wait()

        tasks = [asyncio.create_task(hold_as("10.0.0.1")) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(LineFull, match="at most 2 per client address"):
            async with line.turn(lambda position: asyncio.sleep(0), client="10.0.0.1"):
                pass
        other = asyncio.create_task(hold_as("10.0.0.2"))  # another address still gets a place
        await asyncio.sleep(0.01)
        assert line.waiting == 2 and line.places("10.0.0.2") == 1
        release.set()
        await asyncio.gather(*tasks, other)
        assert line.places("10.0.0.1") == 0 and not line.busy

    asyncio.run(scenario())

"""The outbox is bounded by dropping old log batches, never task starts or exits."""

from __future__ import annotations

from agent_image.agent.outbox import Outbox
from controlplane.wire.agent_protocol import LogLine, TaskExited, TaskLogs, TaskStarted


def logs(n: int) -> TaskLogs:
    return TaskLogs(allocation_id="a", lines=[LogLine(timestamp=0.0, message=str(n))])


async def test_drops_oldest_logs_first_and_keeps_exits() -> None:
    box = Outbox(max_messages=3)
    box.put(TaskStarted(allocation_id="a", pid=1, started_at=0.0))
    box.put(logs(1))
    box.put(logs(2))
    box.put(TaskExited(allocation_id="a", exit_code=0))
    assert len(box) == 3 and box.dropped_log_batches == 1
    for i in range(5):
        box.put(TaskExited(allocation_id=f"x{i}", exit_code=1))
    kinds = []
    while len(box):
        kinds.append(type(await box.peek()).__name__)
        box.pop()
    assert kinds[:2] == ["TaskStarted", "TaskExited"]
    assert kinds.count("TaskExited") == 6 and "TaskLogs" not in kinds


async def test_peek_keeps_message_until_pop() -> None:
    box = Outbox()
    box.put(logs(1))
    first = await box.peek()
    assert await box.peek() is first
    box.pop()
    assert await box.wait_empty(0.1)

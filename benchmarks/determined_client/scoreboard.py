"""A check's verdict (Fail, Result), the commands it ran (Invocation), the Scoreboard that runs and
records checks, the helpers checks reach their verdicts with, and the report printed at the end."""

from __future__ import annotations

import re
import subprocess
import textwrap
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.determined_client.settings import EXPECTED

T = TypeVar("T")


class Fail(Exception):
    """A check's verdict: the one line the table shows."""


@dataclass
class Result:
    group: str
    name: str
    ok: bool
    reason: str = ""
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Invocation:
    command: str
    rc: int | None
    stdout: str
    stderr: str

    def tail(self, chars: int = 1500) -> str:
        text = (self.stdout.rstrip() + ("\n--- stderr ---\n" + self.stderr.rstrip() if self.stderr.strip() else ""))
        return text if len(text) <= chars else "..." + text[-chars:]


@dataclass
class Scoreboard:
    results: list[Result] = field(default_factory=list)
    trace: list[Invocation] = field(default_factory=list)  # the current check's commands
    verbose: bool = True

    def check(self, group: str, name: str, fn: Callable[[], T]) -> T | None:
        self.trace = []
        start = time.monotonic()
        value: T | None = None
        try:
            value = fn()
            result = Result(group, name, True)
        except Fail as e:
            result = Result(group, name, False, one_line(str(e)))
        except subprocess.TimeoutExpired as e:
            result = Result(group, name, False, f"timed out after {e.timeout:.0f} s: {e.cmd}")
        except Exception as e:  # noqa: BLE001 (a check's own bug or an unexpected answer is its failure)
            result = Result(group, name, False, one_line(f"{type(e).__name__}: {e}"),
                            traceback.format_exc(limit=3))
        result.seconds = time.monotonic() - start
        if not result.ok and self.trace:
            last = self.trace[-1]
            result.detail = f"$ {last.command}\n(exit {last.rc})\n{last.tail()}\n{result.detail}".rstrip()
        self.results.append(result)
        if self.verbose:
            mark = "PASS" if result.ok else "FAIL"
            print(f"  [{group}] {mark} {name} ({result.seconds:.1f} s){'' if result.ok else ': ' + result.reason}",
                  flush=True)
        return value

    def add(self, result: Result) -> None:
        self.results.append(result)
        if self.verbose:
            mark = "PASS" if result.ok else "FAIL"
            print(f"  [{result.group}] {mark} {result.name}{'' if result.ok else ': ' + result.reason}", flush=True)


def one_line(text: str, limit: int = 220) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def need(value: Any, what: str) -> Any:
    if value is None:
        raise Fail(f"needs {what}, which an earlier check did not provide")
    return value


def expect(condition: object, message: str) -> None:
    if not condition:
        raise Fail(message)


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise Fail(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {str(last)[:200]})")


def rows(table: str) -> list[list[str]]:
    """The cells of the client's plain table (header and rule left out)."""
    lines = [line for line in table.splitlines() if "|" in line]
    return [[cell.strip() for cell in line.split("|")] for line in lines[1:]]


def created_id(out: str) -> int:
    m = re.search(r"Created (?:test )?experiment (\d+)", out)
    if not m:
        raise Fail(f"no 'Created experiment N' in: {out[-300:]}")
    return int(m.group(1))


def print_report(board: Scoreboard, groups: list[str]) -> None:
    width = max((len(r.name) for r in board.results), default=10)
    print(f"\n{'group':8} {'check':{width}}  result  why")
    print(f"{'-' * 8} {'-' * width}  ------  {'-' * 40}")
    for r in board.results:
        print(f"{r.group:8} {r.name:{width}}  {'PASS' if r.ok else 'FAIL'}    {r.reason}")
    failed = [r for r in board.results if not r.ok]
    if failed:
        print("\nFailures, with the last command each ran and its output:")
        for r in failed:
            print(f"\n### [{r.group}] {r.name}: {r.reason}")
            if r.detail:
                print(textwrap.indent(r.detail.rstrip(), "    "))
    print()
    for g in groups:
        mine = [r for r in board.results if r.group == g]
        if len(mine) != EXPECTED[g]:
            print(f"note: {g} ran {len(mine)} checks, not the {EXPECTED[g]} it defines")

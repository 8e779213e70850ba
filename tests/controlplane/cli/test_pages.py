"""The CLI reads every page of a cursor-paged listing (a long trial's metrics), each row once."""

from __future__ import annotations

from controlplane.cli.pages import cursor_paged


class PagedMaster:
    """Serves 25 rows three at a time, as the master does: a nextCursor while more remain."""

    def __init__(self) -> None:
        self.queries: list[dict] = []

    def get(self, path: str, params: dict) -> dict:
        self.queries.append(params)
        start = int(params.get("cursor", 0))
        rows = [{"stepsCompleted": i} for i in range(start, min(start + 3, 25))]
        more = start + 3 < 25
        return {"metrics": rows, **({"nextCursor": str(start + 3)} if more else {})}


def test_cursor_paged_follows_every_page():
    master = PagedMaster()
    rows = list(cursor_paged(master, "/api/v1/trials/1/metrics", "metrics", {"group": "training"}, page_size=3))
    assert [r["stepsCompleted"] for r in rows] == list(range(25))
    assert len(master.queries) == 9 and all(q["group"] == "training" and q["limit"] == 3 for q in master.queries)


def test_an_answer_without_a_cursor_is_one_page():
    class OnePage:
        def get(self, path: str, params: dict) -> dict:
            return {"metrics": [{"stepsCompleted": 1}]}

    assert list(cursor_paged(OnePage(), "/p", "metrics")) == [{"stepsCompleted": 1}]

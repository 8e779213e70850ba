"""Query parameters of every paged listing (see ``services/paging.py``): bounded at the edge."""

from __future__ import annotations

from typing import Annotated

from litestar.params import Parameter

from controlplane.master.services.paging import MAX_INT64, MAX_PAGE

Limit = Annotated[int, Parameter(ge=0, le=MAX_PAGE, description=f"rows per page; 0: the largest page ({MAX_PAGE})")]
Offset = Annotated[int, Parameter(ge=0, le=MAX_INT64, description="rows to skip (follow nextCursor for deep pages)")]
Cursor = Annotated[str | None, Parameter(max_length=1024, description="nextCursor of the previous page")]
TrialId = Annotated[int, Parameter(ge=1, le=2**31 - 1, description="the trial's id")]
ExperimentId = Annotated[int, Parameter(ge=1, le=2**31 - 1, description="the experiment's id")]

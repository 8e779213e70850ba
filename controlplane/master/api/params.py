"""Path and query parameters of the experiment, job, model and checkpoint routes, bounded at the edge.

Lists page with ``limit`` (0: the largest page, ``MAX_LIST_PAGE``) and ``offset``; a value out of
range answers 400 naming the parameter before any handler runs.
"""

from __future__ import annotations

from typing import Annotated

from litestar.params import Parameter, QueryParameter

MAX_LIST_PAGE = 1000
MAX_ID = 2**31 - 1
MAX_INT64 = 2**63 - 1

ExperimentId = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the experiment's id")]
TrialId = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the trial's id")]
VersionNumber = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the model version's number (from 1)")]
ListLimit = Annotated[int, Parameter(ge=0, le=MAX_LIST_PAGE,
                                     description=f"rows per page; 0: the largest page ({MAX_LIST_PAGE})")]
# Never negative (Determined's model and template lists read a negative one as "from the end"; here
# it is a 400 naming ``offset``, like every other list's).
ListOffset = Annotated[int, Parameter(ge=0, le=MAX_INT64, description="rows to skip")]
CheckpointUuid = Annotated[str, Parameter(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$",
                                          description="the checkpoint's uuid")]
TaskId = Annotated[str, Parameter(min_length=1, max_length=128, pattern=r"^[^\x00/]+$", description="the task's id")]
ModelRef = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00]+$",
                                    description="a model's name, or its numeric id")]
QueryText = Annotated[str | None, Parameter(max_length=255, pattern=r"^[^\x00]*$")]
ResourcePoolQuery = Annotated[str | None, QueryParameter(name="resourcePool", max_length=255, pattern=r"^[^\x00]*$")]
OrderBy = Annotated[str | None, QueryParameter(name="orderBy", max_length=64, pattern=r"^[A-Z_]*$",
                                          description="ORDER_BY_ASC or ORDER_BY_DESC")]
SortBy = Annotated[str | None, QueryParameter(name="sortBy", max_length=64, pattern=r"^[A-Z_]*$")]
SortByAttr = Annotated[str | None, QueryParameter(name="sortByAttr", max_length=64, pattern=r"^[A-Z_]*$")]


def page_limit(limit: int) -> int:
    """The rows a page holds: ``limit``, or the largest page for 0."""
    return limit if limit > 0 else MAX_LIST_PAGE

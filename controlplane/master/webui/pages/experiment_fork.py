"""Fork an experiment (``/experiments/{id}/fork``): its config in an editor, sent back as a new
experiment with ``parentId`` (Determined's fork: the new experiment takes the parent's code). The
config is shown as the API shows it, secrets masked; the master puts the parent's secret back
wherever the mask comes back unchanged. The browser posts it to ``POST /api/v1/experiments``, so
what may be forked and every message is the API's."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from litestar import Response, get

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ExperimentId
from controlplane.master.api.serializers import config_json
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import experiment_reads
from controlplane.master.webui import render


@get("/experiments/{exp_id:int}/fork", opt=opt(Action.VIEW), include_in_schema=False)
async def fork_page(request: AnyRequest, exp_id: ExperimentId) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        exp = await experiment_reads.experiment_without_code(session, exp_id)
        if exp is None:
            return render.missing(request, f"Experiment {exp_id} does not exist.")
    config = config_json(exp)
    config["name"] = f"{exp.name} (fork)"
    # A config may be up to the 1 MiB cap: dumping it is CPU work, kept off the event loop.
    text: str = await asyncio.to_thread(lambda: yaml.safe_dump(config, sort_keys=False, default_flow_style=False))
    return render.page(request, "experiment_fork.html", exp=exp, text=text)


ROUTES: list[Any] = [fork_page]

"""The web UI at phone width (390 × 844 CSS px, mobile emulation: the meta viewport is honoured) in
Debian's chromium against a real master: no page is wider than the screen, every nav link stays on
it, and the Job Queue's Status, Slots and Manage Job are reached by scrolling the table, not the page.

The data is what the pages need and no more: an experiment that stays queued (no agent), its trial,
and a model."""

from __future__ import annotations

import json

import pytest
import requests
import yaml

from tests.e2e.conftest import det
from tests.support.cluster import MasterProcess, database_for, login, wait_for

# SQLite (the default): the layout is under test, not SQL.
# The module shares a master (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_phone_width")]

WIDTH, HEIGHT = 390, 844
PHONE = {"viewport": {"width": WIDTH, "height": HEIGHT}, "is_mobile": True, "has_touch": True}
NAV = ("Experiments", "Job Queue", "Cluster", "Models", "API", "Sign out")

# The elements that stick out past the viewport's right edge, innermost first (what a failure names).
OVERFLOW = """() => {
  const w = document.documentElement.clientWidth;
  const out = [...document.body.querySelectorAll("*")].filter((el) => el.getBoundingClientRect().right > w + 0.5);
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + [...el.classList].map((c) => "." + c).join("");
  return out.filter((el) => !out.some((o) => o !== el && el.contains(o))).slice(0, 8)
    .map((el) => name(el) + " right=" + Math.round(el.getBoundingClientRect().right));
}"""


@pytest.fixture(scope="module")
def master(request, tmp_path_factory):
    data = tmp_path_factory.mktemp("master")
    with database_for(request.node, data / "db") as db_url:
        m = MasterProcess(data / "master", db_url).start()
        try:
            yield m
        finally:
            m.stop()


@pytest.fixture(scope="module")
def seeded(master, tmp_path_factory) -> dict:
    """An experiment (no agent: its job stays queued) with a long name, a label and a description,
    its trial, and a model."""
    tmp = tmp_path_factory.mktemp("seed")
    (tmp / "ctx").mkdir()
    (tmp / "ctx" / "train.py").write_text("print('never runs')\n")
    config = {"name": "a-rather-long-experiment-name-on-a-small-screen", "entrypoint": "python3 train.py",
              "description": "what a phone must show without widening the page", "labels": ["phone"],
              "hyperparameters": {"learning_rate": 0.01, "hidden_size": 64},
              "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}}}
    (tmp / "exp.yaml").write_text(yaml.safe_dump(config))
    env = {"DET_MASTER": master.url, "XDG_CONFIG_HOME": str(tmp / "xdg")}
    exp_id = json.loads(det("experiment", "create", str(tmp / "exp.yaml"), str(tmp / "ctx"), "--json",
                            env=env).stdout)["id"]
    headers = {"Authorization": f"Bearer {login(master.url)}"}

    def get(path: str) -> dict:
        r = requests.get(f"{master.url}{path}", headers=headers, timeout=10)
        r.raise_for_status()
        return r.json()

    trial_id = wait_for(lambda: get(f"/api/v1/experiments/{exp_id}")["experiment"]["trialIds"], 60, "a trial")[0]
    job_id = wait_for(lambda: [j["full"]["jobId"] for j in get("/api/v1/job-queues-v2")["jobs"]
                               if j["full"]["entityId"] == str(exp_id)], 60, "the queued job")[0]
    r = requests.post(f"{master.url}/api/v1/models", headers=headers, timeout=10,
                      json={"name": "phone-model", "description": "a model seen from a phone", "labels": ["phone"]})
    r.raise_for_status()
    return {"exp": exp_id, "trial": trial_id, "job": job_id, "model": "phone-model"}


def _inside(box: dict | None, left: float = 0, right: float = WIDTH) -> bool:
    return box is not None and box["width"] > 0 and left - 0.5 <= box["x"] and box["x"] + box["width"] <= right + 0.5


def _fits(page) -> list[str]:
    """What is wrong with the page now at phone width: [] when nothing."""
    wide, shown = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    return ([] if wide <= WIDTH else [f"{page.url}: the page is {wide}px wide: {page.evaluate(OVERFLOW)}"]) + \
        ([] if shown == WIDTH else [f"{page.url}: the browser zoomed out to show {shown}px"])


def test_every_page_fits_the_width_and_keeps_the_whole_nav(ui, master, seeded):
    s = ui(master.url, **PHONE)
    page = s.page
    problems: list[str] = []
    for path in ("/experiments", f"/experiments/{seeded['exp']}", f"/trials/{seeded['trial']}", "/jobs",
                 "/cluster", "/models", f"/models/{seeded['model']}"):
        page.goto(path)
        page.wait_for_selector("main")
        problems += _fits(page)
        links = page.locator("header.top nav a, header.top .who button")
        labels = [t.strip() for t in links.all_inner_texts()]
        assert set(NAV) <= set(labels), (path, labels)
        for n, label in enumerate(labels):
            link = links.nth(n)
            box = link.bounding_box()
            if not (link.is_visible() and _inside(box) and box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT):
                problems.append(f"{path}: nav {label!r} is off the screen: {box}")
    assert not problems, "\n".join(problems)


def test_the_sign_in_page_fits_the_width(chromium, master):
    context = chromium.new_context(base_url=master.url, **PHONE)
    try:
        page = context.new_page()
        page.goto("/login")
        assert _fits(page) == []
        for selector in ("input[name=username]", "input[name=password]", "button[type=submit]"):
            assert _inside(page.locator(selector).bounding_box()), selector
    finally:
        context.close()


def test_the_queue_scrolls_its_table_to_status_slots_and_manage_job(ui, master, seeded):
    s = ui(master.url, **PHONE)
    page = s.page
    page.goto("/jobs")
    row = page.locator(f'#job-queue tr[data-job-id="{seeded["job"]}"]')
    row.wait_for()
    assert _fits(page) == []
    heads = page.eval_on_selector_all("#job-queue thead th", "ths => ths.map(t => t.textContent.trim())")
    status = row.locator(f"td:nth-child({heads.index('Status') + 1})")
    slots = row.locator(f"td:nth-child({next(i for i, h in enumerate(heads) if h.startswith('Slots')) + 1})")
    manage = row.locator("details.menu summary")
    # The table scrolls in a box of its own, inside the screen.
    box = page.locator("#job-queue").evaluate("""t => { let p = t.parentElement;
        while (p && getComputedStyle(p).overflowX === "visible") p = p.parentElement;
        const r = p ? p.getBoundingClientRect() : null;
        return r && {x: r.x, width: r.width, scrolls: p.scrollWidth > p.clientWidth}; }""")
    assert box and _inside(box) and box["scrolls"], box
    for name, cell in (("Status", status), ("Slots", slots), ("Manage Job", manage)):
        cell.scroll_into_view_if_needed()
        assert cell.is_visible(), name
        assert page.evaluate("window.scrollX") == 0, f"{name}: the page scrolled sideways, not the table"
        assert _inside(cell.bounding_box(), box["x"], box["x"] + box["width"]), (name, cell.bounding_box(), box)
    # The state, then why the job waits (scheduler/waiting.py): this master has no agent.
    assert status.inner_text().splitlines() == ["QUEUED", "no agent of resource pool 'default' is connected"]
    assert slots.inner_text() == "0/1"

    # The page's poll replaces the table every 3 s: the table stays where it was scrolled to.
    scroller = "document.querySelector('#job-queue').parentElement"
    scrolled = page.evaluate(f"{scroller}.scrollLeft")
    assert scrolled > 0
    page.evaluate("""() => new Promise((done) => {
        document.body.addEventListener("htmx:afterSettle", () => done(), {once: true});
        window.controlplane.refreshLive(); })""")
    assert page.evaluate(f"{scroller}.scrollLeft") == scrolled

    # Manage Job opens, on the screen (the menu scrolls itself into view), and its dialog fits the width.
    manage.click()
    button = row.locator("button[data-manage-job]")
    page.wait_for_function(f"() => {{ const r = document.querySelector('#job-queue button[data-manage-job]')"
                           f".getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= {WIDTH}; }}")
    assert button.is_visible() and _inside(button.bounding_box())
    button.click()
    dialog = page.locator("#manage-job[open]")
    dialog.wait_for()
    assert _inside(dialog.bounding_box()), dialog.bounding_box()
    dialog.locator('button[value="close"]').click()
    assert page.evaluate("window.scrollX") == 0

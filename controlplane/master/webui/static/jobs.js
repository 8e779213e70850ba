// The Job Queue page's Manage Job dialog. Each button sends what `det job update` sends: one
// POST /api/v1/job-queues with one updates[] entry (the unused keys null), so the rules and the
// messages are the API's; a refusal is shown in #flash.
"use strict";

(() => {
  const dialog = () => document.getElementById("manage-job");
  let jobId = "";

  // The table is replaced every 3 s: not while a row's menu or the dialog is open.
  document.addEventListener("htmx:beforeRequest", (e) => {
    const live = document.getElementById("live");
    if (e.target !== live) return;
    if (dialog()?.open || live.querySelector("details.menu[open]")) e.preventDefault();
  });

  document.addEventListener("click", (e) => {
    const button = e.target.closest("[data-manage-job]");
    if (!button) return;
    e.preventDefault();
    button.closest("details")?.removeAttribute("open");
    const d = dialog();
    if (!d) return;
    jobId = button.dataset.manageJob;
    d.querySelector('[data-field="name"]').textContent = button.dataset.name || "";
    d.querySelector('[data-field="job-id"]').textContent = jobId;
    const form = d.querySelector("form");
    if (form.priority) form.priority.value = button.dataset.priority || "";
    if (form.weight) form.weight.value = button.dataset.weight || "";
    if (form.target) form.target.value = "";
    const list = d.querySelector("#job-targets");
    if (list) {
      list.replaceChildren(...[...document.querySelectorAll("#job-queue tr[data-job-id]")]
        .filter((row) => row.dataset.jobId !== jobId)
        .map((row) => {
          const option = document.createElement("option");
          option.value = row.dataset.jobId;
          option.label = row.querySelector("td:nth-child(4)")?.textContent.trim() || "";
          return option;
        }));
    }
    d.showModal();
  });

  // What `det job update --priority/--weight/--resource-pool/--ahead-of/--behind-of` would send.
  function change(form, op) {
    switch (op) {
      case "priority": return ["priority", numberOr(form.priority.value), `priority ${form.priority.value.trim()}`];
      case "weight": return ["weight", numberOr(form.weight.value), `weight ${form.weight.value.trim()}`];
      case "resourcePool": return ["resourcePool", form.resourcePool.value, `resource pool ${form.resourcePool.value}`];
      case "position": {
        const field = form.relation.value;
        const target = form.target.value.trim();
        return [field, target, `${field === "aheadOf" ? "ahead of" : "behind of"} ${target}`];
      }
      case "top": {
        const head = document.getElementById("live")?.dataset.head || "";
        if (!head || head === jobId) return null;
        return ["aheadOf", head, `ahead of ${head}`];
      }
      default: return null;
    }
  }

  // A number where the text is one; anything else goes as typed, and the API says what is wrong.
  function numberOr(text) {
    const t = text.trim();
    return t !== "" && Number.isFinite(Number(t)) ? Number(t) : t;
  }

  document.addEventListener("submit", async (e) => {
    const d = dialog();
    if (!d || e.target.closest("dialog") !== d) return;
    e.preventDefault();
    const op = e.submitter?.value;
    if (op === "close") { d.close(); return; }
    const c = change(e.target, op);
    if (c === null) {
      d.close();
      if (op === "top") window.controlplane.flash(`Job ${jobId} is already at the top of the queue.`, true);
      return;
    }
    const [field, value, described] = c;
    const entry = { jobId, priority: null, weight: null, resourcePool: null, aheadOf: null, behindOf: null };
    entry[field] = value;
    d.close();
    try {
      await window.controlplane.api("POST", "/api/v1/job-queues", { updates: [entry] });
      window.controlplane.flash(`Updated job ${jobId}: ${described}`, true);
    } catch (err) {
      window.controlplane.flash(err.message, false);
    }
    window.controlplane.refreshLive();
  });
})();

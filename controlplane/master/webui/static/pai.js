// The OpenPAI submit page: the pasted (or loaded) job JSON goes as typed to OpenPAI's
// POST /api/v1/user/{me}/jobs, so every check and message is the API's. A refused job's message
// names each mistake with its field path ("invalid job: a: ...; b: ..."): each is listed on its own.
"use strict";

(() => {
  const form = () => document.getElementById("pai-submit");
  const result = () => document.getElementById("submit-result");

  // "invalid job: p1: r1; p2: r2" -> ["p1: r1", "p2: r2"]; any other message stays whole.
  function mistakes(message) {
    const prefix = "invalid job: ";
    if (!message.startsWith(prefix)) return [message];
    return message.slice(prefix.length).split(/; (?=[A-Za-z_$][A-Za-z0-9_.$[\]-]*: )/);
  }

  function show(title, items, ok) {
    const box = result();
    const heading = document.createElement("p");
    heading.textContent = title;
    const list = document.createElement("ul");
    list.id = ok ? "submit-warnings" : "submit-errors";
    for (const item of items) {
      const li = document.createElement("li");
      li.textContent = item;
      list.appendChild(li);
    }
    box.className = ok ? "ok" : "error";
    box.replaceChildren(heading, ...(items.length ? [list] : []));
    return box;
  }

  function jobName(text) {
    try { const job = JSON.parse(text); return typeof job?.jobName === "string" ? job.jobName : ""; }
    catch (_) { return ""; }
  }

  document.addEventListener("change", async (e) => {
    const input = e.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "file" || !input.closest("#pai-submit")) return;
    const file = input.files?.[0];
    if (file) form().elements.job.value = await file.text();
  });

  document.addEventListener("submit", async (e) => {
    const f = e.target;
    if (f !== form()) return;
    e.preventDefault();
    const button = f.querySelector("button[type=submit]");
    const text = f.elements.job.value;
    button.disabled = true;
    result().replaceChildren();
    try {
      const answer = await window.controlplane.api("POST", f.dataset.submitPath, text);
      const name = jobName(text);
      const url = f.dataset.jobsBase + encodeURIComponent(name);
      const warnings = answer?.warnings || [];
      if (!warnings.length) { window.location.assign(url); return; }
      const box = show(`${answer.message}, with ${warnings.length} warning${warnings.length === 1 ? "" : "s"}:`,
                       warnings, true);
      const link = document.createElement("a");
      link.href = url;
      link.textContent = `Open job ${name}`;
      box.appendChild(link);
    } catch (err) {
      const items = mistakes(err.message);
      show(items.length === 1 ? "The job was refused:" : `The job was refused: ${items.length} mistakes`, items, false);
    } finally {
      button.disabled = false;
    }
  });
})();

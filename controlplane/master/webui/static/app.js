// The web UI's own script: no inline script runs (the CSP forbids it), so pages declare what
// they need with data- attributes and this file wires them.
//
// - Every htmx request and every call through api() carries the CSRF token (meta csrf-token):
//   the session cookie alone never changes state.
// - <button data-api="POST /api/v1/experiments/3/pause" [data-body='{"...": 1}'] [data-confirm="..."]>
//   calls the REST API itself, so what a page may do and the errors it shows are the API's own;
//   on success the page's live part (#live) refreshes at once, or [data-go="/path"] opens that page.
"use strict";

const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

function flash(message, ok) {
  const el = document.getElementById("flash");
  if (!el) return;
  el.textContent = message;
  el.classList.toggle("ok", !!ok);
  if (ok) setTimeout(() => { if (el.textContent === message) el.textContent = ""; }, 4000);
}

async function api(method, path, body) {
  const init = { method, headers: { "X-CSRF-Token": csrf(), "Accept": "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let data = null;
  try { data = await r.json(); } catch (_) { /* an empty answer */ }
  if (!r.ok) {
    const message = (data && (data.message || data.error?.error || data.detail)) || `${r.status} ${r.statusText}`;
    throw new Error(message);
  }
  return data;
}

function refreshLive() {
  const live = document.getElementById("live");
  if (live && window.htmx) window.htmx.trigger(live, "refresh");
}

document.addEventListener("htmx:configRequest", (e) => { e.detail.headers["X-CSRF-Token"] = csrf(); });

// A table wider than the screen scrolls sideways in its .table-scroll box; #live is replaced on
// every poll, so each box keeps where it was scrolled to (boxes matched by their order in #live).
let scrolledLeft = null;
document.addEventListener("htmx:beforeSwap", (e) => {
  if (e.detail.target?.id === "live") scrolledLeft = [...e.detail.target.querySelectorAll(".table-scroll")].map((el) => el.scrollLeft);
});
document.addEventListener("htmx:afterSwap", () => {
  const kept = scrolledLeft;
  scrolledLeft = null;
  if (!kept) return;
  document.getElementById("live")?.querySelectorAll(".table-scroll").forEach((el, i) => { if (kept[i]) el.scrollLeft = kept[i]; });
});
// A row's menu opens inside that box, perhaps past its edge: bring it into view.
document.addEventListener("toggle", (e) => {
  if (e.target.matches?.(".table-scroll details.menu[open]")) {
    e.target.querySelector(".menu-items")?.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
}, true);

document.addEventListener("click", async (e) => {
  const button = e.target.closest("[data-api]");
  if (!button) return;
  e.preventDefault();
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  const [method, path] = button.dataset.api.split(" ");
  button.disabled = true;
  try {
    await api(method, path, button.dataset.body);
    // data-go: where to go next (a deleted experiment's page is gone); a path on this origin only.
    const go = button.dataset.go;
    if (go && go.startsWith("/") && !go.startsWith("//")) { window.location.assign(go); return; }
    flash(button.dataset.done || "Done.", true);
    refreshLive();
  } catch (err) {
    flash(err.message, false);
  } finally {
    button.disabled = false;
  }
});

window.controlplane = { api, flash, refreshLive, csrf };

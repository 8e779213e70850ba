// The web UI's own script: no inline script runs (the CSP forbids it), so pages declare what
// they need with data- attributes and this file wires them.
//
// - Every htmx request and every call through api() carries the CSRF token (meta csrf-token):
//   the session cookie alone never changes state.
// - <button data-api="POST /api/v1/experiments/3/pause" [data-body='{"...": 1}'] [data-confirm="..."]>
//   calls the REST API itself, so what a page may do and the errors it shows are the API's own;
//   on success the page's live part (#live) refreshes at once.
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

document.addEventListener("click", async (e) => {
  const button = e.target.closest("[data-api]");
  if (!button) return;
  e.preventDefault();
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  const [method, path] = button.dataset.api.split(" ");
  button.disabled = true;
  try {
    await api(method, path, button.dataset.body);
    flash(button.dataset.done || "Done.", true);
    refreshLive();
  } catch (err) {
    flash(err.message, false);
  } finally {
    button.disabled = false;
  }
});

window.controlplane = { api, flash, refreshLive, csrf };

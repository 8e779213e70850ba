// The experiment page's edit form: <form data-api-form="PATCH /api/v1/experiments/3"> sends its
// labels (comma-separated) and description as JSON through app.js's api(), so the API's own
// checks and messages apply.
"use strict";

document.addEventListener("submit", async (e) => {
  const form = e.target.closest("form[data-api-form]");
  if (!form) return;
  e.preventDefault();
  const [method, path] = form.dataset.apiForm.split(" ");
  const labels = form.elements.labels.value.split(",").map((s) => s.trim()).filter((s) => s);
  const body = { labels, description: form.elements.description.value };
  const { api, flash, refreshLive } = window.controlplane;
  try {
    await api(method, path, body);
    flash("Saved.", true);
    refreshLive();
  } catch (err) {
    flash(err.message, false);
  }
});

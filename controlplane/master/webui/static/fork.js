// The fork page: the edited config goes to POST /api/v1/experiments with the parent's id (the
// master copies the parent's code), so every check and message is the API's. A refused config's
// message names each mistake on its own line: each is listed.
"use strict";

document.addEventListener("submit", async (e) => {
  const form = e.target;
  if (form.id !== "fork") return;
  e.preventDefault();
  const button = form.querySelector("button[type=submit]");
  const result = document.getElementById("fork-result");
  button.disabled = true;
  result.replaceChildren();
  try {
    const answer = await window.controlplane.api("POST", "/api/v1/experiments", {
      config: form.elements.config.value, parentId: Number(form.dataset.parent), activate: true,
    });
    window.location.assign(`/experiments/${answer.experiment.id}`);
  } catch (err) {
    const list = document.createElement("ul");
    list.id = "fork-errors";
    for (const line of err.message.split("\n")) {
      const li = document.createElement("li");
      li.textContent = line;
      list.appendChild(li);
    }
    result.className = "error";
    result.replaceChildren(list);
  } finally {
    button.disabled = false;
  }
});

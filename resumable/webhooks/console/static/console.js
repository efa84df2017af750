// The console works without this file; it only says, while you type, whether
// a JSON field parses (the server checks again and has the last word), and
// reloads a live session's page until the operator starts using it.
"use strict";

function checkJson(area) {
  let hint = area.parentElement.querySelector(".json-hint");
  if (!hint) {
    hint = document.createElement("span");
    hint.className = "json-hint";
    area.insertAdjacentElement("afterend", hint);
  }
  const text = area.value.trim();
  let problem = "";
  if (text) {
    try {
      JSON.parse(text);
    } catch (error) {
      problem = "Not valid JSON yet: " + error.message;
    }
  }
  hint.textContent = problem;
  area.classList.toggle("invalid", problem !== "");
}

// A page marked live (#live[data-refresh]) reloads every so many seconds,
// and stops for good once the operator types, clicks or ticks "Pause": a
// reload must never eat a half-filled form.
function refreshWhileIdle(live) {
  const seconds = Number(live.dataset.refresh);
  if (!(seconds > 0)) return;
  let touched = false;
  const stop = () => { touched = true; };
  for (const kind of ["input", "focusin", "mousedown", "keydown"]) {
    document.addEventListener(kind, stop, { capture: true });
  }
  setTimeout(() => {
    const paused = document.getElementById("pause-refresh");
    if (!touched && !(paused && paused.checked)) location.reload();
  }, seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const area of document.querySelectorAll("textarea[data-json]")) {
    area.addEventListener("input", () => checkJson(area));
  }
  const live = document.getElementById("live");
  if (live) refreshWhileIdle(live);
});

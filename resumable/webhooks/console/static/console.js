// The console works without this file; it only says, while you type, whether
// a JSON field parses (the server checks again and has the last word).
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

document.addEventListener("DOMContentLoaded", () => {
  for (const area of document.querySelectorAll("textarea[data-json]")) {
    area.addEventListener("input", () => checkJson(area));
  }
});

"""The dashboard's one script and one style sheet, served from ``/static/`` (no inline
script or style: the Content-Security-Policy allows scripts and styles from 'self' only).

The script never builds HTML from data: every text it puts in the page goes through
``textContent``, and rows are found by comparing ``dataset`` values, never by a selector
built from bundle-controlled names.
"""

from __future__ import annotations

from typing import Final

SCRIPT: Final = r"""
"use strict";
(function () {
  const body = document.body;
  const run = body.dataset.run;
  if (!run) return;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const base = "/runs/" + encodeURIComponent(run);

  function rowOf(table, attr, value) {
    for (const row of document.querySelectorAll(table + " [data-" + attr + "]")) {
      if (row.dataset[attr] === value) return row;
    }
    return null;
  }
  function receiptItem(id, kind, status) {
    const list = document.getElementById("receipts");
    if (!list) return;
    let item = rowOf("#receipts", "command", id);
    if (!item) {
      item = document.createElement("li");
      item.dataset.command = id;
      item.dataset.kind = kind;
      const code = document.createElement("code");
      code.textContent = id;
      const what = document.createElement("span");
      what.className = "kind";
      what.textContent = " " + kind + " ";
      const state = document.createElement("span");
      state.className = "status";
      item.append(code, what, state);
      list.appendChild(item);
    }
    const span = item.querySelector("span.status");
    if (status !== "pending" || span.textContent === "") span.textContent = status;
  }
  function recount() {
    // the summary "tasks: done 2, open 1" as the server writes it: states sorted, counted
    const summary = document.getElementById("run-outcomes");
    if (!summary) return;
    const counts = new Map();
    for (const cell of document.querySelectorAll("#tasks td.state")) {
      counts.set(cell.textContent, (counts.get(cell.textContent) || 0) + 1);
    }
    const states = Array.from(counts.keys()).sort();
    summary.textContent = states.map((s) => s + " " + counts.get(s)).join(", ") || "none";
  }
  if (body.dataset.live === "1" && window.EventSource) {
    const url = base + "/events?cursor=" + encodeURIComponent(body.dataset.cursor) +
      "&generation=" + encodeURIComponent(body.dataset.generation);
    const source = new EventSource(url);
    source.addEventListener("task", function (event) {
      const data = JSON.parse(event.data);
      const row = rowOf("#tasks", "task", data.task);
      if (!row) { location.reload(); return; }
      row.querySelector("td.state").textContent = data.state;
      row.querySelector("td.reason").textContent = data.reason;
      row.querySelector("td.attempts").textContent = String(data.attempts);
      recount();
    });
    source.addEventListener("receipt", function (event) {
      const data = JSON.parse(event.data);
      receiptItem(data.command, data.kind, data.status);
    });
    source.addEventListener("run", function (event) {
      const data = JSON.parse(event.data);
      const state = document.getElementById("run-state");
      if (state) state.textContent = data.state;
      const epoch = document.getElementById("run-epoch");
      if (epoch) epoch.textContent = String(data.epoch);
    });
    source.addEventListener("resync", function () {
      source.close();
      location.reload();
    });
  }
  const form = document.getElementById("control-form");
  if (form) {
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    for (const button of form.querySelectorAll("button[data-command]")) {
      button.addEventListener("click", async function () {
        const payload = { kind: button.dataset.command };
        for (const name of ["text", "task", "review"]) {
          const input = form.elements.namedItem(name);
          if (input && input.value) payload[name] = input.value;
        }
        const out = document.getElementById("control-error");
        out.textContent = "";
        try {
          const response = await fetch(base + "/commands", {
            method: "POST",
            headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
            body: JSON.stringify(payload),
            credentials: "same-origin",
          });
          const data = await response.json();
          if (!response.ok) { out.textContent = data.error || String(response.status); return; }
          receiptItem(data.command, payload.kind, "pending");
        } catch (error) {
          out.textContent = String(error);
        }
      });
    }
  }
})();
"""

STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
pre { background: #f8f8f8; border: 1px solid #ddd; padding: .5em; overflow: auto;
      max-height: 30em; white-space: pre-wrap; }
section { margin: 1.5em 0; }
.muted { color: #777; }
.problem { color: #b00; }
td.state, span.status { font-weight: 600; }
#control-error { color: #b00; }
nav a { margin-right: 1em; }
"""

// The running page's live table: every second, /api/running is read and the rows are
// rebuilt. Values are set as text (textContent), never as HTML.
"use strict";

function cell(row, text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  if (text !== undefined && text !== null) td.textContent = String(text);
  row.appendChild(td);
  return td;
}

function link(href, text, className) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  if (className) a.className = className;
  return a;
}

function flag(td, text, className) {
  const span = document.createElement("span");
  span.className = "flag " + className;
  span.textContent = text;
  td.appendChild(span);
}

function runningRow(task, actions) {
  const row = document.createElement("tr");
  row.dataset.task = task.id;
  cell(row).appendChild(link("/tasks/" + encodeURIComponent(task.id), task.id));
  cell(row, task.queue || "-");
  cell(row, task.worker || "-");
  cell(row, task.attempt, "num");
  const progress = cell(row, null, "progress");
  if (task.fraction !== null) {
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = task.fraction;
    progress.appendChild(bar);
    const percent = document.createElement("span");
    percent.className = "percent";
    percent.textContent = " " + Math.round(task.fraction * 100) + "%";
    progress.appendChild(percent);
  } else {
    progress.textContent = task.done === null ? "-" : String(task.done);
  }
  cell(row, task.message || "");
  cell(row, task.time_left);
  cell(row, task.running_for);
  const flags = cell(row);
  if (task.stalled) flag(flags, "stalled", "stalled");
  if (task.cancel_requested) flag(flags, "canceling", "canceling");
  if (actions) {
    const td = cell(row);
    if (!task.cancel_requested) {
      const query = "?task=" + encodeURIComponent(task.id) + "&next=%2Frunning";
      td.appendChild(link("/confirm/cancel" + query, "cancel", "action danger"));
    }
  }
  return row;
}

function poll(table) {
  const body = table.tBodies[0];
  const count = document.getElementById("running-count");
  async function refresh() {
    try {
      const response = await fetch(table.dataset.poll, {headers: {Accept: "application/json"}});
      if (!response.ok) throw new Error(response.status);
      const data = await response.json();
      body.replaceChildren(...data.tasks.map((task) => runningRow(task, data.actions)));
      if (count) count.textContent = String(data.tasks.length);
      table.classList.remove("stale");
    } catch (error) {
      table.classList.add("stale");  // shown greyed out until the next read works
    }
  }
  setInterval(refresh, 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table[data-poll]").forEach(poll);
});

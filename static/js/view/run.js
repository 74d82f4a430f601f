// The run around the tree: output text, metrics and the step timeline.

import { outputSegments } from "../model/events.js";
import { formatNumber, shadeClass } from "../model/format.js";
import { sharedNote } from "../model/timesplit.js";
import { barChart } from "./charts.js";
import { el } from "./dom.js";
import { timeSplitChart } from "./timesplit.js";

/** Generated text, one span per step, shaded by how many drafts that step accepted (`drafts`: the policy drafts). */
export function renderOutput(box, run, drafts = true) {
  box.replaceChildren();
  // Plain decoding drafts nothing, so none of its steps rejected anything: no shade, not the red of "0 accepted".
  for (const segment of outputSegments(run)) {
    const title = segment.step == null ? "final text"
      : drafts ? `step ${segment.step}: ${segment.accepted} accepted + 1 from the target`
        : `step ${segment.step}: the target's own token (plain decoding drafts nothing)`;
    box.append(el("span", { class: `step-chunk ${drafts ? shadeClass(segment.accepted) : "shade-none"}`, title }, segment.text));
  }
}

export function renderMetrics(box, summary, speedup, onPick = null) {
  const values = [
    ["τ", formatNumber(summary.tau), "mean tokens per step (accepted + 1)"],
    ["δ", formatNumber(summary.delta), "mean draft forwards per step"],
    ["tokens/s", formatNumber(summary.tokensPerS, 1), "generated tokens per second of wall time"],
    ["steps", String(summary.steps), "draft-then-verify cycles"],
    ["tokens", String(summary.tokens), "generated tokens"],
    ["c", formatNumber(summary.c, 3), "draft forward time / verify forward time"],
    ["speedup vs ar", speedup == null ? "run ar to see" : `${formatNumber(speedup)}×`, "tokens/s over plain decoding with the same setup"],
  ];
  const grid = el("dl", { class: "metric-values" });
  for (const [name, value, help] of values) {
    const item = el("div", { title: help, class: "metric" });
    item.append(el("dt", {}, name), el("dd", {}, value));
    grid.append(item);
  }
  const charts = el("div", { class: "metric-charts" });
  charts.append(
    barChart("accepted per step", summary.series.accepted, "accepted", { onPick }),
    barChart("tree size per step", summary.series.treeSize, "tree-size", { onPick }),
    barChart("tree depth per step", summary.series.depth, "tree-depth", { onPick }),
    barChart("tree width per step", summary.series.width, "tree-width", { onPick }),
  );
  box.replaceChildren(grid, charts, adjustmentList(summary.adjustments ?? []));
}

/** An adaptive policy's parameter changes, latest last, so a lecture can point at them. */
function adjustmentList(adjustments) {
  const list = el("ul", { class: "adjustments" });
  for (const a of adjustments.slice(-5)) {
    list.append(el("li", {}, `step ${a.step}: ${a.param} ${formatNumber(a.old, 3)} → ${formatNumber(a.new, 3)} (${a.why})`));
  }
  if (adjustments.length > 5) list.prepend(el("li", { class: "hint" }, `${adjustments.length - 5} earlier adjustments`));
  return list;
}

/** One cell per step, shaded by accepted drafts; clicking or the slider picks the step shown. */
export function renderTimeline(box, run, shownIndex, onPick) {
  const slider = box.querySelector("input[type=range]");
  const cells = box.querySelector(".timeline-cells");
  const count = run.steps.length;
  slider.max = String(Math.max(0, count - 1));
  slider.value = String(Math.max(0, shownIndex));
  slider.disabled = count === 0;
  box.querySelector(".timeline-label").textContent = timelineLabel(shownIndex, count);
  cells.replaceChildren();
  run.steps.forEach((step, i) => {
    const accepted = step.text?.accepted ?? null;
    const cell = el("button", { type: "button", class: `timeline-cell ${shadeClass(accepted)}${i === shownIndex ? " current" : ""}`,
                                title: `step ${step.step}: ${accepted ?? "?"} accepted`, "aria-label": `step ${step.step}` });
    cell.addEventListener("click", () => onPick(i));
    cells.append(cell);
  });
}

function timelineLabel(shownIndex, count) {
  if (!count) return "no steps yet";
  return shownIndex < 0 ? `start · ${count} steps` : `step ${shownIndex + 1} of ${count}`;
}

/** Each step's draft, verify and other time as a stacked bar, with the run's totals (view/timesplit.js). */
export function renderTimeSplit(box, times, { current = -1, onPick = null } = {}) {
  if (!times.length) {
    box.replaceChildren(el("p", { class: "hint" }, "Each step's draft, verify and other time appears here as the run goes."));
    return;
  }
  const width = Math.max(320, Math.min(1200, box.clientWidth || 640));
  const shared = sharedNote(times);
  box.replaceChildren(...(shared ? [el("p", { class: "shared-note", "data-testid": "shared-note" }, shared)] : []),
                      timeSplitChart(times, { current, onPick, width, height: width < 500 ? 180 : 200 }));
}

/** What /api/info says the page's numbers rest on: costs assumed, a default policy not measured here. */
export function renderEngineNotes(box, info) {
  const notes = [info.costs_note, /not measured/.test(info.default_policy_note ?? "") ? info.default_policy_note : null]
    .filter(Boolean);
  box.replaceChildren(...notes.map((note) => el("p", { class: "engine-note" }, note)));
  box.hidden = !notes.length;
}

// Where each step's time went: a stacked bar per step (draft, verify, other ms, from
// model/timesplit.js) under the run's totals, so a slow run says why. Hook: data-testid=time-split.

import { formatNumber } from "../model/format.js";
import { linear, niceMax, niceTicks } from "../model/scale.js";
import { TIME_PARTS, timeTotals } from "../model/timesplit.js";
import { axisX, axisY, frame, legend } from "./charts.js";
import { el, svgEl } from "./dom.js";

// The parts' colours, shared by bars and legend swatches (set as attributes, so an SVG export keeps them).
const PART_COLOUR = { draft: "#c9731f", verify: "#2f5fd0", other: "#8d99a8" };
const PART_HELP = { draft: "drafting: the drafter's forwards and the policy", verify: "the target's forward over the tree",
                    other: "acceptance, cache compaction, events" };

/** The run's totals in one line: each part's ms and share, the steps and their time. */
export function totalsText(totals) {
  if (!totals) return "no step has finished yet";
  const parts = TIME_PARTS.map((part) => `${part} ${formatMs(totals[part])} (${Math.round(totals.share[part] * 100)} %)`);
  return `${parts.join(" · ")} — ${totals.steps} steps, ${formatMs(totals.total)}`;
}

function formatMs(ms) {
  return ms >= 1000 ? `${formatNumber(ms / 1000, 2)} s` : `${formatNumber(ms, ms < 10 ? 1 : 0)} ms`;
}

/**
 * The chart: one stacked bar per step (bottom to top: draft, verify, other), the step shown marked,
 * a click picks a step; `steps` and `yMax` fix the axes (panes share them). Each segment carries
 * data-step, data-part and data-ms.
 */
export function timeSplitChart(times, { current = -1, onPick = null, width = 640, height = 200, steps = null, yMax = null } = {}) {
  const totals = timeTotals(times);
  const count = Math.max(steps ?? times.length, 1);
  const chart = frame({ title: "time per step: draft, verify, other", width, height, left: 56, right: 8, top: 10, bottom: 40,
                        testid: "time-split", kind: "time-split" });
  chart.figure.dataset.testid = "time-split-figure";
  legend(chart, TIME_PARTS.map((part) => ({ label: part, colour: PART_COLOUR[part] })));
  const { x0, x1, y0, y1 } = chart.plot;
  // Panes side by side share one y range (yMax), so their bars compare at a glance.
  const top = niceMax(yMax != null ? [yMax] : times.map((t) => t.total), 1);
  const y = linear(0, top, y0, y1);
  axisY(chart, y, niceTicks(0, top, 4).filter((t) => t <= top), "ms");
  const band = (x1 - x0) / count;
  const tickEvery = Math.max(1, Math.ceil(count / 8));
  const ticks = [];
  for (let i = 0; i < count; i += tickEvery) ticks.push(i);
  axisX(chart, (i) => x0 + (i + 0.5) * band, ticks, "step", (i) => String(i + 1));
  times.forEach((t, i) => {
    let base = 0;
    const bar = svgEl("g", { class: `time-bar${i === current ? " current" : ""}`, "data-step": String(t.step) });
    for (const part of TIME_PARTS) {
      const from = y(base);
      base += t[part];
      bar.append(svgEl("rect", { x: x0 + i * band + band * 0.1, y: y(base), width: Math.max(band * 0.8, 0.8),
                                 height: Math.max(from - y(base), 0), class: `time-part ${part}`, fill: PART_COLOUR[part],
                                 "data-part": part, "data-ms": String(t[part]), "data-step": String(t.step) }));
    }
    bar.append(svgEl("title", {}, `step ${t.step}: ${TIME_PARTS.map((p) => `${p} ${formatMs(t[p])}`).join(", ")}`));
    if (onPick) bar.addEventListener("click", () => onPick(i));
    chart.svg.append(bar);
  });
  if (current >= 0 && current < count) {
    chart.svg.append(svgEl("rect", { x: x0 + current * band, y: y1, width: Math.max(band, 2), height: y0 - y1, class: "cursor" }));
  }
  const summary = el("p", { class: "time-totals", "data-testid": "time-totals" }, totalsText(totals));
  summary.title = TIME_PARTS.map((part) => `${part}: ${PART_HELP[part]}`).join("; ");
  if (totals) for (const part of TIME_PARTS) summary.dataset[part] = String(totals[part]);
  chart.figure.append(summary);
  return chart.figure;
}

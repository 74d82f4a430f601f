// The /results page's step-shape charts: where the step time went, per-depth acceptance and the
// acceptance-length histogram. Series come from model/results.js; frame, axes and legend from charts.js.
// A report that predates a chart's data (version 1) gets the chart's frame and a note saying so.

import { linear, log2, niceTicks, tickText } from "../model/scale.js";
import { axisX, axisY, frame, legend, note } from "./charts.js";
import { svgEl } from "./dom.js";

// The three parts of a step's time, in the Okabe–Ito colours the policies use least.
const PARTS = [
  { key: "draft", label: "draft (drafter and policy)", colour: "#E69F00" },
  { key: "verify", label: "verify (the target's forward)", colour: "#56B4E9" },
  { key: "other", label: "other (acceptance, cache, events)", colour: "#bdbdbd" },
];

const percent = (share) => `${Math.round(share * 100)}%`;

// Charts sit in a grid of 440-px columns (16 px apart, in a framed box 28 px wider than the chart) and are
// drawn at the width they get there (one or two a row), so their text keeps its size on a phone.
const COLUMN = 440;
const GAP = 16;
const FRAMING = 28;

/** The width to draw a chart at in a grid `box` pixels wide (the grid's CSS: results-charts, compare-shape-charts). */
export function chartWidth(box) {
  const columns = Math.max(1, Math.floor((box + GAP) / (COLUMN + GAP)));
  return Math.max(280, Math.round((box - GAP * (columns - 1)) / columns - FRAMING));
}

// Said on short lines: the frame is as narrow as a phone's.
function predates(chart, what, version) {
  const { x0, x1, y0, y1 } = chart.plot;
  const lines = [`this report (version ${version})`, `predates ${what}:`, "a run of the current", "specscope bench fills it"];
  const text = svgEl("text", { x: (x0 + x1) / 2, y: (y0 + y1) / 2 - 27, "text-anchor": "middle", class: "note" });
  lines.forEach((line, i) => text.append(svgEl("tspan", { x: (x0 + x1) / 2, dy: i ? 18 : 0 }, line)));
  chart.svg.append(text);
  return chart.figure;
}

/** Stacked horizontal bars: each policy's step time split into draft, verify and other, as shares. */
export function timeSplitChart(series, { width = 640 } = {}) {
  const left = 16 + 7 * Math.max(4, ...series.map((s) => s.label.length));
  const chart = frame({ title: "Where the step time went", kind: "time-split", testid: "results-time-split", left,
                        width, height: Math.max(160, 70 + 30 * series.length), top: 8,
                        caption: "shares of each policy's step time over the whole run; Hugging Face's baselines keep no split" });
  const { x0, x1, y0, y1 } = chart.plot;
  const x = linear(0, 1, x0, x1);
  axisX(chart, x, [0, 0.25, 0.5, 0.75, 1], "share of the step time", percent);
  const band = (y0 - y1) / Math.max(series.length, 1);
  series.forEach((row, i) => {
    const y = y1 + i * band + band * 0.18;
    const h = band * 0.64;
    chart.svg.append(svgEl("text", { x: x0 - 8, y: y + h / 2 + 4, "text-anchor": "end", class: "tick" }, row.label));
    let start = 0;
    for (const part of PARTS) {
      const share = row[part.key];
      const rect = svgEl("rect", { x: x(start), y, width: Math.max(x(start + share) - x(start), 0), height: h,
                                   fill: part.colour, "data-policy": row.label, "data-part": part.key,
                                   "data-value": share.toFixed(3) });
      rect.append(svgEl("title", {}, `${row.label}: ${percent(share)} ${part.label}`));
      chart.svg.append(rect);
      if (x(start + share) - x(start) > 34) {
        chart.svg.append(svgEl("text", { x: (x(start) + x(start + share)) / 2, y: y + h / 2 + 4, "text-anchor": "middle",
                                         class: "value" }, percent(share)));
      }
      start += share;
    }
  });
  legend(chart, PARTS.map((part) => ({ label: part.label, colour: part.colour })));
  return chart.figure;
}

/**
 * Lines per drafting policy over depth: conditional acceptance solid (given every draft above was accepted),
 * unconditional dashed (of all steps drafting to that depth). `series` null: the report predates them.
 */
export function acceptanceByDepthChart(series, colours, { width = 640, version = 1 } = {}) {
  const chart = frame({ title: "Acceptance by depth", kind: "acceptance-by-depth", testid: "acceptance-by-depth", width,
                        caption: "solid: accepted at depth d given accepted to d − 1; dashed: accepted at d of all " +
                                 "steps whose tree reached d (as vLLM and SGLang report it)" });
  if (series == null) return predates(chart, "per-depth acceptance", version);
  const points = series.flatMap((s) => s.points);
  if (!points.length) {
    note(chart, "no drafting policy in this report");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const deepest = Math.max(...points.map((p) => p.depth));
  const x = linear(deepest > 1 ? 1 : 0, Math.max(deepest, 2), x0 + 8, x1 - 8);
  const y = linear(0, 1, y0, y1);
  const ticks = niceTicks(1, Math.max(deepest, 2), 6).filter((t) => Number.isInteger(t) && t >= 1 && t <= deepest);
  axisX(chart, x, ticks.length ? ticks : [1], "depth of the draft (d)", tickText);
  axisY(chart, y, [0, 0.25, 0.5, 0.75, 1], "share accepted", percent);
  for (const line of series) {
    const colour = colours[line.label];
    const path = (key) => line.points.filter((p) => p[key] != null)
      .map((p, k) => `${k ? "L" : "M"}${x(p.depth).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    chart.svg.append(svgEl("path", { d: path("rate"), fill: "none", stroke: colour, "stroke-width": 1.5,
                                     "stroke-dasharray": "5 3", "data-policy": line.label, "data-rate": "unconditional" }),
                     svgEl("path", { d: path("conditional"), fill: "none", stroke: colour, "stroke-width": 2,
                                     "data-policy": line.label, "data-rate": "conditional" }));
    for (const p of line.points) {
      if (p.conditional == null) continue;
      const dot = svgEl("circle", { cx: x(p.depth), cy: y(p.conditional), r: 3, fill: colour, "data-policy": line.label,
                                    "data-depth": p.depth, "data-value": p.conditional.toFixed(3),
                                    "data-unconditional": p.rate.toFixed(3) });
      dot.append(svgEl("title", {}, `${line.label} at depth ${p.depth}: ${p.accepted} of ${p.reached} steps that ` +
                                    `reached it (${percent(p.conditional)}); ${p.accepted} of ${p.drafted} that drafted ` +
                                    `there (${percent(p.rate)})`));
      chart.svg.append(dot);
    }
  }
  legend(chart, series.map((line) => ({ label: line.label, colour: colours[line.label], shape: "round" })));
  return chart.figure;
}

/** Grouped bars: the share of each drafting policy's steps that emitted k tokens (the bonus counted). */
export function acceptLengthChart(data, colours, { width = 640, version = 1 } = {}) {
  const chart = frame({ title: "Tokens per step (acceptance length)", kind: "accept-length-histogram",
                        testid: "accept-length-histogram", width,
                        caption: "k counts the accepted drafts and the target's own token (recovered or bonus), " +
                                 "as τ does: a step that accepts nothing emits 1; ar always emits 1" });
  if (data == null) return predates(chart, "tokens per step", version);
  const { lengths, series } = data;
  if (!series.length) {
    note(chart, "no drafting policy in this report");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const top = Math.max(...series.flatMap((s) => s.shares));
  const y = linear(0, Math.min(1, niceTicks(0, top).at(-1)), y0, y1);
  axisY(chart, y, niceTicks(0, y.high, 4), "share of steps", percent);
  const group = (x1 - x0) / lengths.length;
  const barWidth = (group * 0.84) / series.length;
  const every = Math.max(1, Math.ceil(lengths.length / Math.max(2, Math.floor((x1 - x0) / 26))));
  lengths.forEach((k, i) => {
    if (i % every === 0 || k === lengths.at(-1)) {
      chart.svg.append(svgEl("text", { x: x0 + (i + 0.5) * group, y: y0 + 16, "text-anchor": "middle", class: "tick" },
                             String(k)));
    }
    series.forEach((line, s) => {
      const share = line.shares[i];
      if (!share) return;
      const rect = svgEl("rect", { x: x0 + i * group + group * 0.08 + s * barWidth, y: y(share),
                                   width: Math.max(barWidth - 0.6, 0.8), height: y0 - y(share), fill: colours[line.label],
                                   "data-policy": line.label, "data-tokens": k, "data-steps": line.steps[i],
                                   "data-value": share.toFixed(3) });
      rect.append(svgEl("title", {}, `${line.label}: ${line.steps[i]} of ${line.total} steps emitted ${k} ` +
                                     `token${k === 1 ? "" : "s"} (${percent(share)})`));
      chart.svg.append(rect);
    });
  });
  chart.svg.append(svgEl("line", { x1: x0, y1: y0, x2: x1, y2: y0, class: "axis-line" }));
  chart.svg.append(svgEl("text", { x: (x0 + x1) / 2, y: chart.height - 4, "text-anchor": "middle", class: "axis-label" },
                         "tokens emitted in one step (k)"));
  legend(chart, series.map((line) => ({ label: line.label, colour: colours[line.label] })));
  return chart.figure;
}

/** Lines: each drafting policy's speedup over ar at every batch size of a sweep; ar at the same batch is 1. */
export function batchSweepChart(data, colours, { width = 640 } = {}) {
  const chart = frame({ title: "Speedup against batch size", kind: "batch-sweep", testid: "batch-sweep", width,
                        caption: "each point: the policy's tokens/s over ar's at the same batch (B requests " +
                                 "verified in one forward), prompts B at a time" });
  if (data == null) {
    note(chart, "this report ran one batch size (bench --batch 1,2,4,8 draws this)");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const { batches, lines } = data;
  const x = batches.length > 1 ? log2(batches[0], batches.at(-1), x0 + 12, x1 - 12) : () => (x0 + x1) / 2;
  const values = lines.flatMap((line) => line.points.map((p) => p.speedup));
  const y = linear(0, niceTicks(0, Math.max(1.2, ...values)).at(-1), y0, y1);
  axisX(chart, x, batches, "requests in one forward (batch, log scale)", String);
  axisY(chart, y, niceTicks(0, y.high, 4), "speedup over ar (same batch)");
  chart.svg.append(svgEl("line", { x1: x0, y1: y(1), x2: x1, y2: y(1), class: "reference" }));
  for (const line of lines) {
    const colour = colours[line.label];
    const d = line.points.map((p, k) => `${k ? "L" : "M"}${x(p.batch).toFixed(1)},${y(p.speedup).toFixed(1)}`).join(" ");
    chart.svg.append(svgEl("path", { d, fill: "none", stroke: colour, "stroke-width": 2, "data-policy": line.label }));
    for (const p of line.points) {
      const dot = svgEl("circle", { cx: x(p.batch), cy: y(p.speedup), r: 3.5, fill: colour, "data-policy": line.label,
                                    "data-batch": p.batch, "data-value": p.speedup.toFixed(2) });
      dot.append(svgEl("title", {}, `${line.label} at batch ${p.batch}: ${p.speedup.toFixed(2)}× ar`));
      chart.svg.append(dot);
    }
  }
  legend(chart, lines.map((line) => ({ label: line.label, colour: colours[line.label], shape: "round" })));
  return chart.figure;
}

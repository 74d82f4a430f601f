// Charts drawn as SVG: labelled axes, bars, points, lines and tree silhouettes. The numbers come
// from model/ (results.js, compare.js); scales from model/scale.js. Marks carry their data
// (data-policy, data-value, …) so tests and readers can check a chart against its source.

import { formatNumber } from "../model/format.js";
import { linear, log2, log2Ticks, niceMax, niceTicks, tickText } from "../model/scale.js";
import { el, svgEl } from "./dom.js";

// ---------------------------------------------------------------- frame and axes

/**
 * An empty chart: an SVG that scales to its box (viewBox), a plot area inside margins, a title.
 * Returns { figure, svg, plot: { x0, x1, y0, y1 } } with y0 the bottom of the plot area.
 */
export function frame({ title, width = 640, height = 340, left = 56, right = 20, top = 16, bottom = 48,
                        testid = "results-chart", kind = "", caption = null }) {
  const figure = el("figure", { class: `chart-figure ${kind}` });
  figure.append(el("figcaption", {}, title));
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title,
                             "data-testid": testid, "data-chart": kind, preserveAspectRatio: "xMidYMid meet",
                             class: "chart-svg" });
  svg.append(svgEl("title", {}, title));
  figure.append(svg);
  if (caption) figure.append(el("p", { class: "hint chart-caption" }, caption));
  return { figure, svg, width, height, plot: { x0: left, x1: width - right, y0: height - bottom, y1: top } };
}

export function axisX(chart, scale, ticks, label, format = tickText) {
  const { x0, x1, y0 } = chart.plot;
  const group = svgEl("g", { class: "axis axis-x" });
  group.append(svgEl("line", { x1: x0, y1: y0, x2: x1, y2: y0, class: "axis-line" }));
  for (const tick of ticks) {
    const x = scale(tick);
    group.append(svgEl("line", { x1: x, y1: y0, x2: x, y2: y0 + 4, class: "tick-mark" }),
                 svgEl("text", { x, y: y0 + 16, "text-anchor": "middle", class: "tick" }, format(tick)));
  }
  group.append(svgEl("text", { x: (x0 + x1) / 2, y: chart.height - 4, "text-anchor": "middle", class: "axis-label" }, label));
  chart.svg.append(group);
}

export function axisY(chart, scale, ticks, label, format = tickText) {
  const { x0, x1, y0, y1 } = chart.plot;
  const group = svgEl("g", { class: "axis axis-y" });
  for (const tick of ticks) {
    const y = scale(tick);
    group.append(svgEl("line", { x1: x0, y1: y, x2: x1, y2: y, class: "grid" }),
                 svgEl("text", { x: x0 - 6, y: y + 4, "text-anchor": "end", class: "tick" }, format(tick)));
  }
  group.append(svgEl("line", { x1: x0, y1: y0, x2: x0, y2: y1, class: "axis-line" }));
  const middle = (y0 + y1) / 2;
  group.append(svgEl("text", { x: 12, y: middle, "text-anchor": "middle", class: "axis-label",
                               transform: `rotate(-90 12 ${middle})` }, label));
  chart.svg.append(group);
}

function referenceLine(chart, x1, y1, x2, y2) {
  chart.svg.append(svgEl("line", { x1, y1, x2, y2, class: "reference" }));
}

/** Swatches and labels, as HTML above the chart so they wrap at any width (swatches are tiny SVGs: no inline style). */
export function legend(chart, items) {
  const list = el("ul", { class: "chart-legend" });
  for (const { label, colour, shape = "square" } of items) {
    const swatch = svgEl("svg", { class: "swatch-dot", viewBox: "0 0 10 10", "aria-hidden": "true" });
    swatch.append(shape === "round" ? svgEl("circle", { cx: 5, cy: 5, r: 5, fill: colour })
                                    : svgEl("rect", { width: 10, height: 10, fill: colour }));
    const item = el("li");
    item.append(swatch, document.createTextNode(label));
    list.append(item);
  }
  chart.figure.insertBefore(list, chart.svg);
}

export function note(chart, text) {
  const { x0, x1, y0, y1 } = chart.plot;
  chart.svg.append(svgEl("text", { x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle", class: "note" }, text));
}

// ---------------------------------------------------------------- the results page's four charts

/** Horizontal bars: speedup vs ar per policy, Hugging Face's decoding in grey, a dashed line at 1×. */
export function speedupChart(bars, colours, { width = 640, intervalLevel = null } = {}) {
  // Baselines are told by their grey and the caption, not by a suffix that would take a third of a phone's width.
  const names = bars.map((b) => b.label);
  const left = 16 + 7 * Math.max(4, ...names.map((n) => n.length));
  const caption = [bars.some((b) => b.baseline) ? "grey: Hugging Face's own decoding (hf-…), same prompts" : null,
                   bars.some((b) => b.interval) && intervalLevel
                     ? `whiskers: where ${Math.round(intervalLevel * 100)}% of the speedups fall with the prompts drawn again`
                     : null].filter(Boolean).join("; ") || null;
  const chart = frame({ title: "Speedup vs ar (tokens/s over ar's, same prompts)", kind: "speedup", left, width,
                        height: Math.max(180, 70 + 30 * bars.length), top: 8, caption });
  const { x0, x1, y0, y1 } = chart.plot;
  const values = [...bars.map((b) => b.value).filter((v) => v != null), ...bars.filter((b) => b.interval).map((b) => b.interval[1])];
  const scale = linear(0, niceMax(values.map((v) => v * 1.15)), x0, x1);
  axisX(chart, scale, niceTicks(0, scale.high), "speedup vs ar (×)", (t) => `${tickText(t)}×`);
  const band = (y0 - y1) / Math.max(bars.length, 1);
  bars.forEach((bar, i) => {
    const y = y1 + i * band + band * 0.18;
    const h = band * 0.64;
    chart.svg.append(svgEl("text", { x: x0 - 8, y: y + h / 2 + 4, "text-anchor": "end", class: "tick" }, names[i]));
    if (bar.value == null) return;
    const rect = svgEl("rect", { x: x0, y, width: Math.max(scale(bar.value) - x0, 1), height: h, fill: colours[bar.label],
                                 "fill-opacity": bar.baseline ? 0.55 : null, "data-policy": bar.label,
                                 "data-value": bar.value.toFixed(2), "data-baseline": String(bar.baseline) });
    rect.append(svgEl("title", {}, `${bar.label}: ${bar.value.toFixed(2)}× ar's tokens/s`));
    chart.svg.append(rect);
    let right = scale(bar.value);
    if (bar.interval) { // a whisker over the speedup's interval with the prompts drawn again (tools/report.py)
      const [low, high] = bar.interval;
      const middle = y + h / 2;
      const whisker = svgEl("line", { x1: scale(low), y1: middle, x2: scale(high), y2: middle, class: "interval",
                                      "data-policy": bar.label, "data-low": low.toFixed(2), "data-high": high.toFixed(2) });
      whisker.append(svgEl("title", {}, `${bar.label}: the speedups with the prompts drawn again fall in ` +
                                        `${low.toFixed(2)}–${high.toFixed(2)}×`));
      chart.svg.append(whisker, ...[low, high].map((end) => svgEl("line", { x1: scale(end), y1: middle - 4, x2: scale(end),
                                                                           y2: middle + 4, class: "interval-end" })));
      right = Math.max(right, scale(high));
    }
    chart.svg.append(svgEl("text", { x: right + 4, y: y + h / 2 + 4, class: "value" }, `${bar.value.toFixed(2)}×`));
  });
  referenceLine(chart, scale(1), y1, scale(1), y0);
  return chart.figure;
}

/** Grouped bars: τ per prompt category, one bar per drafting policy, ar's τ = 1 dashed. */
export function tauByCategoryChart({ categories, series }, colours, { width = 640 } = {}) {
  const chart = frame({ title: "τ (tokens per step) per prompt category", kind: "tau-by-category", bottom: 64, width });
  if (!categories.length || !series.length) {
    note(chart, "this results.json has no per-category τ (re-run a current specscope bench)");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const scale = linear(0, niceMax(series.flatMap((s) => s.values)), y0, y1);
  axisY(chart, scale, niceTicks(0, scale.high), "τ (tokens per step)");
  const group = (x1 - x0) / categories.length;
  const barWidth = (group * 0.8) / series.length;
  categories.forEach((category, c) => {
    // Category names turn when they would collide.
    const crowded = group < 8 * Math.max(...categories.map((name) => name.length));
    const label = svgEl("text", { x: x0 + (c + 0.5) * group, y: y0 + 14, "text-anchor": crowded ? "end" : "middle",
                                  class: "tick", transform: crowded ? `rotate(-35 ${x0 + (c + 0.5) * group} ${y0 + 14})` : null },
                        category || "—");
    chart.svg.append(label);
    series.forEach((line, s) => {
      const value = line.values[c];
      if (value == null) return;
      const rect = svgEl("rect", { x: x0 + c * group + group * 0.1 + s * barWidth, y: scale(value), width: Math.max(barWidth - 1, 1),
                                   height: y0 - scale(value), fill: colours[line.label], "data-policy": line.label,
                                   "data-category": category, "data-value": value.toFixed(2) });
      rect.append(svgEl("title", {}, `${line.label} on ${category}: τ ${value.toFixed(2)}`));
      chart.svg.append(rect);
    });
  });
  chart.svg.append(svgEl("line", { x1: x0, y1: y0, x2: x1, y2: y0, class: "axis-line" }));
  referenceLine(chart, x0, scale(1), x1, scale(1));
  legend(chart, series.map((line) => ({ label: line.label, colour: colours[line.label] })));
  return chart.figure;
}

/** Points: mean tokens emitted per step against the verified tree's size; area ∝ steps at that size. */
export function tauVsSizeChart(series, colours, { width = 640 } = {}) {
  const chart = frame({ title: "Tokens per step against the verified tree's size", kind: "tau-vs-tree-size", width,
                        caption: "each point: the steps that verified a tree of that many draft nodes; area ∝ their number" });
  const points = series.flatMap((s) => s.points);
  if (!points.length) {
    note(chart, "this results.json keeps no per-step tree sizes");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const x = linear(0, niceMax(points.map((p) => p.size)), x0, x1);
  const y = linear(0, niceMax(points.map((p) => p.tau)), y0, y1);
  axisX(chart, x, niceTicks(0, x.high), "draft nodes verified in the step (tree size)");
  axisY(chart, y, niceTicks(0, y.high), "tokens per step (mean)");
  const most = Math.max(...points.map((p) => p.steps));
  for (const line of series) {
    for (const p of line.points) {
      const dot = svgEl("circle", { cx: x(p.size), cy: y(p.tau), r: 2.5 + 5.5 * Math.sqrt(p.steps / most),
                                    fill: colours[line.label], "fill-opacity": 0.6, "data-policy": line.label,
                                    "data-size": p.size, "data-steps": p.steps, "data-value": p.tau.toFixed(2) });
      dot.append(svgEl("title", {}, `${line.label}: ${p.steps} steps of size ${p.size}, ${p.tau.toFixed(2)} tokens each`));
      chart.svg.append(dot);
    }
  }
  legend(chart, series.map((line) => ({ label: line.label, colour: colours[line.label], shape: "round" })));
  return chart.figure;
}

/** Lines: the target's forward time of n tokens over one token, per cached context; log₂ n. */
export function costChart(data, palette, { width = 640 } = {}) {
  const chart = frame({ title: "Cost of verifying n tokens over one (the cost table)", kind: "cost-curve", width,
                        caption: data ? `${data.source} cost table; dashed: one token's time` : null });
  if (!data) {
    note(chart, "this run read no cost table (run specscope profile, then bench a cost-aware policy)");
    return chart.figure;
  }
  const { x0, x1, y0, y1 } = chart.plot;
  const ns = data.ns;
  const x = log2(Math.min(...ns), Math.max(...ns), x0, x1);
  const y = linear(0, niceMax(data.lines.flatMap((l) => l.ratio)), y0, y1);
  axisX(chart, x, log2Ticks(ns), "tokens in one forward (n, log scale)", String);
  axisY(chart, y, niceTicks(0, y.high), "time(n) / time(1)");
  referenceLine(chart, x0, y(1), x1, y(1));
  data.lines.forEach((line, i) => {
    const colour = palette[i % palette.length];
    const d = ns.map((n, k) => `${k ? "L" : "M"}${x(n).toFixed(1)},${y(line.ratio[k]).toFixed(1)}`).join(" ");
    chart.svg.append(svgEl("path", { d, fill: "none", stroke: colour, "stroke-width": 2, "data-context": line.context }));
    ns.forEach((n, k) => {
      const dot = svgEl("circle", { cx: x(n), cy: y(line.ratio[k]), r: 3, fill: colour, "data-n": n,
                                    "data-context": line.context, "data-value": line.ratio[k].toFixed(2) });
      dot.append(svgEl("title", {}, `n = ${n} with ${line.context} cached: ${line.ratio[k].toFixed(2)}× one token`));
      chart.svg.append(dot);
    });
  });
  legend(chart, data.lines.map((line, i) => ({ label: `${line.context} tokens cached`, colour: palette[i % palette.length] })));
  return chart.figure;
}

// ---------------------------------------------------------------- compare panes

/**
 * One value per step on shared axes: x the step (1 … steps, the same for every pane), y 0 … yMax.
 * The current step is marked; a click picks a step. `data-ymax` holds the top of the y axis.
 */
export function stepChart({ title, values, steps, yMax, current = -1, onPick = null, kind = "", testid = null,
                            yLabel = "", width = 300, height = 118 }) {
  const chart = frame({ title, width, height, left: 40, right: 8, top: 8, bottom: 36, testid, kind: `step-chart ${kind}` });
  chart.svg.setAttribute("data-ymax", String(yMax));
  chart.svg.setAttribute("data-steps", String(steps));
  const { x0, x1, y0, y1 } = chart.plot;
  const y = linear(0, yMax, y0, y1);
  axisY(chart, y, yMax <= 4 ? Array.from({ length: yMax + 1 }, (_, i) => i) : niceTicks(0, yMax, 4).filter((t) => t <= yMax),
        yLabel);
  const band = (x1 - x0) / Math.max(steps, 1);
  const x = (i) => x0 + i * band;
  const tickEvery = Math.max(1, Math.ceil(steps / 6));
  const xTicks = [];
  for (let i = 0; i < steps; i += tickEvery) xTicks.push(i);
  axisX(chart, (i) => x(i) + band / 2, xTicks, "step", (i) => String(i + 1));
  values.forEach((value, i) => {
    const top = y(Math.min(value, yMax));
    chart.svg.append(svgEl("rect", { x: x(i) + band * 0.1, y: top, width: Math.max(band * 0.8, 0.8), height: y0 - top,
                                     class: `bar${i === current ? " current" : ""}`, "data-step": i + 1, "data-value": value }));
  });
  if (current >= 0) {
    chart.svg.append(svgEl("rect", { x: x(current), y: y1, width: Math.max(band, 2), height: y0 - y1, class: "cursor" }));
  }
  if (onPick) pickByX(chart.svg, x0, band, steps, onPick, (i) => `step ${i + 1}: ${formatNumber(values[i] ?? 0, 0)}`);
  return chart.figure;
}

// One transparent target over the plot: a click picks the step under the pointer (SVG scales with its box).
function pickByX(svg, x0, band, steps, onPick, label) {
  const hit = svgEl("rect", { x: x0, y: 0, width: band * steps, height: "100%", class: "hit" });
  const title = svgEl("title", {}, "click a step to show it in every pane");
  hit.append(title);
  const stepAt = (event) => {
    const box = svg.getBoundingClientRect();
    const viewX = ((event.clientX - box.left) / box.width) * svg.viewBox.baseVal.width;
    return Math.max(0, Math.min(steps - 1, Math.floor((viewX - x0) / band)));
  };
  hit.addEventListener("mousemove", (event) => { title.textContent = label(stepAt(event)); });
  hit.addEventListener("click", (event) => onPick(stepAt(event)));
  svg.append(hit);
}

/**
 * Small multiples: every step's verified tree as a silhouette (one row per depth, as wide as that
 * layer; the accepted depth darker), all at one scale, so deep-narrow and shallow-wide read at a glance.
 */
export function silhouetteStrip(steps, { maxDepth, maxWidth, current = -1, onPick = null }) {
  const cell = 18;
  const rowHeight = Math.max(2, Math.min(8, 60 / Math.max(maxDepth, 1)));
  const height = rowHeight * Math.max(maxDepth, 1) + 4;
  const width = cell * Math.max(steps.length, 1);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "silhouettes", role: "img",
                             "data-testid": "pane-silhouettes",
                             "aria-label": `the tree of each of ${steps.length} steps, at one scale` });
  steps.forEach((step, i) => {
    const group = svgEl("g", { class: `silhouette${i === current ? " current" : ""}`, "data-step": i + 1 });
    group.append(svgEl("title", {}, `step ${i + 1}: ${step.size} drafted, depth ${step.depth}, widest ${step.width}, ` +
                                    `${step.accepted} accepted`));
    group.append(svgEl("rect", { x: i * cell, y: 0, width: cell, height, class: "silhouette-cell" }));
    step.layers.forEach((layerWidth, d) => {
      const w = Math.max(1, (layerWidth / Math.max(maxWidth, 1)) * (cell - 2));
      group.append(svgEl("rect", { x: i * cell + (cell - w) / 2, y: 2 + d * rowHeight, width: w,
                                   height: Math.max(rowHeight - 0.6, 1), class: d < step.accepted ? "layer accepted" : "layer" }));
    });
    if (onPick) group.addEventListener("click", () => onPick(i));
    svg.append(group);
  });
  return svg;
}

/** A small bar chart, one bar per step, with its maximum labelled (the single view's metrics). */
export function barChart(title, values, kind, { width = 220, height = 44, onPick = null } = {}) {
  const figure = el("figure", { class: `chart ${kind}` });
  const max = Math.max(1, ...values);
  figure.append(el("figcaption", {}, `${title} (max ${values.length ? Math.max(...values) : 0})`));
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const barWidth = values.length ? Math.max(1, Math.min(12, width / values.length)) : 0;
  values.forEach((value, i) => {
    const barHeight = (value / max) * (height - 2);
    const bar = svgEl("rect", { x: i * barWidth, y: height - barHeight, width: Math.max(1, barWidth - 1), height: barHeight });
    svg.append(bar);
    // A full-height target per step, so a step with a tiny bar can still be picked.
    const hit = svgEl("rect", { x: i * barWidth, y: 0, width: barWidth, height, class: "hit" });
    hit.append(svgEl("title", {}, `step ${i + 1}: ${value}${onPick ? " (click to show its tree)" : ""}`));
    if (onPick) hit.addEventListener("click", () => onPick(i));
    svg.append(hit);
  });
  figure.append(svg);
  return figure;
}
